"""``CostModel``: seconds and bytes for every node, transfer and collective of one graph on one cluster.

Compute time per node and device type is a roofline, ``max(FLOPs / peak[dtype], bytes / bandwidth)
/ efficiency + overhead per kernel`` (plus, with a small-size penalty ``halfEfficiencyFlops`` h, a
fixed ``h / (peak x efficiency)`` per kernel: efficiency F / (F + h) for a kernel of F FLOPs),
vectorised over all nodes of a type at once; profiled graphs
use their measured times instead (looked up by device type name, then kind, then "accelerator"
for any non-CPU kind). Transfers follow the charging rules of :mod:`planmap.cluster`; measured
transfer times of a profiled graph replace the bytes-based estimate for each paying end (the
paper's ``c_u`` at both ends). Memory terms are per node so solvers can sum them linearly:
parameters (times a training factor for gradients and optimizer state, and the f32 master copy of
mixed-precision training), stashed activations per in-flight microbatch (training; with activation
checkpointing ``remat`` only the values that leave a repeated layer's forward, and the layer's
forward nodes cost twice: they run again in the backward pass), and a per-node working set (its
inputs and outputs). Under the graph's ``node-sizes`` memory model
(:attr:`planmap.graph.OpGraph.memory_model`) the stash and the working set are zero: a node's size is
its whole footprint, and every solver reads these columns.

These linear terms are what the solvers constrain and the evaluator records in plans; what XLA
allocates for a stage's compiled program is :mod:`planmap.program_memory` (liveness on the op-level
graph, fusion, buffer reuse, layout copies). They differ by construction: the linear terms count a
stage's received and sent activations only inside one node's working set, the stash at the full
size of every forward result the backward reads, and no temporary beyond the largest single node;
``bench/results/memory.md`` gives both against XLA per stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planmap.cluster import DTYPE_ALIASES, Topology
from planmap.crossings import crossings
from planmap.errors import InputError
from planmap.graph import OpGraph
from planmap.remat import layer_boundary, layer_forward
from planmap.vocabulary import MemoryModel, Mode

__all__ = ["CostModel", "OPTIMIZER_STATES", "MASTER_DTYPES", "param_memory_factor", "mixed_precision_factor"]

# Optimizer state kept per parameter element, in parameter-sized copies.
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


# Bytes per element of the floating-point types a master copy may be kept in.
MASTER_DTYPES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}


def param_memory_factor(mode: str, optimizer: str) -> float:
    """Bytes held per parameter byte: the weights (inference), plus gradients and optimizer state."""
    return 1.0 if mode == Mode.INFERENCE else 2.0 + OPTIMIZER_STATES[optimizer]


def mixed_precision_factor(graph: OpGraph, optimizer: str, master_dtype: str) -> float:
    """Bytes held per parameter byte in training with a master copy in ``master_dtype`` (mixed
    precision: bf16 weights and gradients, f32 master weights and optimizer state). A parameter
    narrower than the master type adds its master copy; every parameter's optimizer state is kept in
    the master type. One factor for the model (solvers scale parameter bytes by one number): exact
    in total, and per parameter when all parameters share one dtype."""
    size = MASTER_DTYPES[master_dtype]
    states = OPTIMIZER_STATES[optimizer]
    held = stored = 0.0
    for a in graph.args:
        if a.role != "param":
            continue
        nbytes = float(graph.value_bytes[a.value])
        elems = float(np.prod(a.type.shape)) if a.type.shape else 1.0
        master = elems * size
        held += 2.0 * nbytes + states * master + (master if nbytes < master else 0.0)
        stored += nbytes
    return held / stored if stored else param_memory_factor(Mode.TRAINING, optimizer)


def _remat_mask(graph: OpGraph, mode: Mode, remat: bool | np.ndarray) -> np.ndarray:
    """(n,) bool checkpointing mask; all False outside training or without a backward pass (nothing to stash)."""
    if mode != Mode.TRAINING or not graph.backward.any():
        return np.zeros(graph.num_nodes, bool)
    if isinstance(remat, np.ndarray):
        mask = np.asarray(remat, bool)
        if mask.shape != (graph.num_nodes,):
            raise ValueError(f"remat mask requires shape ({graph.num_nodes},), but got {mask.shape}")
        return mask.copy()
    return np.full(graph.num_nodes, bool(remat))


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class CostModel:
    """Costs of ``graph`` on ``topology``. Build with :meth:`build`.

    ``compute`` is ``(n, T)`` seconds per node and device type (``inf`` where a node cannot run on
    that type); ``device_compute`` expands it to ``(n, D)``. ``kernels`` (n,) counts the kernels a
    node launches (overhead is paid per kernel); ``launch`` ``(n, T)`` is the launch part of
    ``compute`` (zero for measured times), with the small-size penalty. A replicated stage splits
    each microbatch over its replicas, which divides the roofline part, but every replica launches
    all of its kernels, each at a smaller size, so the launch part is never divided (see
    :meth:`replicated`).
    """

    graph: OpGraph
    topology: Topology
    mode: Mode
    optimizer: str
    compute: np.ndarray
    kernels: np.ndarray
    launch: np.ndarray
    master_dtype: str | None = None
    remat_mask: np.ndarray | None = None  # (n,) bool: nodes of checkpointed stages (None: none)

    @classmethod
    def build(cls, graph: OpGraph, topology: Topology, *, mode: str = Mode.INFERENCE, optimizer: str = "adam",
              kernels: np.ndarray | None = None, master_dtype: str | None = None,
              remat: bool | np.ndarray = False) -> CostModel:
        """``remat``: activation checkpointing, for every node (True), none (False), or per node (a (n,)
        bool mask: the nodes of the stages that recompute; see :meth:`with_remat`)."""
        n, types = graph.num_nodes, len(topology.type_names)
        k = np.ones(n) if kernels is None else np.asarray(kernels, float)
        compute = np.empty((n, types))
        launch = np.zeros((n, types))
        for t in range(types):
            compute[:, t], launch[:, t] = _type_times(graph, topology, t, k)
        if master_dtype is not None and master_dtype not in MASTER_DTYPES:
            raise InputError(f"master dtype {master_dtype!r} is not one of {', '.join(MASTER_DTYPES)}", code="value")
        mask = _remat_mask(graph, Mode(mode), remat)
        again = (layer_forward(graph) & mask).astype(float)[:, None]  # run again in the backward: cost twice
        compute, launch = compute * (1.0 + again), launch * (1.0 + again)
        return cls(graph, topology, Mode(mode), optimizer, _ro(compute), _ro(k), _ro(launch), master_dtype, _ro(mask))

    def with_remat(self, remat: bool | np.ndarray) -> CostModel:
        """This cost model with activation checkpointing on the nodes of ``remat`` (True: all, False: none,
        or a (n,) bool mask) instead of its own: the recomputed nodes' times are re-derived exactly (x2 or
        /2), and what does not depend on the choice (working sets, parameters) is carried over."""
        mask = _remat_mask(self.graph, self.mode, remat)
        if np.array_equal(mask, self.remat_nodes):
            return self
        fwd = layer_forward(self.graph)
        scale = ((1.0 + (fwd & mask)) / (1.0 + (fwd & self.remat_nodes)))[:, None]
        out = CostModel(self.graph, self.topology, self.mode, self.optimizer, _ro(self.compute * scale), self.kernels,
                        _ro(self.launch * scale), self.master_dtype, _ro(mask))
        for name in ("param_factor", "param_use", "working_set", "uniform_comm", "supported"):
            if name in self.__dict__:  # cached and independent of the choice
                out.__dict__[name] = self.__dict__[name]
        return out

    @property
    def remat_nodes(self) -> np.ndarray:
        """(n,) bool: the nodes whose stage recomputes its layers' forward in its backward pass."""
        return self.remat_mask if self.remat_mask is not None else np.zeros(self.graph.num_nodes, bool)

    @property
    def remat(self) -> bool:
        """Activation checkpointing on some node (see :attr:`remat_nodes`)."""
        return bool(self.remat_nodes.any())

    @staticmethod
    def replicated(seconds, launch, replicas):
        """Per-replica seconds of work ``seconds`` (of which ``launch`` is kernel launches) split over
        ``replicas`` devices: the rest shrinks with the per-replica batch, the launches do not."""
        return (seconds - launch) / replicas + launch

    # ------------------------------------------------------------------------------ compute
    @cached_property
    def device_launch(self) -> np.ndarray:
        """(n, D) seconds of kernel launches of each node on each device (part of :attr:`device_compute`)."""
        return _ro(np.ascontiguousarray(self.launch[:, self.topology.device_type]))

    @cached_property
    def device_compute(self) -> np.ndarray:
        """(n, D) seconds of each node on each device (inf = not supported)."""
        return _ro(np.ascontiguousarray(self.compute[:, self.topology.device_type]))

    def node_time(self, device: int) -> np.ndarray:
        return self.device_compute[:, device]

    @cached_property
    def supported(self) -> np.ndarray:
        """(n, D) bool: the node can run on the device."""
        return _ro(np.isfinite(self.device_compute))

    # ---------------------------------------------------------------------------- transfers
    def _bytes_or_time(self, values: np.ndarray, lat: np.ndarray, ibw: np.ndarray, paid: np.ndarray) -> np.ndarray:
        measured = self.graph.value_time[values]
        est = lat + self.graph.value_bytes[values] * ibw
        return np.where(paid, np.where(np.isnan(measured), est, measured), 0.0)

    def send_cost(self, values, src, dst) -> np.ndarray:
        """Seconds the sending device pays for each (value, src, dst) transfer (arrays broadcast)."""
        t = self.topology
        values, src, dst = np.broadcast_arrays(np.asarray(values), np.asarray(src), np.asarray(dst))
        return self._bytes_or_time(values, t.send_lat[src, dst], t.send_ibw[src, dst], t.send_paid[src, dst])

    def recv_cost(self, values, src, dst) -> np.ndarray:
        """Seconds the receiving device pays for each (value, src, dst) transfer (arrays broadcast)."""
        t = self.topology
        values, src, dst = np.broadcast_arrays(np.asarray(values), np.asarray(src), np.asarray(dst))
        return self._bytes_or_time(values, t.recv_lat[src, dst], t.recv_ibw[src, dst], t.recv_paid[src, dst])

    def host_io_cost(self, values) -> np.ndarray:
        """Seconds a host-memory device pays to move a value across one of its own subgraph boundaries."""
        values = np.asarray(values)
        t = self.topology
        return self._bytes_or_time(values, np.full(values.shape, t.host_lat), np.full(values.shape, t.host_ibw),
                                   np.ones(values.shape, bool))

    @cached_property
    def uniform_comm(self) -> np.ndarray | None:
        """Per value, the one transfer charge every paying end pays — when the cluster makes it unique.

        True in the paper's setting (all transfers through one host link, or all measured): then a
        model may use a single ``c_u`` per value. None when charges depend on the device pair.
        """
        t = self.topology
        charges: set[tuple[float, float]] = set()
        for paid, lats, ibws in ((t.send_paid, t.send_lat, t.send_ibw), (t.recv_paid, t.recv_lat, t.recv_ibw)):
            charges.update(zip(lats[paid].tolist(), ibws[paid].tolist(), strict=True))
        if t.host_io.any():
            charges.add((t.host_lat, t.host_ibw))
        if len(charges) > 1:
            return None
        lat, ibw = charges.pop() if charges else (0.0, 0.0)
        measured = self.graph.value_time
        return _ro(np.where(np.isnan(measured), lat + self.graph.value_bytes * ibw, measured))

    # ------------------------------------------------------------------------------- memory
    @cached_property
    def param_factor(self) -> float:
        """Bytes held per parameter byte (see :func:`param_memory_factor`, :func:`mixed_precision_factor`)."""
        if self.master_dtype is None or self.mode == Mode.INFERENCE:
            return param_memory_factor(self.mode, self.optimizer)
        return mixed_precision_factor(self.graph, self.optimizer, self.master_dtype)

    @cached_property
    def param_use(self) -> tuple[np.ndarray, np.ndarray]:
        """(param value ids, consumer nodes) of every use of a parameter argument."""
        g = self.graph
        is_param = np.zeros(g.num_values, bool)
        is_param[g.param_values] = True
        use = is_param[g.edge_value]
        return _ro(g.edge_value[use].copy()), _ro(g.edge_dst[use].copy())

    @cached_property
    def stash_bytes(self) -> np.ndarray:
        """(n,) bytes a forward node's outputs occupy per in-flight microbatch until the backward pass
        consumes them (training only; zero in inference). A value follows its producer's choice: of a
        checkpointed node (:attr:`remat_nodes`), the layer-boundary values the backward or a layer's
        recomputation reads (a layer's input is kept for its recomputation), as the runtime keeps them
        (:mod:`planmap.runtime.remat`); of any other, what the backward reads. So a stage's stash depends
        on its own choice only."""
        g = self.graph
        out = np.zeros(g.num_nodes, np.int64)
        if self.mode == Mode.INFERENCE or not g.backward.any() or g.memory_model is MemoryModel.NODE_SIZES:
            return _ro(out)
        src = g.edge_src
        fw_src = (src >= 0) & ~g.backward[np.maximum(src, 0)]
        mask = self.remat_nodes
        read = g.backward[g.edge_dst]
        if mask.any():  # what the backward and its recomputation read that the recomputation cannot rebuild:
            read = read | (mask[np.maximum(src, 0)] & layer_forward(g)[g.edge_dst])  # a layer's input too
        vals = np.unique(g.edge_value[fw_src & read])
        if mask.any():  # a checkpointed producer keeps only the values leaving a layer's forward
            vals = vals[~mask[g.value_node[vals]] | layer_boundary(g)[vals]]
        np.add.at(out, g.value_node[vals], g.value_bytes[vals])
        return _ro(out)

    @cached_property
    def working_set(self) -> np.ndarray:
        """(n,) bytes live while a node runs: its distinct inputs (arguments excluded) and its outputs;
        zero under the node-sizes memory model."""
        g = self.graph
        if g.memory_model is MemoryModel.NODE_SIZES:
            return _ro(np.zeros(g.num_nodes, np.int64))
        ws = g.out_bytes.astype(np.int64).copy()
        reads = crossings(g, np.arange(g.num_nodes))  # every (value, reading node) pair
        if len(reads):
            np.add.at(ws, reads.consumer_group, g.value_bytes[reads.value])
        return _ro(ws)

    # ------------------------------------------------------------------------- collectives
    def allreduce(self, nbytes: float, devices) -> float:
        return self.topology.allreduce_time(nbytes, devices)


def _type_times(graph: OpGraph, topo: Topology, t: int, kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, of which kernel launches) per node on device type ``t``."""
    kind = topo.type_kinds[t]
    for key in (topo.type_names[t], kind, "accelerator" if kind != "cpu" else None):
        if key is not None and key in graph.measured:
            m = graph.measured[key]
            return np.where(np.isnan(m), math.inf, m), np.zeros(graph.num_nodes)
    if graph.measured and not graph.flops.any() and not graph.bytes_accessed.any():
        raise InputError(f"the profiled graph {graph.name!r} has no times for device type "
                         f"{topo.type_names[t]!r} (kind {kind}); it has: {', '.join(graph.measured)}",
                         code="reference")
    dtypes = np.asarray(graph.dtype, dtype=object)
    peak = np.empty(graph.num_nodes)
    for dt in set(graph.dtype):
        peak[dtypes == dt] = topo.peak(t, DTYPE_ALIASES.get(dt, dt))
    eff = topo.efficiency[t]
    roof = np.maximum(graph.flops / peak, graph.bytes_accessed / topo.mem_bw[t]) / eff
    launch = topo.overhead[t] * kernels
    half = _half_efficiency_flops(topo, t)
    if half > 0:  # efficiency F / (F + half) per kernel: a fixed (F-free) part per kernel, never divided
        launch = launch + np.where(graph.flops > 0, kernels * half / (peak * eff), 0.0)
    return roof + launch, launch


def _half_efficiency_flops(topo: Topology, t: int) -> float:
    """The device type's small-size penalty (FLOPs per kernel at which it reaches half its efficiency)."""
    name = topo.type_names[t]
    return float(next((d.half_efficiency_flops for d in topo.body.device_types if d.name == name), 0.0))

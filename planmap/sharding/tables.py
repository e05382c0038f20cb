"""``ShardingTables``: every strategy, cost, reshard matrix and memory coefficient of one graph on one mesh.

This is what the sharding IP and the SPMD evaluator read. *Units* are the decisions: units
``0..n-1`` are the ops of the (original, un-coarsened) graph, units ``n..n+A-1`` its entry arguments
in ``graph.args`` order (an argument's strategies are the valid specs of its shape). Per unit ``u``:

* ``sets[u]`` (:class:`~planmap.sharding.strategies.StrategySet`), ``compute[u]``, ``comm[u]``,
  ``cost[u]`` = compute + comm (K_u,) seconds per device per microbatch;
* ``out_specs[u]`` (P_u, axes): its distinct result specs (assignment form) and ``out_index[u]``
  (K_u,) the row of each strategy's; ``in_specs[u][k]`` / ``in_index[u][k]`` likewise for the spec
  it requires of operand ``k``;
* ``memory[u]`` (K_u,) bytes per device that add up over units: parameters ``bytes / shards × state
  factor`` (weights, + gradients and optimizer state in training, sharded like the parameter: FSDP /
  ZeRO-3 is a parameter split along the data axis and all-gathered where used), data arguments
  ``bytes / shards``, stashed activations of forward ops used by backward ops ``bytes / shards(out)``
  (training; one microbatch in flight under SPMD); ``working[u]`` (K_u,) the bytes live while an op
  runs (per-device inputs, arguments excluded, and outputs) — the peak is the max over ops.

Per edge ``e`` (one per (value, consumer op, operand position); in training, after them, one per
parameter gradient into the parameter's unit, position 0, whose required specs are the parameter's own
— :func:`gradient_params`): ``edge_value/src/dst/pos`` and
``edge_matrix[e]`` over the producer's distinct out specs × the consumer's distinct required specs;
:meth:`ShardingTables.edge_cost` expands it to K_src × K_dst by index. Matrices are shared through a
:class:`~planmap.sharding.reshard.ReshardCache`, strategy sets by op signature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from planmap.cluster import Topology
from planmap.cost import CostModel
from planmap.graph import OpGraph, TensorType
from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.reshard import ReshardCache
from planmap.sharding.specs import Spec, from_assignment, to_assignment
from planmap.sharding.strategies import (
    Strategy,
    StrategySet,
    argument_strategies,
    enumerate_strategies,
    strategy_collectives,
    strategy_costs,
    unit_strategies,
)

__all__ = ["ShardingTables", "value_shapes", "gradient_params", "graph_operands", "graph_outputs", "fused_op_costs"]


def graph_outputs(graph: OpGraph) -> tuple[tuple[TensorType, ...], ...]:
    """Result types per op (``ValueError`` when the graph has none: only front-end originals do)."""
    if graph.outputs is None:
        raise ValueError(f"sharding tables require result types (OpGraph.outputs) on graph {graph.name!r}")
    return graph.outputs


def value_shapes(graph: OpGraph) -> tuple[tuple[int, ...], ...]:
    """Shape of every value (op results from ``graph.outputs``, arguments from their types)."""
    outputs = graph_outputs(graph)
    arg_shape = {a.value: a.type.shape for a in graph.args}
    return tuple(arg_shape.get(v, ()) if node < 0 else outputs[node][idx].shape
                 for v, (node, idx) in enumerate(zip(graph.value_node.tolist(), graph.value_index.tolist(),
                                                     strict=True)))


def graph_operands(graph: OpGraph) -> tuple[tuple[int, ...], ...]:
    """Operand value ids per op: ``graph.operands`` from the front end, else the uses in edge order."""
    if graph.operands is not None:
        return graph.operands
    ops: list[list[int]] = [[] for _ in range(graph.num_nodes)]
    for v, d in zip(graph.edge_value.tolist(), graph.edge_dst.tolist(), strict=True):
        ops[d].append(v)
    return tuple(tuple(o) for o in ops)


def gradient_params(graph: OpGraph) -> dict[int, int]:
    """Training step: ``{gradient value id: parameter value id}``. A value-and-grad step returns
    ``(loss, grads)`` with the gradients flattened in the parameters' argument order, so result ``k``
    (``1 <= k <= #params``) is the gradient of the ``k``-th parameter when their shapes agree. XLA
    returns a gradient in its parameter's layout (the optimizer update adds them elementwise), so a
    gradient held in another layout pays the reshard into it: a replicated parameter's gradient is
    all-reduced, not reduce-scattered."""
    params = [a for a in graph.args if a.role == "param"]
    shapes = value_shapes(graph)
    out: dict[int, int] = {}
    for k, v in enumerate(graph.results.tolist()[1:len(params) + 1]):
        a = params[k]
        if shapes[v] == a.type.shape and int(graph.value_node[v]) >= 0 and v not in out:
            out[v] = a.value
    return out


UNLIKE_XLA = 1.0  # seconds added to a reshard XLA's partitioner would not do (see _keep_partial_sums)


def _keep_partial_sums(mat: np.ndarray, producer: np.ndarray, required: np.ndarray, dm: Any, k: int) -> np.ndarray:
    """``mat`` with :data:`UNLIKE_XLA` added where a reduction of one tensor (``reduce``; scalar operands
    aside) would gather (or move) a dim it reduces over. XLA's SPMD partitioner reduces the local part
    and all-reduces the partial results instead; the model must not plan a gather there that the
    compiled program would not do (its step time would be right, its collectives not). Ops of several
    tensors (dot_general) are left alone: there XLA does gather an operand whose split conflicts with
    the other's (FSDP's weights)."""
    if dm is None or not dm.reduced:
        return mat
    dims = [slot[k] for slot in dm.reduced if k < len(slot) and slot[k] >= 0]
    if not dims:
        return mat
    p, q = producer[:, None, :], required[None, :, :]
    bad = (np.isin(p, dims) & (p != q)).any(axis=-1)
    if not bad.any():
        return mat
    return _ro(mat + UNLIKE_XLA * bad)


def _shards(asg: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    return np.prod(np.where(asg >= 0, np.asarray(sizes, np.int64), 1), axis=-1)


def _distinct(asg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inv = np.unique(asg, axis=0, return_inverse=True)
    return uniq, inv.reshape(-1)


@dataclass(frozen=True, eq=False)
class ShardingTables:
    """Strategies, costs, reshard matrices and memory of ``graph`` on ``mesh`` (see the module doc)."""

    graph: OpGraph
    topology: Topology
    mesh: LogicalMesh
    mode: str
    microbatches: int
    capacity: float
    operands: tuple[tuple[int, ...], ...]
    shapes: tuple[tuple[int, ...], ...]
    value_unit: np.ndarray
    sets: tuple[StrategySet, ...]
    compute: tuple[np.ndarray, ...]
    comm: tuple[np.ndarray, ...]
    out_specs: tuple[np.ndarray, ...]
    out_index: tuple[np.ndarray, ...]
    in_specs: tuple[tuple[np.ndarray, ...], ...]
    in_index: tuple[tuple[np.ndarray, ...], ...]
    memory: tuple[np.ndarray, ...]
    working: tuple[np.ndarray, ...]
    edge_value: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_pos: np.ndarray
    edge_matrix: tuple[np.ndarray, ...]
    edge_ptr: np.ndarray  # (n + 1,) CSR: the edges of op i are edge_ptr[i]:edge_ptr[i+1], in operand order
    stats: dict[str, Any]
    grad_param: dict[int, int] = field(default_factory=dict)  # training: gradient value -> its parameter's unit
    grad_edge: dict[int, int] = field(default_factory=dict)  # training: gradient value -> its edge to the parameter
    optimizer: str = "adam"

    # ---------------------------------------------------------------------------------- build
    @classmethod
    def build(cls, graph: OpGraph, topology: Topology, mesh: LogicalMesh, *, mode: str = "inference",
              optimizer: str = "adam", kernels: np.ndarray | None = None, microbatches: int = 1,
              memory_headroom: float = 0.0,
              op_costs: tuple[np.ndarray, np.ndarray] | None = None) -> ShardingTables:
        """Tables of ``graph`` (un-coarsened, with ``operands``/``dim_maps`` from the front end; ops
        without a DimMap run replicated) on ``mesh``. ``kernels``: launches per op (default 1);
        ``op_costs``: (roofline, launch) seconds per op on the mesh's device type, replacing the
        graph's own (:func:`fused_op_costs`: what the ops cost once XLA has fused them)."""
        cost = CostModel.build(graph, topology, mode=mode, optimizer=optimizer, kernels=kernels)
        t = int(topology.device_type[mesh.devices[0]])
        if op_costs is None:
            launch = np.maximum(cost.launch[:, t], topology.overhead[t] * cost.kernels)  # with the size penalty
            roofline = np.maximum(cost.compute[:, t] - launch, 0.0)
        else:
            roofline, launch = (np.asarray(x, float) for x in op_costs)
        n, sizes, n_axes = graph.num_nodes, mesh.axis_sizes, mesh.num_axes
        outputs, operands, shapes = graph_outputs(graph), graph_operands(graph), value_shapes(graph)
        dim_maps = graph.dim_maps if graph.dim_maps is not None else (None,) * n
        value_unit = graph.value_node.astype(np.int64).copy()
        for pos, a in enumerate(graph.args):
            value_unit[a.value] = n + pos
        value_unit.setflags(write=False)
        signatures: dict[tuple, StrategySet] = {}
        sets, compute, comm = [], [], []
        for i in range(n):
            res = outputs[i][0].shape if outputs[i] else ()
            op_shapes = tuple(shapes[v] for v in operands[i])
            dm = dim_maps[i]
            key: tuple = (res, op_shapes, dm)
            sset = signatures.get(key)
            if sset is None:
                sset = (unit_strategies(len(op_shapes), n_axes) if dm is None
                        else enumerate_strategies(res, op_shapes, dm, sizes))
                signatures[key] = sset
            c, m = strategy_costs(sset, mesh, float(roofline[i]), float(launch[i]), float(graph.out_bytes[i]))
            sets.append(sset)
            compute.append(c)
            comm.append(m)
        for a in graph.args:
            key = ("arg", a.type.shape)
            sset = signatures.setdefault(key, argument_strategies(a.type.shape, sizes))
            sets.append(sset)
            compute.append(np.zeros(sset.size))
            comm.append(np.zeros(sset.size))
        distinct: dict[int, tuple] = {}  # per shared StrategySet (repeated layers): its distinct specs
        for sset in sets:
            if id(sset) not in distinct:
                distinct[id(sset)] = (_distinct(sset.out), tuple(_distinct(x) for x in sset.inputs))
        outs = [distinct[id(s)][0] for s in sets]
        ins = [distinct[id(s)][1] for s in sets]
        cache = ReshardCache(mesh)
        ev, es, ed, ep, em, ptr = [], [], [], [], [], [0]
        for i in range(n):
            for k, v in enumerate(operands[i]):
                src = int(value_unit[v])
                ev.append(v)
                es.append(src)
                ed.append(i)
                ep.append(k)
                mat = cache.matrix(shapes[v], float(graph.value_bytes[v]), outs[src][0], ins[i][k][0])
                lone = sum(1 for w in operands[i] if shapes[w]) == 1
                em.append(_keep_partial_sums(mat, outs[src][0], ins[i][k][0], dim_maps[i], k) if lone else mat)
            ptr.append(len(ev))
        for pos in range(len(graph.args)):  # an argument "requires" its own layout of its gradient
            ins[n + pos] = (outs[n + pos],)
        grads = gradient_params(graph) if mode == "training" else {}
        grad_param = {v: int(value_unit[a]) for v, a in grads.items() if int(value_unit[v]) < n}
        grad_edge = {}
        for v, u in grad_param.items():  # after the op edges: gradient -> its parameter's layout
            grad_edge[v] = len(ev)
            src = int(value_unit[v])
            ev.append(v)
            es.append(src)
            ed.append(u)
            ep.append(0)
            em.append(cache.matrix(shapes[v], float(graph.value_bytes[v]), outs[src][0], outs[u][0]))
        memory, working = _memory(graph, cost, mesh, sets, operands, value_unit)
        capacity = float(topology.memory[mesh.devices].min()) * (1.0 - memory_headroom)
        stats = {"signatures": len(signatures), "reshard_matrices": len(cache), "reshard_hits": cache.hits}
        ro = _ro
        return cls(graph, topology, mesh, mode, int(microbatches), capacity, operands, shapes, value_unit,
                   tuple(sets), tuple(ro(c) for c in compute), tuple(ro(c) for c in comm),
                   tuple(ro(o[0]) for o in outs), tuple(ro(o[1]) for o in outs),
                   tuple(tuple(ro(x[0]) for x in k) for k in ins), tuple(tuple(ro(x[1]) for x in k) for k in ins),
                   memory, working, ro(np.asarray(ev, np.int64)), ro(np.asarray(es, np.int64)),
                   ro(np.asarray(ed, np.int64)), ro(np.asarray(ep, np.int64)), tuple(em),
                   ro(np.asarray(ptr, np.int64)), stats, grad_param=grad_param, grad_edge=grad_edge,
                   optimizer=optimizer)

    @classmethod
    def from_problem(cls, problem: Any, mesh: LogicalMesh) -> ShardingTables:
        """Tables of ``problem.original`` with the problem's topology, mode, optimizer, microbatches and
        memory headroom (kernel launches counted as the problem's cost model counts them)."""
        from planmap.kernels import kernel_counts

        original = problem.original
        kernels = kernel_counts(original, original)
        t = int(problem.topology.device_type[mesh.devices[0]])
        return cls.build(original, problem.topology, mesh, mode=problem.mode, optimizer=problem.cost.optimizer,
                         kernels=kernels, microbatches=problem.microbatches, memory_headroom=problem.memory_headroom,
                         op_costs=fused_op_costs(problem, t, kernels))

    # -------------------------------------------------------------------------------- queries
    @property
    def num_ops(self) -> int:
        return self.graph.num_nodes

    @property
    def num_units(self) -> int:
        return len(self.sets)

    @property
    def num_edges(self) -> int:
        return len(self.edge_value)

    @property
    def cost(self) -> tuple[np.ndarray, ...]:
        return tuple(c + m for c, m in zip(self.compute, self.comm, strict=True))

    @property
    def counts(self) -> np.ndarray:
        """(units,) number of strategies of each unit."""
        return np.array([s.size for s in self.sets], np.int64)

    @cached_property
    def _unit_values(self) -> tuple[tuple[int, ...], ...]:
        per: list[list[int]] = [[] for _ in range(self.num_ops)]
        for v, node in enumerate(self.graph.value_node.tolist()):
            if node >= 0:
                per[node].append(v)
        return tuple(tuple(p) for p in per) + tuple((a.value,) for a in self.graph.args)

    def unit_values(self, u: int) -> tuple[int, ...]:
        """Value ids a unit defines (an op's results, or the argument's value)."""
        return self._unit_values[u]

    def spec_row(self, u: int, spec: Spec) -> int | None:
        """Row of ``spec`` among unit ``u``'s distinct out specs (None when no strategy produces it)."""
        target = np.asarray(to_assignment(spec, self.mesh.num_axes))
        hit = np.flatnonzero(np.all(self.out_specs[u] == target, axis=1))
        return int(hit[0]) if len(hit) else None

    def out_spec(self, u: int, s: int) -> Spec:
        return from_assignment(self.sets[u].out[s], self._rank(u))

    def _rank(self, u: int) -> int:
        vals = self.unit_values(u)
        return len(self.shapes[vals[0]]) if vals else 0

    def strategy(self, u: int, s: int) -> Strategy:
        """Strategy ``s`` of unit ``u`` as specs and seconds."""
        sset = self.sets[u]
        ins = tuple(from_assignment(x[s], len(self.shapes[v]))
                    for x, v in zip(sset.inputs, self.operands[u] if u < self.num_ops else (), strict=True))
        out_bytes = float(self.graph.out_bytes[u]) if u < self.num_ops else 0.0
        return Strategy(self.out_spec(u, s), ins, float(self.compute[u][s]), float(self.comm[u][s]),
                        strategy_collectives(sset, s, self.mesh, out_bytes))

    def edge_cost(self, e: int) -> np.ndarray:
        """(K_src, K_dst) reshard seconds of edge ``e`` between the two units' strategies."""
        src, dst, k = int(self.edge_src[e]), int(self.edge_dst[e]), int(self.edge_pos[e])
        return self.edge_matrix[e][np.ix_(self.out_index[src], self.in_index[dst][k])]

    def summary(self) -> dict[str, Any]:
        """Strategy counts (max / median / total over ops and over arguments) and cache statistics."""
        c = self.counts
        ops, args = c[: self.num_ops], c[self.num_ops:]
        return {"mesh": self.mesh.shape, "ops": self.num_ops, "args": len(args), "edges": self.num_edges,
                "op_max": int(ops.max(initial=0)), "op_median": float(np.median(ops)) if len(ops) else 0.0,
                "arg_max": int(args.max(initial=0)), "total": int(c.sum()), **self.stats}


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.setflags(write=False)
    return a


def _memory(graph: OpGraph, cost: CostModel, mesh: LogicalMesh, sets: list[StrategySet],
            operands: tuple[tuple[int, ...], ...], value_unit: np.ndarray) -> tuple[tuple, tuple]:
    """Per-unit additive memory (K,) and per-op working set (K,), bytes per device (see module doc)."""
    n, sizes = graph.num_nodes, mesh.axis_sizes
    stash = cost.stash_bytes
    memory, working = [], []
    for i in range(n):
        sh = _shards(sets[i].out, sizes)
        memory.append(_ro(stash[i] / sh))
        ws = graph.out_bytes[i] / sh
        seen = set()
        for k, v in enumerate(operands[i]):
            if value_unit[v] >= n or v in seen:
                continue
            seen.add(v)
            ws = ws + graph.value_bytes[v] / _shards(sets[i].inputs[k], sizes)
        working.append(_ro(np.asarray(ws, float)))
    for pos, a in enumerate(graph.args):
        sh = _shards(sets[n + pos].out, sizes)
        factor = cost.param_factor if a.role == "param" else 1.0
        memory.append(_ro(graph.value_bytes[a.value] * factor / sh))
        working.append(_ro(np.zeros(len(sh))))
    return tuple(memory), tuple(working)


def fused_op_costs(problem: Any, device_type: int, kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(roofline, launch) seconds per op of ``problem.original`` on ``device_type`` that add up, node by
    node, to what the problem's (coarsened, fused) cost model charges: one device running an SPMD
    plan then costs what a single-device pipeline stage costs. A node's roofline is shared among its
    ops in proportion to their own rooflines (evenly when those are all zero); its launches go to its
    anchor ops, or to its first op with work when it has none."""
    from planmap.kernels import kernel_roles

    g, original, cost = problem.graph, problem.original, problem.cost
    anchor, work = kernel_roles(original)
    over = problem.topology.overhead[device_type]
    own = CostModel.build(original, problem.topology, mode=problem.mode, optimizer=cost.optimizer, kernels=kernels)
    # the undivided part: launches (measured times: the overhead's share) and the small-size penalty
    own_fixed = np.maximum(own.launch[:, device_type], over * own.kernels)
    own_roof = np.maximum(own.compute[:, device_type] - own_fixed, 0.0)
    node_launch = np.maximum(cost.launch[:, device_type], over * cost.kernels)
    node_roof = np.maximum(cost.compute[:, device_type] - node_launch, 0.0)
    roofline, launch = np.zeros(original.num_nodes), np.zeros(original.num_nodes)
    for i in range(g.num_nodes):
        ops = g.members_of(i)
        if len(ops) == 0:
            continue
        w = own_roof[ops]
        roofline[ops] = node_roof[i] * (w / w.sum() if w.sum() > 0 else np.full(len(ops), 1.0 / len(ops)))
        k = anchor[ops].astype(float)
        if k.sum() == 0:
            k = np.zeros(len(ops))
            k[int(np.argmax(work[ops]))] = 1.0
        launch[ops] = node_launch[i] * k / k.sum()
    return roofline, launch

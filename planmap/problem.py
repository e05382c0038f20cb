"""``Problem`` (what to solve), ``Solution`` + ``Certificate`` (what a solver answers), the solver contract.

Every solver — exact (IP, DP), heuristic (greedy, METIS, local search) or learned (DQN) — gets a
:class:`Problem` and returns a :class:`Solution` whose :class:`Certificate` says how good it is
proven to be. The core never trusts a solver's own objective: :func:`planmap.evaluate.evaluate`
recomputes it from the decisions alone.

A solution's decisions are ``assignment`` (node -> stage) and ``stages`` (each a tuple of device
indices, in execution order). The same representation serves all objectives:

* latency placement: each stage is one contiguous subgraph on one device; stages on the same
  device run in list order; a CPU stage runs its nodes in parallel along independent paths;
* pipelines: each stage is a pipeline stage; a stage with several devices is replicated over
  them (data parallel within the stage);
* SPMD: one stage over every device, with ``mesh`` axes and ``shardings``.
"""

from __future__ import annotations

import enum
import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

from planmap.cluster import Topology
from planmap.cost import CostModel
from planmap.errors import InfeasibleError, PlanmapError
from planmap.graph import OpGraph

__all__ = [
    "Status",
    "Certificate",
    "Stage",
    "Shardings",
    "Solution",
    "SolveOptions",
    "Progress",
    "Solver",
    "Problem",
    "build_problem",
    "relative_gap",
]


class Status(enum.StrEnum):
    """How a solve ended."""

    OPTIMAL = "optimal"  # proven optimal (within the backend's tolerances)
    GAP_REACHED = "gap_reached"  # proven within the requested relative gap
    TIME_LIMIT = "time_limit"  # stopped at the time limit with an incumbent
    INTERRUPTED = "interrupted"  # stopped by the user (Ctrl-C) with an incumbent
    INFEASIBLE = "infeasible"  # proven that no solution satisfies the constraints
    HEURISTIC = "heuristic"  # a heuristic answer: no bound


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """(objective - bound) / |objective|, the MIP convention; None when either is unknown."""
    if objective is None or bound is None or not math.isfinite(objective) or not math.isfinite(bound):
        return None
    if objective == 0:
        return 0.0 if bound >= 0 else None
    return max(0.0, (objective - bound) / abs(objective))


@dataclass(frozen=True)
class Certificate:
    """What a solver can say about its answer. Objective and bound are in seconds."""

    status: Status
    solver: str
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    version: str = ""
    backend: str | None = None
    message: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    wall_time: float = 0.0  # seconds; shown to people, never written into a plan (not deterministic)
    details: str = ""  # timings and logs for people; never written into a plan (not deterministic)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        if self.gap is None and self.bound is not None:
            object.__setattr__(self, "gap", relative_gap(self.objective, self.bound))


@dataclass(frozen=True)
class Stage:
    """A stage: the devices it runs on (several = replicated) and, for SPMD, its mesh axes."""

    devices: tuple[int, ...]
    mesh_axes: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))
        if not self.devices:
            raise ValueError("Stage requires at least one device")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"Stage requires distinct devices, but got {self.devices}")

    @property
    def device(self) -> int:
        """The stage's first (for single-device stages: only) device."""
        return self.devices[0]

    @property
    def replicas(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class Shardings:
    """SPMD decisions: a mesh and PartitionSpecs (one entry per tensor dim: None, an axis or axes).

    ``args``: argument index -> spec; ``values``: (node id of the original graph, result number)
    -> spec for a sharding constraint on that op result.
    """

    mesh_axes: tuple[tuple[str, int], ...]
    args: dict[int, tuple] = field(default_factory=dict)
    values: dict[tuple[int, int], tuple] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Solution:
    """A solver's decisions on ``problem.graph`` and its certificate."""

    assignment: np.ndarray  # (n,) stage index of each node
    stages: tuple[Stage, ...]
    certificate: Certificate
    schedule: str | None = None  # "gpipe" | "1f1b" for pipelines
    microbatches: int = 1
    shardings: Shardings | None = None

    def __post_init__(self) -> None:
        a = np.ascontiguousarray(np.asarray(self.assignment, np.int32))
        a.setflags(write=False)
        object.__setattr__(self, "assignment", a)
        object.__setattr__(self, "stages", tuple(self.stages))
        if len(a) and (a.min() < 0 or a.max() >= len(self.stages)):
            raise ValueError(f"Solution.assignment requires stage ids in [0, {len(self.stages)}), "
                             f"but got [{a.min()}, {a.max()}]")

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def node_device(self) -> np.ndarray:
        """(n,) first device of each node's stage."""
        first = np.array([s.device for s in self.stages], np.int32)
        return first[self.assignment]

    def with_certificate(self, **changes: Any) -> Solution:
        return replace(self, certificate=replace(self.certificate, **changes))

    def compact(self) -> Solution:
        """Drop stages no node uses, keeping the order of the rest."""
        used = np.unique(self.assignment)
        if len(used) == len(self.stages):
            return self
        remap = np.full(len(self.stages), -1, np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return replace(self, assignment=remap[self.assignment], stages=tuple(self.stages[i] for i in used))

    @classmethod
    def from_devices(cls, problem: Problem, device_of: np.ndarray, certificate: Certificate,
                     **kwargs: Any) -> Solution:
        """One stage per used device, ordered by each device's first node (topological order)."""
        device_of = np.asarray(device_of, np.int32)
        first = {}
        for i, d in enumerate(device_of.tolist()):
            first.setdefault(d, i)
        order = sorted(first, key=first.get)
        stage_of = np.full(problem.topology.num_devices, -1, np.int32)
        stage_of[order] = np.arange(len(order), dtype=np.int32)
        return cls(stage_of[device_of], tuple(Stage((d,)) for d in order), certificate, **kwargs)


@dataclass(frozen=True)
class SolveOptions:
    """Options shared by all solvers (what the spec's ``solver`` section and the CLI flags give)."""

    time_limit: float = 60.0  # seconds
    rel_gap: float = 0.01
    threads: int = 1
    seed: int = 0
    backend: str = "highs"
    passthrough: dict[str, Any] = field(default_factory=dict)
    warm_start: Solution | None = None
    progress: Progress | None = None


class Progress(Protocol):
    """Receives anytime updates from a long solve (the CLI shows them as a live line)."""

    def __call__(self, *, elapsed: float, incumbent: float | None, bound: float | None, message: str = "") -> None:
        ...


@runtime_checkable
class Solver(Protocol):
    """What a solver module registers: a name, the objectives it handles, and ``solve``."""

    name: str
    objectives: frozenset[str]

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        ...


# ----------------------------------------------------------------------------------- problem
# Kernels a node launches (each pays the device type's opOverhead): XLA fuses elementwise ops and data
# movement into the contraction / reduction / loop they feed, so a fused node costs one launch per
# "anchor" op, or one loop kernel when it has no anchor; constants, reshapes and the like cost none.
_KERNEL_FREE = frozenset({
    "stablehlo.constant", "stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.get_tuple_element",
    "stablehlo.tuple", "stablehlo.bitcast_convert", "stablehlo.iota", "stablehlo.optimization_barrier",
    "sdy.sharding_constraint", "func.return", "chlo.constant", "chlo.constant_like", "sdy.constant",
})


@dataclass(frozen=True, eq=False)
class Problem:
    """A graph (usually coarsened), a cluster, a cost model, an objective and constraints.

    ``allowed`` (n, D) says where each node may run (supported by the device and not excluded by a
    pin); ``capacity`` (D,) is usable memory in bytes (inf = unlimited). ``original`` is the graph
    before coarsening — ``graph.members`` map nodes to its op ids.
    """

    name: str
    graph: OpGraph
    topology: Topology
    cost: CostModel
    objective: str = "throughput"  # "latency" | "throughput"
    variant: str = "max-load"  # throughput: "max-load" | "max-fw-plus-max-bw"
    mode: str = "inference"
    contiguous: bool = True
    max_subgraphs: int = 1
    max_stages: int | None = None
    memory_headroom: float = 0.0
    schedule: str = "gpipe"
    microbatches: int = 1
    replication: bool = False
    batch_size: int | None = None  # samples per microbatch (the artifact's data batch), when known
    allowed: np.ndarray | None = None
    original: OpGraph | None = None
    spec: Any = None  # LoadedSpec when built from a spec file

    def __post_init__(self) -> None:
        allowed = self.cost.supported.copy() if self.allowed is None else np.asarray(self.allowed, bool)
        if allowed.shape != (self.graph.num_nodes, self.topology.num_devices):
            raise ValueError(f"Problem.allowed requires shape {(self.graph.num_nodes, self.topology.num_devices)}")
        allowed.setflags(write=False)
        object.__setattr__(self, "allowed", allowed)
        if self.original is None:
            object.__setattr__(self, "original", self.graph)

    @property
    def capacity(self) -> np.ndarray:
        return self.topology.memory * (1.0 - self.memory_headroom)

    @cached_property
    def sharding_tables(self) -> Any:
        """The sharding tables of :attr:`original` per logical mesh (``.get(mesh)``), built once per
        problem and mesh (:class:`planmap.sharding.solution.TablesCache`)."""
        from planmap.sharding.solution import TablesCache

        return TablesCache(self)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_devices(self) -> int:
        return self.topology.num_devices

    def in_flight(self, position: int, num_stages: int) -> int:
        """Microbatches whose activations a pipeline stage holds at once under the schedule."""
        if self.mode == "inference":
            return 1
        if self.schedule == "1f1b":
            return max(1, min(self.microbatches, num_stages - position))
        return self.microbatches

    @classmethod
    def from_graph(cls, graph: OpGraph, topology: Topology, *, objective: str = "throughput",
                   mode: str = "inference", optimizer: str = "adam", **kwargs: Any) -> Problem:
        """A problem without a spec file (tests, benchmarks, profiled graphs)."""
        cost = CostModel.build(graph, topology, mode=mode, optimizer=optimizer)
        return cls(name=graph.name, graph=graph, topology=topology, cost=cost, objective=objective, mode=mode,
                   **kwargs)


def kernel_roles(original: OpGraph) -> tuple[np.ndarray, np.ndarray]:
    """(anchor, work) int arrays over the ops of ``original``: an anchor (contraction, reduction, control
    flow, call) launches its own kernel; a work op without an anchor in its fusion makes one loop kernel."""
    from planmap.frontend.costs import BODY_OPS, SPECIAL

    kinds = np.asarray(original.kind, dtype=object)
    anchor = np.array([k in SPECIAL or k in BODY_OPS or k.startswith("stablehlo.custom_call") for k in kinds],
                      np.int64)
    work = np.array([k not in _KERNEL_FREE for k in kinds], np.int64)
    return anchor, work


def _kernels(graph: OpGraph, original: OpGraph) -> np.ndarray:
    """Kernel launches per node: its anchor ops (contractions, reductions, control flow, calls), or one
    loop-fusion kernel for a node of only elementwise/data-movement ops, or none for free ops."""
    anchor, work = kernel_roles(original)
    if graph.num_nodes == 0:
        return np.zeros(0)
    starts = graph.members_indptr[:-1]
    empty = np.diff(graph.members_indptr) == 0
    anchors = np.where(empty, 0, np.add.reduceat(anchor[graph.members], starts))
    any_work = np.where(empty, 0, np.add.reduceat(work[graph.members], starts)) > 0
    return np.where(anchors > 0, anchors, any_work.astype(np.int64)).astype(float)


def _pins(spec, graph: OpGraph, original: OpGraph, topo: Topology, allowed: np.ndarray) -> None:
    names = np.asarray(original.op_name, dtype=object)
    node_of = graph.original_to_node
    for pin in spec.spec.constraints.pins:
        ops = np.flatnonzero([fnmatch.fnmatchcase(n, pin.ops) for n in names])
        devs = topo.match(pin.device)
        if len(ops) == 0:
            raise InfeasibleError(f"pin {pin.ops!r} -> {pin.device!r} matches no operator of the model "
                                  f"(operator names look like {names[len(names) // 2]!r})")
        mask = np.zeros(topo.num_devices, bool)
        mask[devs] = True
        nodes = np.unique(node_of[ops])
        allowed[nodes] &= mask


AUTO_MIN_NODES_PER_DEVICE = 3  # granularity the solvers need to balance stages well
AUTO_MAX_NODES = 5000  # beyond this, exact solvers slow down a lot


def _coarsen(frontend: Any, original: OpGraph, level: str, topo: Topology) -> OpGraph:
    """Coarsen ``original``; ``auto`` takes repeated layers when there are a few per device (they are
    the natural pipeline stages), else fused ops — never raw ops, whose argument-only chains (bias
    broadcasts, converts) would multiply the solvers' work for nothing."""
    if level != "auto":
        return frontend.coarsen(original, level)
    devices = max(1, len(topo.accelerators) or topo.num_devices)
    layers = frontend.coarsen(original, "layers")
    if layers.num_nodes >= AUTO_MIN_NODES_PER_DEVICE * devices:
        return layers
    fused = frontend.coarsen(original, "fuse")
    return fused if fused.num_nodes <= AUTO_MAX_NODES else layers


def _batch_size(graph: OpGraph) -> int | None:
    """Leading dim of the first data argument: the samples one run of the artifact processes."""
    data = [a for a in graph.args if a.role == "data" and a.type.shape]
    return int(data[0].type.shape[0]) if data else None


def _microbatches(model: Any, graph: OpGraph, topo: Topology) -> int:
    """Microbatches per step: the spec's number, or for ``auto`` globalBatch / the artifact's batch size
    (else twice the number of pipeline devices). The artifact is exported at the microbatch size."""
    batch = _batch_size(graph)
    mb = model.microbatches
    if mb == "auto":
        if model.global_batch and batch:
            mb = max(1, model.global_batch // batch)
        else:
            mb = 2 * max(1, len(topo.accelerators))
    if model.global_batch and batch and model.global_batch != batch * mb:
        raise PlanmapError(f"globalBatch {model.global_batch} != the artifact's batch {batch} x microbatches {mb}: "
                              "the artifact is run once per microbatch, so export it at globalBatch / microbatches")
    return int(mb)


def build_problem(spec: Any, *, graph: OpGraph | None = None) -> Problem:
    """The problem a :class:`~planmap.spec.LoadedSpec` describes: load, coarsen, cost, constrain."""
    from planmap import frontend

    body = spec.spec
    model = body.model
    topo = Topology.from_spec(body.cluster)
    original = graph if graph is not None else frontend.load_model(
        spec.model_path, format=str(model.format), arguments=model.arguments, entry=model.entry,
        loop_trip_count=model.loop_trip_count)
    coarse = _coarsen(frontend, original, str(body.constraints.coarsening), topo)
    mode = str(model.mode)
    cost = CostModel.build(coarse, topo, mode=mode, optimizer=str(model.optimizer),
                           kernels=_kernels(coarse, original))
    allowed = cost.supported.copy()
    _pins(spec, coarse, original, topo, allowed)
    bad = np.flatnonzero(~allowed.any(axis=1))
    if len(bad):
        i = int(bad[0])
        raise InfeasibleError(f"operator {coarse.op_name[i]!r} ({coarse.kind[i]}) can run on no device of the "
                              f"cluster (unsupported, or excluded by pins); {len(bad)} such node(s)")
    schedule = str(body.constraints.schedule)
    if schedule == "auto":
        schedule = "1f1b" if mode == "training" else "gpipe"
    mb = _microbatches(model, original, topo)
    return Problem(
        name=spec.metadata.name, graph=coarse, topology=topo, cost=cost, objective=str(body.objective.kind),
        variant=str(body.objective.variant), mode=mode,
        contiguous=str(body.constraints.placement) == "contiguous",
        max_subgraphs=body.constraints.max_subgraphs_per_device, max_stages=body.constraints.max_stages,
        memory_headroom=body.constraints.memory_headroom, schedule=schedule,
        microbatches=mb, replication=str(body.constraints.replication) == "allow",
        batch_size=_batch_size(original),
        allowed=allowed, original=original, spec=spec,
    )


ProgressCallback = Callable[..., None]

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
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from planmap.cluster import Topology
from planmap.cost import CostModel
from planmap.graph import OpGraph
from planmap.vocabulary import Mode, ObjectiveKind, Schedule, ThroughputVariant

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
    "relative_gap",
]


class Status(enum.StrEnum):
    """How a solve ended."""

    OPTIMAL = "optimal"  # proven optimal (within the backend's tolerances)
    GAP_REACHED = "gap_reached"  # proven within the requested relative gap
    TIME_LIMIT = "time_limit"  # stopped at the time limit with an incumbent
    BOUNDED = "bounded"  # the search finished with an incumbent and a proven bound, gap above the requested one
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
    inputs: tuple[tuple[str, str], ...] = ()  # (role, path) of files the solver read that decide the plan

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        if self.gap is None and self.bound is not None:
            object.__setattr__(self, "gap", relative_gap(self.objective, self.bound))


@dataclass(frozen=True)
class Stage:
    """A stage: the devices it runs on (several = replicated), for SPMD its mesh axes, and whether its
    backward recomputes its layers' forward (``remat``; None: as the problem's cost model says)."""

    devices: tuple[int, ...]
    mesh_axes: tuple[tuple[str, int], ...] = ()
    remat: bool | None = None

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
    -> spec for a sharding constraint on that op result; ``zero``: the ZeRO stage of a training step
    (0 none, 1 optimizer state, 2 also gradients sharded over the data axes; 3 is parameter specs).
    """

    mesh_axes: tuple[tuple[str, int], ...]
    args: dict[int, tuple] = field(default_factory=dict)
    values: dict[tuple[int, int], tuple] = field(default_factory=dict)
    zero: int = 0


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
        first: dict[int, int] = {}
        for i, d in enumerate(device_of.tolist()):
            first.setdefault(d, i)
        order = sorted(first, key=first.__getitem__)
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

    @classmethod
    def from_spec(cls, solver: Any, **overrides: Any) -> SolveOptions:
        """Options from a spec's ``solver`` section (:class:`planmap.spec.models.SolverConfig`).

        ``overrides`` that are not None win over the spec — CLI flags, or the options a plan recorded —
        so every caller resolves "flag, else spec" the same way.
        """
        options: dict[str, Any] = dict(time_limit=solver.time_limit / 1e9, rel_gap=solver.rel_gap,
                                       threads=solver.threads, seed=solver.seed, backend=solver.backend,
                                       passthrough=dict(solver.options))
        options.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**options)


class Progress(Protocol):
    """Receives anytime updates from a long solve (the CLI shows them as a live line)."""

    def __call__(self, *, elapsed: float, incumbent: float | None, bound: float | None, message: str = "") -> None:
        ...


@runtime_checkable
class Solver(Protocol):
    """What a solver module registers: a name, the objectives it handles, and ``solve``."""

    name: str
    objectives: frozenset[ObjectiveKind]

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        ...


# ----------------------------------------------------------------------------------- problem
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
    objective: ObjectiveKind = ObjectiveKind.THROUGHPUT
    variant: ThroughputVariant = ThroughputVariant.MAX_LOAD  # how a training bottleneck is measured
    mode: Mode = Mode.INFERENCE
    contiguous: bool = True
    max_subgraphs: int = 1
    max_stages: int | None = None
    memory_headroom: float = 0.0
    schedule: Schedule = Schedule.GPIPE  # GPIPE or ONE_F_ONE_B (the assembly resolves AUTO)
    microbatches: int = 1
    replication: bool = False
    # the planner's choices (:mod:`planmap.microbatching`): () = exactly ``microbatches`` / ``schedule``
    microbatch_choices: tuple[int, ...] = ()
    schedule_choices: tuple[Schedule, ...] = ()
    batch_size: int | None = None  # samples per microbatch (the artifact's data batch), when known
    remat_choice: bool = False  # ``remat: auto``: activation checkpointing is a per-stage decision (Stage.remat)
    # Derived when omitted (the cost model's supported devices; the graph itself) and always set
    # after __post_init__: typed as stored, so readers need no None checks.
    allowed: np.ndarray = cast(np.ndarray, None)
    original: OpGraph = cast(OpGraph, None)
    spec: Any = None  # LoadedSpec when built from a spec file

    def __post_init__(self) -> None:
        # strings are accepted (tests, benchmarks) and normalised to the shared vocabulary
        object.__setattr__(self, "objective", ObjectiveKind(self.objective))
        object.__setattr__(self, "variant", ThroughputVariant(self.variant))
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "schedule", Schedule(self.schedule))
        if self.schedule is Schedule.AUTO:
            raise ValueError("Problem.schedule requires gpipe or 1f1b, but got auto (resolve it from the mode)")
        object.__setattr__(self, "microbatch_choices", tuple(sorted({int(m) for m in self.microbatch_choices})))
        object.__setattr__(self, "schedule_choices", tuple(Schedule(s) for s in self.schedule_choices))
        if Schedule.AUTO in self.schedule_choices:
            raise ValueError("Problem.schedule_choices requires gpipe or 1f1b, but got auto")
        if self.microbatch_choices and self.microbatches not in self.microbatch_choices:
            raise ValueError(f"Problem.microbatches requires one of {list(self.microbatch_choices)}, "
                             f"but got {self.microbatches}")
        if self.schedule_choices and self.schedule not in self.schedule_choices:
            raise ValueError(f"Problem.schedule requires one of {[str(s) for s in self.schedule_choices]}, "
                             f"but got {self.schedule}")
        allowed = self.cost.supported.copy() if self.allowed is None else np.asarray(self.allowed, bool)
        if allowed.shape != (self.graph.num_nodes, self.topology.num_devices):
            raise ValueError(f"Problem.allowed requires shape {(self.graph.num_nodes, self.topology.num_devices)}")
        allowed.setflags(write=False)
        object.__setattr__(self, "allowed", allowed)
        if self.original is None:
            object.__setattr__(self, "original", self.graph)

    @property
    def microbatch_candidates(self) -> tuple[int, ...]:
        """The microbatch counts a plan of this problem may record (ascending)."""
        return self.microbatch_choices or (self.microbatches,)

    @property
    def schedule_candidates(self) -> tuple[Schedule, ...]:
        """The pipeline schedules a plan of this problem may record."""
        return self.schedule_choices or (self.schedule,)

    def decide(self, microbatches: int, schedule: str | None = None) -> Problem:
        """This problem with the planner's decisions fixed (``schedule`` None: unchanged); ``self`` when nothing
        changes, so its memo is kept. ValueError for a value outside the candidates."""
        sched = self.schedule if schedule is None else Schedule(schedule)
        if microbatches not in self.microbatch_candidates:
            raise ValueError(f"microbatches {microbatches} is not among {list(self.microbatch_candidates)}")
        if sched not in self.schedule_candidates:
            raise ValueError(f"schedule {sched} is not among {[str(s) for s in self.schedule_candidates]}")
        if microbatches == self.microbatches and sched is self.schedule:
            return self
        return replace(self, microbatches=int(microbatches), schedule=sched)

    @property
    def capacity(self) -> np.ndarray:
        return self.topology.memory * (1.0 - self.memory_headroom)

    @cached_property
    def memo(self) -> dict[str, Any]:
        """Caches of data derived from this problem (e.g. the sharding tables per mesh); a problem made
        with ``dataclasses.replace`` starts with its own empty memo."""
        return {}

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_devices(self) -> int:
        return self.topology.num_devices

    def in_flight(self, position: int, num_stages: int) -> int:
        """Microbatches whose activations a pipeline stage holds at once under the schedule."""
        if self.mode is Mode.INFERENCE:
            return 1
        if self.schedule is Schedule.ONE_F_ONE_B:
            return max(1, min(self.microbatches, num_stages - position))
        return self.microbatches

    @classmethod
    def from_graph(cls, graph: OpGraph, topology: Topology, *, objective: str = ObjectiveKind.THROUGHPUT,
                   mode: str = Mode.INFERENCE, optimizer: str = "adam", **kwargs: Any) -> Problem:
        """A problem without a spec file (tests, benchmarks, profiled graphs)."""
        cost = CostModel.build(graph, topology, mode=mode, optimizer=optimizer)
        return cls(name=graph.name, graph=graph, topology=topology, cost=cost,
                   objective=ObjectiveKind(objective), mode=Mode(mode), **kwargs)


ProgressCallback = Callable[..., None]

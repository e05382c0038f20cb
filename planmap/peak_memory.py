"""A plan's memory per stage and per device under the program model: what a plan records and is judged by.

The solvers search with linear memory terms (:func:`planmap.evaluate.evaluate`: the parameters a stage uses
times the training factor, its node state, its stash times the microbatches in flight, its largest single
node's working set): sums over nodes that an IP or a DP can constrain cheaply, but 0.48-1.20 of what XLA
allocates for the stage (``bench/results/memory.md``). The number a plan records and that ``solve`` and
``check`` judge feasibility by is this module's, per stage of the final plan:

- **program**: the largest compiled program of the stage for one microbatch on one of its devices
  (:func:`planmap.program_memory.stage_program_bytes`: the parameters and received values it reads, the
  values it sends, its temporaries under liveness in op order; each value divided by its shards under the
  stage's layout, a replicated stage's activations by its replicas), checked against XLA's
  ``memory_analysis()`` (median 1.001); a checkpointed stage's recomputed ops are rebuilt in the program
  that reads them (its backward), as the runtime runs them;
- **optimizer** (training): what the parameters' optimizer state adds beyond the parameters and their
  gradients, which the program already holds (arguments and outputs): the linear model's bytes per device
  of the stage's parameters with gradients and optimizer state (ZeRO-aware on sharded stages), less twice
  the parameters;
- **state**: the nodes' state bytes;
- **stash**: the stashed activations of the *other* microbatches the schedule keeps in flight at the
  stage's position (the program holds one microbatch's), the cost model's stash per microbatch (remat-aware)
  times ``in_flight - 1``.

A device holding several stages holds the sum of theirs (their programs' buffers are not shared). This is
computed once per final plan (at most 0.3 s of CPU on the examples: one liveness pass per compiled program), never
inside a solver: :func:`with_peak_memory` replaces an :class:`~planmap.evaluation.Evaluation`'s memory and its memory
verdict with these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planmap.evaluation import Evaluation, is_memory_violation
from planmap.frontend.recompute import recomputed_nodes
from planmap.graph import OpGraph
from planmap.problem import Problem, Solution
from planmap.program_memory import segment_bytes, stage_program_bytes, value_shards
from planmap.remat import remat_ops
from planmap.remat_stages import for_solution, node_mask
from planmap.segments import stage_programs
from planmap.units import format_bytes
from planmap.vocabulary import Mode, ObjectiveKind

__all__ = ["StageMemory", "PeakMemory", "stage_programs_bytes", "peak_memory", "with_peak_memory"]

PROGRAM_PARTS = ("params", "inputs", "outputs", "temp")


@dataclass(frozen=True)
class StageMemory:
    """Bytes per device of one stage (see the module doc); ``in_flight``: microbatches its schedule holds."""

    stage: int
    devices: tuple[int, ...]
    params: float
    inputs: float
    outputs: float
    temp: float
    optimizer: float
    state: float
    stash: float
    in_flight: int
    linear: float  # the solvers' linear terms for the same stage and device, for comparison

    @property
    def program(self) -> float:
        """The largest compiled program of the stage, one microbatch."""
        return self.params + self.inputs + self.outputs + self.temp

    @property
    def total(self) -> float:
        return self.program + self.optimizer + self.state + self.stash

    def parts(self) -> dict[str, float]:
        return {"params": self.params, "inputs": self.inputs, "outputs": self.outputs, "temp": self.temp,
                "optimizer": self.optimizer, "state": self.state, "stash": self.stash}


@dataclass(frozen=True, eq=False)
class PeakMemory:
    """Per stage and per device (``memory``, (D,) bytes) memory of a plan under the program model."""

    stages: tuple[StageMemory, ...]
    memory: np.ndarray
    capacity: np.ndarray

    def violations(self, problem: Problem) -> list[str]:
        """One violation naming the device most over capacity, its stage(s), bytes and capacity; or none."""
        cap = self.capacity
        over = np.flatnonzero(self.memory > cap * (1 + 1e-12))
        if not len(over):
            return []
        d = int(over[np.argmax(self.memory[over] - cap[over])])
        held = [s for s in self.stages if d in s.devices]
        what = "; ".join(
            f"stage {s.stage}: {format_bytes(s.total)} = program {format_bytes(s.program)} (params "
            f"{format_bytes(s.params)}, inputs {format_bytes(s.inputs)}, outputs {format_bytes(s.outputs)}, temp "
            f"{format_bytes(s.temp)}) + optimizer {format_bytes(s.optimizer)} + state {format_bytes(s.state)} + "
            f"stash of {s.in_flight - 1} other microbatch(es) {format_bytes(s.stash)}; the solver's linear terms: "
            f"{format_bytes(s.linear)}" for s in held)
        names = problem.topology.names
        return [f"memory exceeded on {len(over)} device(s) under the program model, e.g. {names[d]} needs "
                f"{format_bytes(self.memory[d])} of {format_bytes(cap[d])} usable ({what})"]


def stage_programs_bytes(problem: Problem, solution: Solution) -> list[dict[str, float]]:
    """Per stage of ``solution``: its largest compiled program's ``params``, ``inputs``, ``outputs`` and
    ``temp`` bytes on one of its devices (one microbatch). Depends on the assignment and the layouts only
    (not on the microbatches or the schedule), so one result serves every microbatch candidate."""
    g, original = problem.graph, problem.original
    op_group = np.full(original.num_nodes, -1, np.int64)
    for i, k in enumerate(np.asarray(solution.assignment).tolist()):
        op_group[g.members_of(i)] = k
    splits = value_shards(problem, solution)
    is_param = np.zeros(original.num_values, bool)
    is_param[original.param_values] = True
    remat = node_mask(problem, solution) if solution.shardings is None else None  # as the plan records it
    out = []
    for k, st in enumerate(solution.stages):
        split = splits[k]
        if split is None and solution.shardings is None and len(st.devices) > 1:
            split = np.where(is_param, 1.0, float(len(st.devices)))  # replicas split the microbatch
        mine = np.asarray(solution.assignment) == k
        again = (remat_ops(g, original, np.flatnonzero(mine & remat)) if remat is not None
                 else np.zeros(0, np.int64))
        if len(again):
            out.append(_checkpointed_program(original, op_group, k, again, split))
        else:
            out.append(stage_program_bytes(original, op_group, k, split=split))
    return out


def _checkpointed_program(graph: OpGraph, op_group: np.ndarray, k: int, again: np.ndarray,
                          split: np.ndarray | None) -> dict[str, float]:
    """:func:`~planmap.program_memory.stage_program_bytes` of a checkpointed stage: its ``again`` ops (the plan's
    ``remat``) are rebuilt by the program that reads them, as the cheap recomputed ops are — the runtime copies
    them into the backward program, fed by the stashed boundary values (:mod:`planmap.runtime.remat`) — so
    they are neither outputs of the forward program nor arguments of the backward one."""
    cheap = recomputed_nodes(graph)
    cheap[again] = True
    best = {"params": 0.0, "inputs": 0.0, "outputs": 0.0, "temp": 0.0}
    for ops in stage_programs(graph.pred, op_group, k):
        own = np.zeros(graph.num_nodes, bool)
        own[ops] = True
        part = segment_bytes(graph, own & ~cheap, cheap=cheap, split=split)
        if sum(part.values()) > sum(best.values()):
            best = part
    return best


def _positions(problem: Problem, solution: Solution, ev: Evaluation) -> tuple[np.ndarray, int]:
    """Each stage's position in the pipeline and the number of positions: device groups in the evaluator's
    stage order (stages on one device group share a position, as the pipeline evaluator counts them)."""
    if problem.objective is not ObjectiveKind.THROUGHPUT:
        return np.zeros(solution.num_stages, np.int64), 1
    order = list(ev.stage_order) if ev.stage_order else list(range(solution.num_stages))
    groups: dict[tuple[int, ...], int] = {}
    pos = np.zeros(solution.num_stages, np.int64)
    for k in order:
        pos[k] = groups.setdefault(tuple(sorted(solution.stages[k].devices)), len(groups))
    return pos, len(groups)


def _linear_params(problem: Problem, solution: Solution, ev: Evaluation, k: int, params: float) -> float:
    """The linear model's bytes per device of stage ``k``'s parameters with gradients and optimizer state:
    the SPMD model's (ZeRO-aware) for a sharded stage, else the training factor times the parameters."""
    if ev.stages:
        return float(ev.stages[k].memory_parts["params"])
    if ev.spmd is not None:
        return float(ev.spmd.memory_parts["params"])
    return problem.cost.param_factor * params


def _stash(problem: Problem, solution: Solution, ev: Evaluation, k: int, in_flight: int) -> float:
    """Stage ``k``'s stash of one microbatch per device (the linear model's, which follows remat)."""
    if ev.stages:
        return float(ev.stages[k].memory_parts["stash"]) / max(ev.stages[k].in_flight, 1)
    if ev.spmd is not None:
        return float(ev.spmd.memory_parts["stash"])
    mine = np.asarray(solution.assignment) == k
    return float(for_solution(problem, solution).cost.stash_bytes[mine].sum()) / len(solution.stages[k].devices)


def peak_memory(problem: Problem, solution: Solution, ev: Evaluation, *,
                programs: list[dict[str, float]] | None = None) -> PeakMemory:
    """The program-model memory of ``solution`` (evaluated as ``ev`` under ``problem``'s microbatches and
    schedule) per stage and per device; ``programs``: :func:`stage_programs_bytes`, when already computed."""
    programs = stage_programs_bytes(problem, solution) if programs is None else programs
    train = problem.mode is Mode.TRAINING
    pos, n_pos = _positions(problem, solution, ev)
    assignment = np.asarray(solution.assignment)
    D = problem.topology.num_devices
    memory = np.zeros(D)
    stages = []
    for k, st in enumerate(solution.stages):
        prog = programs[k]
        mine = assignment == k
        in_flight = int(problem.in_flight(int(pos[k]), n_pos)) if train and n_pos > 1 else 1
        if ev.stages:
            in_flight = ev.stages[k].in_flight
        linear_params = _linear_params(problem, solution, ev, k, prog["params"]) if train else prog["params"]
        optimizer = max(0.0, linear_params - 2.0 * prog["params"]) if train else 0.0
        stash = _stash(problem, solution, ev, k, in_flight) if train else 0.0
        devs = tuple(int(d) for d in st.devices)
        linear = float(ev.stages[k].memory) if ev.stages else float(ev.memory[devs[0]]) if mine.any() else 0.0
        sm = StageMemory(stage=k, devices=devs, **prog, optimizer=optimizer,
                         state=float(problem.graph.state_bytes[mine].sum()), stash=stash * (in_flight - 1),
                         in_flight=in_flight, linear=linear)
        stages.append(sm)
        memory[list(devs)] += sm.total
    return PeakMemory(tuple(stages), memory, np.asarray(problem.capacity, float))


def with_peak_memory(problem: Problem, solution: Solution, ev: Evaluation, *,
                     programs: list[dict[str, float]] | None = None) -> Evaluation:
    """``ev`` with its memory per device and its memory verdict under the program model (:func:`peak_memory`),
    the details in ``ev.peak``; the linear terms' memory violation (the solvers' proxy) is dropped. An evaluation
    with other violations (an invalid plan) is returned as it is."""
    if ev.peak is not None:
        return ev
    if any(not is_memory_violation(v) for v in ev.violations):
        return ev  # decisions that do not fit the model (e.g. an invalid sharding): there are no programs to measure
    pm = peak_memory(problem, solution, ev, programs=programs)
    violations = [v for v in ev.violations if not is_memory_violation(v)] + pm.violations(problem)
    return replace(ev, memory=pm.memory, feasible=not violations, violations=tuple(violations), peak=pm)

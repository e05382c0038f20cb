"""``Evaluation``: what :func:`planmap.evaluate.evaluate` says of a solution (objective, memory, loads).

Its own module so that the evaluator's branches (pipelines and placements in :mod:`planmap.evaluate`,
SPMD plans in :mod:`planmap.evaluate_spmd`) share the result type without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.problem import Problem

__all__ = ["Evaluation", "memory_violations", "is_memory_violation"]

_MEMORY_VIOLATION = "memory exceeded on "  # how every memory violation starts (linear terms or program model)


@dataclass(frozen=True, eq=False)
class Evaluation:
    """The measured-by-model consequences of a solution. Times in seconds, memory in bytes."""

    objective: float
    feasible: bool
    violations: tuple[str, ...]
    memory: np.ndarray  # (D,) bytes held per device
    capacity: np.ndarray  # (D,) usable bytes per device
    load: np.ndarray  # (D,) busy seconds per device (per microbatch for pipelines)
    fw_load: np.ndarray
    bw_load: np.ndarray
    stage_start: np.ndarray  # (S,) latency: stage start times; pipelines: NaN
    stage_finish: np.ndarray
    node_finish: np.ndarray | None  # (n,) latency only
    bytes_moved: int
    step_time: float  # latency: = objective; pipelines: (microbatches + stages - 1) x bottleneck
    stage_order: tuple[int, ...]  # pipelines: stage ids in pipeline order
    spmd: Any = None  # SPMD plans: the planmap.sharding.SpmdEvaluation (collectives, compute vs comm)
    stages: tuple = ()  # whole-cluster plans: a planmap.evaluate_stages.StageEvaluation per stage
    # a final plan's memory under the program model (planmap.peak_memory.PeakMemory): ``memory`` and the memory
    # verdict are then its numbers; None: the solvers' linear terms (what evaluate computes)
    peak: Any = None

    @property
    def bottleneck_device(self) -> int:
        return int(np.argmax(self.load))


def memory_violations(problem: Problem, mem: np.ndarray, violations: list[str]) -> None:
    """Append a violation naming the worst device when ``mem`` exceeds the problem's usable capacity."""
    cap = problem.capacity
    over = np.flatnonzero(mem > cap * (1 + 1e-12))
    if len(over):
        from planmap.units import format_bytes

        d = int(over[np.argmax(mem[over] - cap[over])])
        violations.append(f"{_MEMORY_VIOLATION}{len(over)} device(s), e.g. {problem.topology.names[d]} needs "
                          f"{format_bytes(mem[d])} of {format_bytes(cap[d])} usable")


def is_memory_violation(violation: str) -> bool:
    """Whether ``violation`` is a memory violation (:func:`memory_violations` or the program model's)."""
    return violation.startswith(_MEMORY_VIOLATION)

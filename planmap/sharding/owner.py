"""The owner stage of a tensor in a plan of several stages: the stage in whose mesh axis names the plan writes
the tensor's spec.

An op result is owned by the stage that runs its producer; an argument by the lowest-index stage that runs an
op reading it. The planner writes and reads specs by this rule (:mod:`planmap.sharding.stage_layout`) and the
runtime applies them by it (``runtime/layout.py``), so both sides must take it from here. Stages are plain
indices: ``op_stage[op]`` is the stage of op ``op`` (negative: none)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["argument_owners"]


def argument_owners(op_stage: Sequence[int] | np.ndarray, reads: Iterable[tuple[int, int]]) -> dict[int, int]:
    """``{argument index: owner stage}`` from ``reads``, the (op, argument index) pairs of every op operand
    that is an argument: the lowest stage that runs an op reading the argument (ops of no stage skipped)."""
    first: dict[int, int] = {}
    for op, arg in reads:
        stage = int(op_stage[op])
        if stage >= 0 and stage < first.get(arg, stage + 1):
            first[arg] = stage
    return first

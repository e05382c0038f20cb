"""The owner stage of a tensor in a plan of several stages: the stage in whose mesh axis names the plan writes
the tensor's spec, and how every other stage holds it (:func:`held_spec`).

An op result is owned by the stage that runs its producer; an argument by the lowest-index stage that runs an
op reading it. The planner writes and reads specs by this rule (:mod:`planmap.sharding.stage_layout`) and the
runtime applies them by it (``runtime/layout.py``), so both sides must take it from here. A stage that holds a
tensor it does not own (a received value, a parameter two stages read) holds it in the owner's spec *restricted
by name* to its own axes: the names it lacks dropped, and a dim's axes dropped when their sizes do not divide it.
Stages are plain indices: ``op_stage[op]`` is the stage of op ``op`` (negative: none)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["argument_owners", "held_spec"]


def argument_owners(op_stage: Sequence[int] | np.ndarray, reads: Iterable[tuple[int, int]]) -> dict[int, int]:
    """``{argument index: owner stage}`` from ``reads``, the (op, argument index) pairs of every op operand
    that is an argument: the lowest stage that runs an op reading the argument (ops of no stage skipped)."""
    first: dict[int, int] = {}
    for op, arg in reads:
        stage = int(op_stage[op])
        if stage >= 0 and stage < first.get(arg, stage + 1):
            first[arg] = stage
    return first


def held_spec(named: Sequence[Sequence[str]], names: Sequence[str], sizes: Sequence[int],
              shape: Sequence[int]) -> tuple[tuple[str, ...], ...]:
    """The spec, per dim the axis names splitting it, in which a stage with axes ``names``/``sizes`` holds a
    tensor of ``shape`` whose owner's spec is ``named``: per dim the names it has, in its axis order, or
    none when their sizes do not divide the dim (the tensor is then whole along that dim)."""
    order = {n: i for i, n in enumerate(names)}
    out = []
    for dim, n in zip(named, shape, strict=True):
        kept = tuple(sorted((a for a in dim if a in order), key=order.__getitem__))
        out.append(kept if n % math.prod(sizes[order[a]] for a in kept) == 0 else ())
    return tuple(out)

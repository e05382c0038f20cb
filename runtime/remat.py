"""Activation checkpointing as the plan states it: a stage's backward runs its layers' forward again.

A plan stage with ``remat`` op ranges (:func:`planmap.remat.remat_ops`) keeps, per microbatch, only
the results of its other forward ops (the layer-boundary values); the segments that run after its
forward copy the ``remat`` ops they need and rebuild those values from the stashed ones
(:func:`planmap.runtime.split.plan_cuts`). The copy is a separate compiled program, so XLA cannot
merge it with the original: a stage that would run as one program (forward, loss and backward) is
cut after its last checkpointed op, so its stash crosses a call boundary like any other stage's.
"""

from __future__ import annotations

import numpy as np

from planmap.plan.build import ranges_to_ids
from planmap.plan.document import PlanDocument
from planmap.runtime.ir_graph import ARG, EntryGraph, Ref
from planmap.runtime.segments import Segment

__all__ = ["stage_remat", "split_for_remat", "remat_sets", "stash_bytes"]


def stage_remat(doc: PlanDocument) -> list[frozenset[int]]:
    """Per plan stage (by position), the op ids its backward runs again."""
    return [frozenset(int(i) for i in ranges_to_ids(st.remat)) for st in doc.stages]


def split_for_remat(segments: list[Segment], again: list[frozenset[int]]) -> list[Segment]:
    """Cut a checkpointing stage that runs as one call (its forward, loss and backward) into the part up
    to its last checkpointed op and the rest (ids are a topological order, so the order stays valid).
    A stage already cut into calls (its backward waits for later stages) keeps its calls: its forward
    call must not copy its own layers."""
    calls: dict[int, int] = {}
    for seg in segments:
        calls[seg.stage] = calls.get(seg.stage, 0) + 1
    out: list[Segment] = []
    for seg in segments:
        ops = again[seg.stage]
        if calls[seg.stage] == 1 and ops:
            last = max(ops)
            head = tuple(i for i in seg.ops if i <= last)
            tail = seg.ops[len(head):]
            if head and tail:
                out += [Segment(seg.stage, head), Segment(seg.stage, tail)]
                continue
        out.append(seg)
    return out


def remat_sets(segments: list[Segment], again: list[frozenset[int]]) -> list[frozenset[int]]:
    """Per segment, its stage's checkpointed ops that other segments run (the ones it may copy)."""
    return [again[seg.stage] - frozenset(seg.ops) for seg in segments]


def stash_bytes(graph: EntryGraph, segments: list[Segment], cuts) -> dict[int, int]:
    """Per stage (by position), bytes of its results that the runtime keeps per microbatch from one call
    to a later one: read by another call of the producing stage (its backward reads its forward), or by
    two calls of one stage (a layer's input, read by the forward and again by the recomputation) —
    what :attr:`planmap.cost.CostModel.stash_bytes` charges to the producing stage. Values used only
    inside the call that makes them are that call's temporaries, not counted here."""
    readers: dict[Ref, list[int]] = {}
    for g, cut in enumerate(cuts):
        for r in cut.inputs:
            if r[0] != ARG:
                readers.setdefault(r, []).append(g)
    out = {seg.stage: 0 for seg in segments}
    for seg, cut in zip(segments, cuts, strict=True):
        for r in cut.outputs:
            stages = [segments[h].stage for h in readers.get(r, [])]
            if seg.stage in stages or len(stages) > len(set(stages)):
                out[seg.stage] += _nbytes(graph.tensor_type(r))
    return out


def _nbytes(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * t.np_dtype.itemsize

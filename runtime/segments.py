"""Plan stages -> segments: the units the runtime compiles and calls, in a dependency order.

A stage runs as the programs :func:`planmap.segments.stage_programs` cuts it into (one call when it
is convex, else its runs of consecutive op ids; the cost model predicts the memory of the same
programs). Op ids are a topological order, so runs ordered by their first op always form a valid
execution order — the fallback, when the segments depend on each other both ways, that makes every
plan runnable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.errors import InputError
from planmap.graph import topological_order
from planmap.plan.build import ranges_to_ids
from planmap.plan.document import PlanDocument
from planmap.runtime.ir_graph import ARG, EntryGraph
from planmap.segments import pred_csr, runs, stage_programs

__all__ = ["Segment", "op_stages", "form_segments"]


@dataclass(frozen=True)
class Segment:
    """Ops (ascending ids) of one stage that run as one call."""

    stage: int
    ops: tuple[int, ...]


def op_stages(doc: PlanDocument, n_ops: int) -> np.ndarray:
    """Stage index (position in ``doc.stages``) of every op; InputError unless each op is in one stage."""
    stage = np.full(n_ops, -1, np.int64)
    for k, st in enumerate(doc.stages):
        for a, b in st.ops:
            if not 0 <= a <= b <= n_ops:
                raise InputError(f"plan stage {st.id} names ops [{a}, {b}) but the artifact's @main has {n_ops} ops "
                                 "(is the plan for this artifact?)")
        ids = ranges_to_ids(st.ops)
        clash = ids[stage[ids] >= 0]
        if len(clash):
            other = doc.stages[int(stage[clash[0]])].id
            raise InputError(f"plan stages {other} and {st.id} both run op {int(clash[0])}")
        stage[ids] = k
    missing = np.flatnonzero(stage < 0)
    if len(missing):
        raise InputError(f"no plan stage runs op {int(missing[0])} ({len(missing)} op(s) unplaced)")
    return stage


def _producers(graph: EntryGraph, op: int) -> set[int]:
    return {o for o, _ in graph.operands[op] if o != ARG}


def _runs(ops: np.ndarray) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in part) for part in runs(ops)]


def _order(graph: EntryGraph, segments: list[Segment]) -> list[int] | None:
    """Topological order of the segments (first op breaks ties), or None if they depend cyclically."""
    seg_of = np.empty(graph.n_ops, np.int64)
    for s, seg in enumerate(segments):
        seg_of[list(seg.ops)] = s
    deps: list[set[int]] = [set() for _ in segments]
    for s, seg in enumerate(segments):
        for i in seg.ops:
            deps[s].update(int(seg_of[p]) for p in _producers(graph, i) if seg_of[p] != s)
    pairs = [(d, s) for s, ds in enumerate(deps) for d in sorted(ds)]
    return topological_order(len(segments), pairs, [seg.ops[0] for seg in segments])


def form_segments(doc: PlanDocument, graph: EntryGraph) -> list[Segment]:
    """The plan's segments in execution order (one per stage where possible)."""
    stage = op_stages(doc, graph.n_ops)
    preds = pred_csr([sorted(_producers(graph, i)) for i in range(graph.n_ops)])
    segments = [Segment(k, tuple(int(i) for i in ops))
                for k in range(len(doc.stages)) for ops in stage_programs(preds, stage, k)]
    order = _order(graph, segments)
    if order is None:  # stages depend on each other both ways: fall back to runs of consecutive ops
        segments = [Segment(k, run) for k in range(len(doc.stages)) for run in _runs(np.flatnonzero(stage == k))]
        order = _order(graph, segments)
        assert order is not None  # runs in op order are always acyclic
    return [segments[s] for s in order]

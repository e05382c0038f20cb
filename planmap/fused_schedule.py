"""When each buffer of a stage program is made and last read, under XLA:CPU's breadth-first schedule.

XLA:CPU's default scheduler (``xla_cpu_scheduler_type`` left at its default) is the concurrency-optimised
``BFSMemoryScheduler`` whenever it fits: a FIFO queue over the instructions of the fused program, each
appended once all its operands have run, started with the instructions that read no computed value.
Its units are fusions, not ops: an elementwise op has no step of its own, it runs inside each fusion
that reads it. :mod:`planmap.program_memory` decides which values XLA materialises; here the program's
units are its ops that write such a value (or write nothing), each depending on the units whose buffers
it reads directly or through fused values, and :func:`fifo_times` runs the queue (ties in op-id order)
to give every op a step.

Where it matters: a value read by two branches at different depths stays alive until the deeper
branch runs, even when op order would run that branch first (the GPT loss: the gather of the
log-probabilities reads the shifted logits and the ``log`` of the sum, one level deeper than the
gradient, which reads the sum directly; the shifted logits stay alive across the gradient's fusions).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from planmap.graph import OpGraph

__all__ = ["read_sources", "fifo_times", "last_reads"]


def read_sources(g: OpGraph, kept: np.ndarray, mat: np.ndarray) -> dict[int, set[int]]:
    """``{kept op: value ids}``: the materialised values (and values made outside ``kept``) each op reads,
    directly or through the fused (not materialised) values it reads."""
    indptr, vals = _in_values(g)
    made = g.value_node.astype(np.int64)
    by_op = np.argsort(made, kind="stable")
    out_ptr = np.searchsorted(made[by_op], np.arange(g.num_nodes + 1))
    fused: dict[int, set[int]] = {}
    out: dict[int, set[int]] = {}
    for i in np.flatnonzero(kept).tolist():
        acc: set[int] = set()
        for v in vals[indptr[i]: indptr[i + 1]].tolist():
            acc |= {v} if mat[v] or made[v] < 0 or not kept[made[v]] else fused.get(v, set())
        out[i] = acc
        for v in by_op[out_ptr[i]: out_ptr[i + 1]].tolist():
            if not mat[v]:
                fused[v] = acc
    return out


def fifo_times(g: OpGraph, kept: np.ndarray, mat: np.ndarray, sources: dict[int, set[int]]) -> np.ndarray:
    """(n,) the step at which each kept op runs: units (ops that write a materialised value or write
    nothing) in the order of a FIFO queue over their dependencies (module docstring); a fused op takes
    the step of the last unit it depends on (it is computed inside its readers)."""
    made = g.value_node.astype(np.int64)
    writes = np.zeros(g.num_nodes, bool)
    writes[made[(made >= 0) & mat]] = True
    outs = np.bincount(made[made >= 0], minlength=g.num_nodes)
    unit = kept & (writes | (outs == 0))
    deps: dict[int, set[int]] = {}
    users: dict[int, list[int]] = {}
    for i in np.flatnonzero(unit).tolist():
        deps[i] = {int(made[v]) for v in sources[i] if made[v] >= 0 and unit[made[v]]}
        for d in sorted(deps[i]):
            users.setdefault(d, []).append(i)
    waiting = {i: len(d) for i, d in deps.items()}
    queue = deque(i for i in sorted(deps) if not deps[i])
    time = np.zeros(g.num_nodes, np.int64)
    step = 0
    while queue:
        i = queue.popleft()
        time[i] = step
        step += 1
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                queue.append(u)
    for i in np.flatnonzero(kept & ~unit).tolist():
        ds = [int(made[v]) for v in sources[i] if made[v] >= 0 and unit[made[v]]]
        time[i] = max((time[d] for d in ds), default=0)
    return time


def last_reads(g: OpGraph, kept: np.ndarray, mat: np.ndarray, sources: dict[int, set[int]],
               time: np.ndarray) -> np.ndarray:
    """(values,) the last step at which a unit reads each materialised value (-1: none)."""
    last = np.full(g.num_values, -1, np.int64)
    made = g.value_node.astype(np.int64)
    writes = np.zeros(g.num_nodes, bool)
    writes[made[(made >= 0) & mat]] = True
    outs = np.bincount(made[made >= 0], minlength=g.num_nodes)
    for i in np.flatnonzero(kept & (writes | (outs == 0))).tolist():
        for s in sources[i]:
            last[s] = max(last[s], time[i])
    return last


def _in_values(g: OpGraph) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the values each op reads (by op id)."""
    order = np.argsort(g.edge_dst, kind="stable")
    indptr = np.zeros(g.num_nodes + 1, np.int64)
    np.add.at(indptr, g.edge_dst.astype(np.int64) + 1, 1)
    return np.cumsum(indptr), g.edge_value[order].astype(np.int64)

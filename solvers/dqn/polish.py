"""The last step of the agent's search: single operations moved across a stage boundary of the best pipeline.

The agent's space walks one fixed topological order of the graph, so a stage is a range of that order. The
exact DP is not bound to an order: on an encoder-decoder (T5) it puts the decoder's embedding, which depends on
no encoder layer, on the first stage, and the cross-attention projections of a later decoder layer beside an
earlier one; on BERT it swaps two independent operations of a layer across a cut. No grouping of the fixed order
can express those plans. This pass does, on the plan itself: a *unit* (a forward node with its colocation class:
in training its backward partners) moves to another stage between the one of its last forward producer and the
one of its first forward consumer (so every edge still runs forward in the pipeline: the stages stay contiguous
and in order). Moves are ranked by the cost model — the source stage's load drops by the unit's compute and the
receiving stage's grows by it; the stages' loads, largest first, must beat the plan's (relieving the bottleneck,
or on a plateau of the bottleneck objective the next stage, so that chains of moves can shift a boundary through
several stages). Each round ``evaluate`` judges where a descent on these estimates ends (up to ``descent``
moves, no evaluation on the way), then the ``shortlist`` best single moves; the first better plan (objective,
then the devices' loads largest first) replaces the incumbent, until the budget runs out or nothing judged in a
round is better.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planmap.problem import Problem, Solution

__all__ = ["units", "moves", "polish"]


def units(problem: Problem) -> list[np.ndarray]:
    """The movable units: each colocation class (forward with backward partners) and each forward node of none."""
    g = problem.graph
    fwd = ~g.backward if g.backward.any() else np.ones(g.num_nodes, bool)
    cls = g.colocation
    out = [np.flatnonzero(cls == c) for c in np.unique(cls[cls >= 0]).tolist()]
    out += [np.array([v]) for v in np.flatnonzero(fwd & (cls < 0)).tolist()]
    return [u for u in out if fwd[u].any()]


def stage_loads(sol: Solution, load: np.ndarray) -> np.ndarray:
    """Each stage's load: the largest busy time of its devices (an evaluation's per-device ``load``)."""
    return np.array([float(np.nan_to_num(load[list(st.devices)], nan=0.0).max()) for st in sol.stages])


def _work(problem: Problem, sol: Solution, u: np.ndarray, stage: int) -> float:
    devs = np.asarray(sol.stages[stage].devices, np.int64)
    return float(problem.cost.device_compute[np.ix_(u, devs)].sum(axis=0).max()) / len(devs)


def moves(problem: Problem, sol: Solution, loads: np.ndarray, parts: list[np.ndarray]) -> list[tuple[tuple, int, int]]:
    """(estimated stage loads largest first, unit index, target stage) of the legal moves whose estimate beats
    ``loads`` (the plan's stage loads), best first. A unit may go to any stage between its last forward
    producer's and its first forward consumer's (every edge then still runs forward in the pipeline)."""
    g = problem.graph
    fwd = ~g.backward if g.backward.any() else np.ones(g.num_nodes, bool)
    stage = sol.assignment
    now = tuple(sorted(loads.tolist(), reverse=True))
    sizes = np.bincount(stage, minlength=len(sol.stages))
    pind, pids = g.pred
    sind, sids = g.succ
    ranked = []
    for i, u in enumerate(parts):
        k = int(stage[u[0]])
        if (stage[u] != k).any() or sizes[k] == len(u):
            continue
        inside = set(u.tolist())
        f = [v for v in u.tolist() if fwd[v]]
        lo = max([int(stage[p]) for v in f for p in pids[pind[v]: pind[v + 1]].tolist() if fwd[p] and p not in inside],
                 default=0)
        hi = min([int(stage[s]) for v in f for s in sids[sind[v]: sind[v + 1]].tolist() if fwd[s] and s not in inside],
                 default=len(sol.stages) - 1)
        for t in range(lo, hi + 1):
            if t == k or not problem.allowed[np.ix_(u, np.asarray(sol.stages[t].devices, np.int64))].all():
                continue
            est = loads.copy()
            est[t] += _work(problem, sol, u, t)
            est[k] -= _work(problem, sol, u, k)
            guess = tuple(sorted(est.tolist(), reverse=True))
            if guess < now:
                ranked.append((guess, i, t))
    ranked.sort()
    return ranked


def _moved(sol: Solution, part: np.ndarray, t: int) -> Solution:
    a = np.array(sol.assignment)
    a[part] = t
    return replace(sol, assignment=a)


def _descend(problem: Problem, sol: Solution, loads: np.ndarray, parts: list[np.ndarray], steps: int) -> Solution:
    """The best estimated move, again and again (``steps`` at most), on the estimated loads only (no evaluate)."""
    loads = loads.copy()
    for _ in range(steps):
        ranked = moves(problem, sol, loads, parts)
        if not ranked:
            break
        _, i, t = ranked[0]
        k = int(sol.assignment[parts[i][0]])
        loads[t] += _work(problem, sol, parts[i], t)
        loads[k] -= _work(problem, sol, parts[i], k)
        sol = _moved(sol, parts[i], t)
    return sol


def polish(problem: Problem, sol: Solution, key, load: np.ndarray, judge, shortlist: int = 6,
           descent: int = 64, rounds: int | None = None) -> None:
    """Hill-climb from ``sol`` (its evaluation's key — objective, loads largest first — and per-device load) by
    unit moves: first where a descent on the estimated loads ends, then the ``shortlist`` best single moves;
    ``judge(solution) -> (key, load)`` evaluates a plan (raising StopIteration when the budget is spent) and
    records it (a plan judged before costs nothing); after ``rounds`` better plans it returns (None: no limit); see
    the module doc."""
    parts = units(problem)
    tried: set[bytes] = {sol.assignment.tobytes()}

    def better(got) -> bool:
        return got[0] < key[0] * (1 - 1e-9) or (got[0] <= key[0] * (1 + 1e-9) and got[1] < key[1])

    while True:
        loads = stage_loads(sol, load)
        cands = [_descend(problem, sol, loads, parts, descent)]
        cands += [_moved(sol, parts[i], t) for _, i, t in moves(problem, sol, loads, parts)[:shortlist]]
        found = False
        for cand in cands:
            if cand.assignment.tobytes() in tried:
                continue
            tried.add(cand.assignment.tobytes())
            got, cand_load = judge(cand)
            if better(got):
                sol, key, load, found = cand, got, cand_load, True
                break
        if rounds is not None:
            rounds -= 1
        if not found or rounds == 0:
            return

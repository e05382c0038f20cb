"""Recutting the longest calls: a placement's slowest calls cut into a diamond of calls, slots freed first.

The call moves (:mod:`.moves`) and the annealing (:mod:`.anneal`) change one or two calls at a time. On
GNMT's layer graph they stop with the encoder's grid of cells in one long call while every slot is used:
the faster placement cuts that call into a diamond (its first cells; then the rest of the first row next
to the first cells of the other rows; then the rest) on three free slots, and freeing the slots means
merging a small call into a neighbour, which overfills a device until a node moves elsewhere. No single
step on that path is faster, and the three together are too rare to be drawn at random.

Here the path is enumerated:

1. Bases: the placement itself, and the placement with each small call (at most ``SMALL_CALL`` nodes)
   merged into each neighbouring accelerator call (one slot freed; the device may be overfilled).
2. In each base, each of the ``TOP_CALLS`` longest accelerator calls (of at most ``MAX_CUT_NODES``
   nodes) is cut around every pair of its nodes ``u`` and a descendant ``w``
   (:meth:`.anneal._Space.diamond`: ``u`` with its in-call ancestors stays, each piece between the two
   and ``w`` with its descendants go to free slots, in every order of the free slots), distinct cuts
   once, and only where two pieces run in parallel between head and tail (a serial split into three is
   left to the call moves and the annealing; more pieces, ``MAX_PARTS``, would multiply the orders of
   the free slots). The cheap checks of the annealing reject what cannot run (slots, pins, convexity,
   cycles, memory beyond its slack); the rest are evaluated.
3. The ``KEEP`` fastest cuts (memory overfilled or not) are repaired: single nodes move across the
   boundaries of their units (to the call or CPU unit of a producer or consumer) or from an overfilled
   device onto the CPU, the move that lowers the penalised latency most first, until the placement fits.

The fastest feasible result replaces the placement when it is strictly faster, and the round repeats.
Everything is enumerated in a fixed order and every candidate is judged by
:func:`planmap.evaluate.evaluate`; a count of evaluations (``budget``) decides where the search stops, so
the same inputs give the same placement (``deadline`` is only a safety net). Never slower than the start.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution

from .anneal import _feasible_start, _move, _penalised, _Space, _where
from .moves import Calls, _insert_new, _merge, _solution, calls_of, moves_budget

__all__ = ["recut", "recut_budget"]

SMALL_CALL = 2  # calls of at most this many nodes are tried merged into a neighbouring call (frees a slot)
TOP_CALLS = 2  # the longest accelerator calls of each base that are cut
KEEP = 10  # the fastest cuts (memory ignored) that are repaired
MAX_PARTS = 3  # parts a cut puts on free slots at most (two parallel pieces and the tail)
MAX_CUT_NODES = 200  # larger calls are not cut (the pairs of their nodes are too many)
REPAIR_STEPS = 20  # single-node moves of one repair at most
RECUT_SHARE = 0.05  # share of a time limit the budget is sized for (as moves.MOVES_SHARE)
EVAL_CAP = 30_000  # evaluations of one recut() call at most


def recut_budget(problem: Problem, time_limit: float) -> int:
    """Evaluations the recutting may spend under ``time_limit`` seconds (a count, not a clock)."""
    return moves_budget(problem, time_limit, share=RECUT_SHARE, cap=EVAL_CAP)


class _Judge:
    """Evaluations with a budget: (penalised latency, latency, feasible, evaluation) of a placement."""

    def __init__(self, problem: Problem, budget: int, deadline: float | None):
        self.problem, self.budget, self.deadline, self.evals = problem, budget, deadline, 0

    def spent(self) -> bool:
        return self.evals >= self.budget or (self.deadline is not None and time.perf_counter() > self.deadline)

    def __call__(self, calls: Calls):
        self.evals += 1
        ev = evaluate(self.problem, _solution(self.problem, calls))
        return _penalised(ev), float(ev.objective), bool(ev.feasible), ev


def _bases(sp: _Space, calls: Calls) -> Iterator[Calls]:
    """The placement, then each small call merged into each neighbouring accelerator call."""
    yield calls
    where = _where(sp.n, calls)
    for j, (d, nodes) in enumerate(calls):
        if sp.gr.is_cpu[d] or len(nodes) > SMALL_CALL:
            continue
        for i in sorted({int(where[x]) for x in sp.gr.neighbours(nodes)} - {j}):
            if not sp.gr.is_cpu[calls[i][0]]:
                merged = _merge(calls, i, nodes)
                yield merged[:j] + merged[j + 1:]


def _orders(sp: _Space, state: Calls, parts: list[np.ndarray], changed: set[int]) -> Iterator[tuple[Calls, set[int]]]:
    """Each way to put ``parts`` (in order) into free slots, one new call each."""
    if not parts:
        yield state, changed
        return
    used = np.bincount([d for d, _ in state], minlength=len(sp.gr.is_cpu))
    if sum(sp.q - int(used[d]) for d in sp.gr.accs if used[d] < sp.q) < len(parts):
        return  # fewer free slots than parts: no order completes
    for d, pos in sp.free_slots(state):
        yield from _orders(sp, _insert_new(state, d, pos, parts[0]), parts[1:], changed | {d})


def _cuts(sp: _Space, judge: _Judge, base: Calls, k: int, seen: set[bytes]) -> Iterator[tuple[float, Calls]]:
    """(latency, placement) of each diamond cut of call ``k`` of ``base`` that passes the cheap checks
    and violates nothing but memory."""
    d, nodes = base[k]
    if len(nodes) > MAX_CUT_NODES:
        return
    for u in nodes.tolist():
        if judge.spent():
            return
        for w in nodes[sp.reach[u, nodes]][1:].tolist():
            cut = sp.diamond(nodes, u, w)
            if cut is None:
                continue
            head, parts = cut
            if not 3 <= len(parts) <= MAX_PARTS:  # one piece between head and tail: a serial split (the moves'
                continue  # and the annealing's); more than MAX_PARTS - 1 pieces: too many orders of the slots
            key = head.tobytes() + b"|" + parts[-1].tobytes()
            if key in seen:
                continue
            seen.add(key)
            stay = list(base)
            stay[k] = (d, head)
            for state, changed in _orders(sp, stay, parts, {d}):
                if judge.spent():
                    return
                if sp.valid(state, changed):
                    penalised, latency, _, _ = judge(state)
                    if np.isfinite(penalised):
                        yield latency, state


def _repair_moves(sp: _Space, calls: Calls, ev) -> Iterator[tuple[int, int, int, Calls]]:
    """(node, from, to, calls) of each single-node move of a repair: across the boundary of a unit (into the
    unit of a producer or consumer), or from an overfilled device onto the first CPU (``calls`` may gain an
    empty CPU entry for it)."""
    where = _where(sp.n, calls)
    for a, b in zip(sp.src.tolist(), sp.dst.tolist(), strict=True):
        if where[a] != where[b]:
            yield b, int(where[b]), int(where[a]), calls
            yield a, int(where[a]), int(where[b]), calls
    if not sp.gr.cpus:
        return
    cpu = sp.gr.cpus[0]
    at = next((i for i, (d, _) in enumerate(calls) if d == cpu), None)
    if at is None:
        calls, at = calls + [(cpu, np.zeros(0, np.int64))], len(calls)
    over = ev.memory > ev.capacity
    for k, (d, nodes) in enumerate(calls):
        if not sp.gr.is_cpu[d] and over[d]:
            for v in nodes.tolist():
                yield v, k, at, calls


def _repair(sp: _Space, judge: _Judge, calls: Calls) -> tuple[float, Calls] | None:
    """(latency, placement) once single-node moves make ``calls`` fit (:func:`_repair_moves`; each step the
    move with the least penalised latency, only while it improves); None when they do not."""
    value, latency, feasible, ev = judge(calls)
    for _ in range(REPAIR_STEPS):
        if feasible:
            break
        best = None
        for v, k, to, base in _repair_moves(sp, calls, ev):
            if judge.spent():
                return None
            state = _move(base, k, np.array([v]), to)
            if not sp.valid(state, {base[k][0], base[to][0]}):
                continue
            got = judge(state)
            if got[0] < (best[0][0] if best else value):
                best = (got, state)
        if best is None:
            return None
        (value, latency, feasible, ev), calls = best
    return (latency, calls) if feasible else None


def _round(sp: _Space, judge: _Judge, calls: Calls) -> tuple[float, Calls] | None:
    """The fastest feasible placement one round of cuts and repairs reaches from ``calls`` (None: none)."""
    found: list[tuple[float, int, Calls]] = []
    for base in _bases(sp, calls):
        if judge.spent():
            break
        penalised, _, _, ev = judge(base)
        if not np.isfinite(penalised):
            continue
        acc = [k for k, (d, _) in enumerate(base) if not sp.gr.is_cpu[d]]
        longest = sorted(acc, key=lambda k: (-(ev.stage_finish[k] - ev.stage_start[k]), k))
        seen: set[bytes] = set()
        for k in longest[:TOP_CALLS]:
            for latency, state in _cuts(sp, judge, base, k, seen):
                found.append((latency, len(found), state))
    best = None
    for _, _, state in sorted(found, key=lambda x: x[:2])[:KEEP]:
        got = _repair(sp, judge, state)
        if got is not None and (best is None or got[0] < best[0]):
            best = got
    return best


def recut(problem: Problem, solution: Solution, *, budget: int, deadline: float | None = None) -> tuple[Solution, int]:
    """The best placement the recutting reaches from ``solution`` within ``budget`` evaluations (``solution``
    itself when none is faster and feasible), and the number of rounds that improved it."""
    ev = _feasible_start(problem, solution, budget)
    if ev is None:
        return solution, 0
    sp = _Space(problem)
    judge = _Judge(problem, budget, deadline)
    calls, value, found = calls_of(problem, solution), float(ev.objective), 0
    while not judge.spent():
        got = _round(sp, judge, calls)
        if got is None or got[0] >= value * (1 - 1e-9):
            break
        value, calls = got
        found += 1
    if not found:
        return solution, 0
    return _solution(problem, calls), found

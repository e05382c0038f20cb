"""Large-neighbourhood search on a translated latency IP: the anytime half of the latency solver.

On graphs of hundreds of nodes the full MIP's branch and bound rarely improves a good warm start
within minutes (its LP bound is weak, as the paper notes). Re-solving it with most nodes fixed where
the incumbent has them is fast (HiGHS presolve removes the fixed part) and finds the moves a
local search cannot: whole regions rearranged across devices and subgraphs at once. Bounds of
these restricted solves are not bounds of the problem, so only the full MIP's bound is reported.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions

from .data import LatencyData
from .extract import extract, unit_of
from .moves import MIN_NODES, improve, moves_budget
from .start import load_warm_start

__all__ = ["neighbourhood_search"]

MOVES_ROUND_SHARE = 0.25  # the call moves' budget after an improvement, as a share of the time limit


def _neighbourhood(dt: LatencyData, unit_of: np.ndarray, r: int) -> np.ndarray:
    """Nodes set free in round ``r``: alternately a window of the topological order (sliding by half
    a window) and every node of two devices."""
    n = dt.n
    free = np.zeros(n, bool)
    w = max(20, min(120, n // 4))
    if r % 2 == 0:
        starts = list(range(0, max(1, n - w // 2), w // 2))
        a = starts[(r // 2) % len(starts)]
        free[a: a + w] = True
        return free
    dev = dt.unit_dev[unit_of]
    used = np.unique(dev)
    pairs = [(a, b) for i, a in enumerate(used) for b in used[i + 1:]] or [(used[0], used[0])]
    a, b = pairs[(r // 2) % len(pairs)]
    free[(dev == a) | (dev == b)] = True
    return free


def neighbourhood_search(session, model, problem: Problem, incumbent: Solution, options: SolveOptions,
                         bound: float | None, t0: float, polished: float | None = None) -> tuple[Solution, str, bool]:
    """Improve ``incumbent`` until the time limit by re-solving the MIP with most nodes fixed where
    they are (large-neighbourhood search), alternating with the call moves of :mod:`.moves` whenever
    the incumbent is one they have not started from (``polished``: the latency of a placement they
    already did); what they find is the next round's warm start. Sub-MIP bounds are not global
    bounds: progress reports keep the full MIP's ``bound``."""
    dt: LatencyData = model.data
    x_of: list[list[Any]] = [[] for _ in range(dt.n)]  # Pyomo variables
    for (v, _), var in model.x.items():
        x_of[v].append(var)
    best, best_val = incumbent, evaluate(problem, incumbent).objective
    progress = options.progress

    reported = [best_val]

    def report(*, elapsed, incumbent, bound=None, message=""):
        if progress is not None and incumbent is not None and incumbent < reported[0] * (1 - 1e-9):
            reported[0] = incumbent
            progress(elapsed=elapsed, incumbent=incumbent, bound=bound_s, message="neighbourhood search")

    bound_s = bound
    rounds = improved = 0
    deadline = t0 + options.time_limit
    moved = 0
    while deadline - time.perf_counter() > 2.0:
        if problem.num_nodes >= MIN_NODES and (polished is None or best_val < polished * (1 - 1e-9)):
            polished = best_val
            sol, found = improve(problem, best, budget=moves_budget(problem, MOVES_ROUND_SHARE * options.time_limit),
                                 deadline=deadline - 2.0)
            if found:
                best, best_val, moved = sol, evaluate(problem, sol).objective, moved + 1
                polished = best_val
                report(elapsed=time.perf_counter() - t0, incumbent=best_val)
            continue
        if not load_warm_start(model, problem, best):
            break
        free = _neighbourhood(dt, unit_of(model), rounds)
        fixed = [var for v in np.flatnonzero(~free) for var in x_of[v]]
        session.restrict(fixed, [round(var.value) for var in fixed])
        budget = min(deadline - time.perf_counter(), max(4.0, 0.08 * options.time_limit))
        try:
            res = session.run(replace(options, time_limit=budget, rel_gap=0.0, progress=report), warm_start=True,
                              scale=model.time_unit, t0=t0)
        finally:
            session.release(fixed)
        rounds += 1
        if res.has_solution:
            sol = extract(model, problem)
            ev = evaluate(problem, sol)
            if ev.feasible and ev.objective < best_val * (1 - 1e-9):
                best, best_val, improved = sol, ev.objective, improved + 1
        if res.interrupted:
            return best, f"neighbourhood search: {improved} improvement(s) in {rounds} round(s), " \
                         f"{moved} from call moves, interrupted", True
    return best, f"neighbourhood search: {improved} improvement(s) in {rounds} round(s), {moved} from call moves", False

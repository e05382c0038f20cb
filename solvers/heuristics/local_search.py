"""``local-search``: moves and swaps from the best of the other baselines, with seeded restarts.

It starts from ``options.warm_start`` or the best of ``even``, ``single``, ``greedy`` and ``metis``
(whichever answer), and improves the device assignment:

* **moves**: one operator — or one colocation class, e.g. a layer's forward and backward — to
  another device it may run on, within memory;
* **swaps**: two neighbouring operators on different devices trade devices; two devices trade
  their whole contents (this matters for heterogeneous devices and memory);
* **restarts**: from the best plan so far, a seeded random perturbation (a connected group of
  operators moved to one device) followed by a new descent; the best plan is kept.

This module is the driver (start, restarts, answer). The descents live by objective: throughput in
:mod:`.local_search_throughput`, scored by :class:`ThroughputLoads`
(:mod:`.throughput_loads`, an incremental version of the evaluator's load model, O(degree) per
move) with every accepted move confirmed by :func:`planmap.evaluate.evaluate`; latency in
:mod:`.local_search_latency`, where candidates are re-split into calls and evaluated in full (the
schedule is global: no cheap exact delta). Clock, budget and incumbent are shared through
:class:`.local_search_state.SearchState`.

Deterministic for a given seed unless ``time_limit`` cuts a run short (``passthrough``:
``restarts`` (default 4), ``max_evaluations`` to bound the work instead of the clock).
"""

from __future__ import annotations

import time

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import Evaluation
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.vocabulary import ObjectiveKind

from ..repair import repair
from ..segments import solution_from_devices
from .local_search_latency import descend_latency
from .local_search_state import SearchState
from .local_search_throughput import descend_throughput
from .throughput_loads import ThroughputLoads  # re-exported: the model the descent scores with

__all__ = ["LocalSearch", "ThroughputLoads", "START_SOLVERS"]

VERSION = "1"
START_SOLVERS = ("even", "single", "greedy", "metis")


def _units(problem: Problem) -> list[list[int]]:
    """Colocation classes (one unit each) and single nodes."""
    cls = problem.graph.colocation
    units: dict[int, list[int]] = {}
    out = []
    for v, c in enumerate(cls.tolist()):
        if c >= 0:
            if c not in units:
                units[c] = []
                out.append(units[c])
            units[c].append(v)
        else:
            out.append([v])
    return out


def _perturb(search: SearchState, device_of: np.ndarray, units_of, candidates_for) -> np.ndarray:
    """Move a random connected group of nodes (about 3% of them, at least 2) to one random device."""
    n = len(device_of)
    rng, nb = search.rng, search.nb
    size = max(2, n // 33)
    start = int(rng.integers(n))
    group: list[int] = []
    seen, frontier = {start}, [start]
    while frontier and len(group) < size:
        v = frontier.pop(0)
        group.append(v)
        for w in nb[v]:
            if w not in seen:
                seen.add(w)
                frontier.append(w)
    devs = candidates_for(group)
    if not devs:
        return device_of
    e = int(devs[int(rng.integers(len(devs)))])
    out = device_of.copy()
    for v in group:
        for u in units_of[v]:
            out[u] = e
    return repair(search.problem, out)


class LocalSearch:
    """Moves and swaps from the best baseline, with seeded random restarts."""

    name = "local-search"
    objectives = frozenset(ObjectiveKind)

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        search = SearchState(problem, options, t0, Certificate(Status.HEURISTIC, self.name, version=VERSION))
        start, start_name = self._start(problem, options, search)
        sol0, ev0 = start
        cert = Certificate(Status.HEURISTIC, self.name, version=VERSION,
                           message=f"started from {start_name} ({ev0.objective:.6g}s)")
        search.best = (sol0, ev0) if ev0.feasible else None
        n = problem.graph.num_nodes
        if n == 0:
            return sol0.with_certificate(**_cert_fields(cert, ev0, t0))
        units = _units(problem)
        unit_of = np.empty(n, np.int64)
        for i, u in enumerate(units):
            unit_of[u] = i
        units_of = [units[unit_of[v]] for v in range(n)]
        allowed = problem.allowed

        def candidates_for(group):
            members = sorted({u for v in group for u in units_of[v]})
            return np.flatnonzero(allowed[members].all(axis=0)).tolist()

        restarts = int(options.passthrough.get("restarts", 4))
        device_of = sol0.node_device()
        for attempt in range(restarts + 1):
            if search.out_of_budget():
                break
            if attempt:
                base = search.best[0].node_device() if search.best else device_of
                device_of = _perturb(search, base, units_of, candidates_for)
            if problem.objective is ObjectiveKind.LATENCY:
                cur = solution_from_devices(problem, device_of, cert) if attempt else sol0
                cev = search.evaluate(cur) if attempt else ev0
                search.offer(cur, cev)
                if not cev.feasible and attempt:
                    continue
                descend_latency(search, device_of, cur, cev, units_of, candidates_for)
            else:
                if attempt and not search.evaluate(solution_from_devices(problem, device_of, cert)).feasible:
                    continue
                descend_throughput(search, device_of, units, unit_of)
            search.report(f"restart {attempt + 1}/{restarts + 1}", force=True)
        best_sol, best_ev = search.best if search.best else (sol0, ev0)
        best_sol = Solution(best_sol.assignment, best_sol.stages, cert, best_sol.schedule, best_sol.microbatches,
                            best_sol.shardings)
        return best_sol.with_certificate(**_cert_fields(cert, best_ev, t0))

    @staticmethod
    def _start(problem: Problem, options: SolveOptions, search: SearchState):
        """The warm start, else the best feasible answer of the start solvers (ties: list order)."""
        from planmap import solvers

        found = []
        warm = options.warm_start
        if warm is not None and len(warm.assignment) == problem.graph.num_nodes:
            found.append(("warm start", warm, search.evaluate(warm)))
        if not found or not found[0][2].feasible:
            for name in START_SOLVERS:
                left = search.deadline - time.perf_counter()
                if found and left <= 0:  # the search's time went on start methods: keep what they found
                    break
                sub = SolveOptions(time_limit=max(left, 0.0), seed=options.seed, threads=options.threads)
                try:
                    s = solvers.get(name).solve(problem, sub)
                except (PlanmapError, ImportError):
                    continue
                found.append((name, s, search.evaluate(s)))
        if not found:
            raise InfeasibleError(f"{problem.name}: no baseline produced a placement to start from")
        name, sol, ev = min(found, key=lambda x: (not x[2].feasible, x[2].objective))
        return (sol, ev), name


def _cert_fields(cert: Certificate, ev: Evaluation, t0: float) -> dict:
    return {"objective": ev.objective, "wall_time": time.perf_counter() - t0, "message": cert.message}


"""The bookkeeping every local-search descent shares: clock, evaluation budget, incumbent, progress.

Kept apart from the moves so that the throughput and latency descents (:mod:`.local_search_throughput`,
:mod:`.local_search_latency`) and the driver (:mod:`.local_search`) count evaluations, stop and
report in one way: the evaluation budget (``max_evaluations``) is what makes a run reproducible
when the clock is not the limit.
"""

from __future__ import annotations

import time

import numpy as np

from planmap.evaluate import Evaluation, evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions

__all__ = ["SearchState", "EPS"]

EPS = 1e-12  # an improvement must beat the incumbent by this much, relatively and absolutely


class SearchState:
    """Shared bookkeeping: clock, evaluation budget, incumbent, progress reports.

    ``certificate`` is what the plans tried along the way carry (the answer gets the solver's own);
    ``nb`` the undirected adjacency lists the moves walk; ``rng`` the one seeded generator of a run.
    """

    def __init__(self, problem: Problem, options: SolveOptions, t0: float, certificate: Certificate):
        self.problem = problem
        self.options = options
        self.certificate = certificate
        self.t0 = t0
        self.deadline = t0 + max(0.0, options.time_limit)
        self.max_evals = options.passthrough.get("max_evaluations")
        self.evals = 0
        self.rng = np.random.default_rng(options.seed)
        self.best: tuple[Solution, Evaluation] | None = None
        self.last_report = 0.0
        self.stopped = False
        self.nb = _neighbours(problem)  # undirected adjacency lists

    def out_of_budget(self) -> bool:
        if time.perf_counter() >= self.deadline:
            self.stopped = True
        if self.max_evals is not None and self.evals >= self.max_evals:
            self.stopped = True
        return self.stopped

    def evaluate(self, sol: Solution) -> Evaluation:
        self.evals += 1
        return evaluate(self.problem, sol)

    def offer(self, sol: Solution, ev: Evaluation) -> bool:
        if not ev.feasible:
            return False
        if self.best is None or ev.objective < self.best[1].objective * (1 - EPS) - EPS:
            self.best = (sol, ev)
            self.report(f"improved to {ev.objective:.6g}s")
            return True
        return False

    def report(self, message: str, force: bool = False) -> None:
        cb = self.options.progress
        now = time.perf_counter()
        if cb is None or (not force and now - self.last_report < 0.2):
            return
        self.last_report = now
        cb(elapsed=now - self.t0, incumbent=self.best[1].objective if self.best else None, bound=None,
           message=message)


def _neighbours(problem: Problem) -> list[list[int]]:
    """Undirected adjacency lists: perturbations grow connected groups, latency moves look across edges."""
    g = problem.graph
    s, d = g.node_edges
    n = g.num_nodes
    nb: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(s.tolist(), d.tolist(), strict=True):
        nb[a].append(b)
        nb[b].append(a)
    return nb

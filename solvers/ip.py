"""``ip``: the exact solvers behind one registry name, chosen by the problem's objective.

Latency goes to :mod:`planmap.solvers.latency.ip` (Tarnawski et al.'s latency IP); throughput to
:mod:`planmap.solvers.pipeline.ip`, imported only when a throughput problem asks for it so that a
missing or broken throughput module never blocks latency solves.
"""

from __future__ import annotations

from planmap.errors import SolverUnavailableError
from planmap.problem import Problem, Solution, SolveOptions
from planmap.vocabulary import ObjectiveKind

from . import import_solver_module

__all__ = ["IP"]

_TARGETS = {ObjectiveKind.LATENCY: ("planmap.solvers.latency.ip", "LatencyIP"),
            ObjectiveKind.THROUGHPUT: ("planmap.solvers.pipeline.ip", "ThroughputIP")}


class IP:
    """Integer programming (Pyomo; HiGHS by default, any installed MIP backend by name)."""

    name = "ip"
    objectives = frozenset(_TARGETS)

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        module, cls = _TARGETS[problem.objective]
        mod = import_solver_module(module, f"the {problem.objective} IP", "ip")
        solver = getattr(mod, cls, None)
        if solver is None:
            raise SolverUnavailableError(f"{module} has no {cls}; the {problem.objective} IP is not available")
        return solver().solve(problem, options)

"""``ip``: the exact solvers behind one registry name, chosen by the problem's objective.

Latency goes to :mod:`planmap.solvers.latency.ip` (Tarnawski et al.'s latency IP); throughput to
:mod:`planmap.solvers.pipeline.ip`, imported only when a throughput problem asks for it so that a
missing or broken throughput module never blocks latency solves.
"""

from __future__ import annotations

import importlib

from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.problem import Problem, Solution, SolveOptions

__all__ = ["IP"]

_TARGETS = {"latency": ("planmap.solvers.latency.ip", "LatencyIP"),
            "throughput": ("planmap.solvers.pipeline.ip", "ThroughputIP")}


class IP:
    """Integer programming (Pyomo; HiGHS by default, any installed MIP backend by name)."""

    name = "ip"
    objectives = frozenset(_TARGETS)

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        if problem.objective not in _TARGETS:
            raise PlanmapError(f"the ip solver handles objectives {', '.join(sorted(_TARGETS))}, "
                               f"but the problem asks for {problem.objective!r}")
        module, cls = _TARGETS[problem.objective]
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and (e.name == module or module.startswith(e.name + ".")):
                raise SolverUnavailableError(f"the {problem.objective} IP ({module}) is not part of this "
                                             "installation") from None
            raise SolverUnavailableError(f"the {problem.objective} IP needs the package {e.name!r}: "
                                         "pip install 'planmap[ip]'") from None
        solver = getattr(mod, cls, None)
        if solver is None:
            raise SolverUnavailableError(f"{module} has no {cls}; the {problem.objective} IP is not available")
        return solver().solve(problem, options)

"""Pyomo backend glue shared by the integer-programming solvers (latency IP, throughput IP).

A solver builds a ``pyo.ConcreteModel``, optionally loads a warm start into its variables (plain
``var.set_value``), and calls :func:`solve_model`. This module owns everything that depends on the
MIP backend, so the models stay backend-free:

* **Choosing a backend by name** (the table lives in :mod:`planmap.solvers.mip_backends`): ``highs``
  (default, embedded through highspy) via the persistent ``pyomo.contrib.solver`` interface — not
  the legacy ``SolverFactory(...).solve(timelimit=...)``, which overwrites the solver config;
  ``gurobi`` and ``scip`` via their ``pyomo.contrib.solver`` direct interfaces; ``cbc``, ``glpk``
  and ``cplex`` via Pyomo's classic shell interfaces. A backend that is not installed raises
  :class:`SolverUnavailableError` saying how to install it; an unknown name raises
  :class:`PlanmapError` listing the known ones.
* **Options**: time limit, relative gap, threads, seed and passthrough options, translated into
  each backend's own option names (the names live with the backend table).
* **Warm start**: the variables' current values are handed to the backend as a MIP start. With
  HiGHS the start is checked: its log must say the start was feasible, else ``warm_start`` in the
  result says it was rejected (and the caller can still fall back on the start itself).
* **Reading back** termination, incumbent, best bound and gap exactly as the backend returned
  them, mapped onto :class:`planmap.problem.Status`.
* **Anytime progress**: with HiGHS, incumbents and bounds are recorded (``history``) and reported
  to ``options.progress`` as they improve, from highspy's MIP callbacks.
* **Ctrl-C**: while a backend runs, SIGINT only raises a flag; HiGHS is asked to stop at its next
  callback and returns its best incumbent with status ``interrupted`` (shell backends get the
  signal from the terminal themselves and write their incumbent). A ``KeyboardInterrupt`` raised
  by the progress callback counts as Ctrl-C too.

Objective values cross this boundary in the model's units; ``scale`` converts them to the units the
caller reports (seconds), so models can be built in well-conditioned units.

:func:`solve_model` is the one-shot entry point. :class:`HighsSession` keeps a model translated in
HiGHS so it can be re-solved with variables fixed in place (large-neighbourhood search). :func:`run_highs`
runs a model a solver passed to highspy itself as matrices (no Pyomo translation: the sharding IP), with
the same options, progress, Ctrl-C handling and result. The HiGHS session lives in
:mod:`planmap.solvers.mip_highs`, the result record and progress recorder in
:mod:`planmap.solvers.mip_result`; both are re-exported here.
"""

from __future__ import annotations

import contextlib
import io
import math
import time

from planmap.errors import SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions, Status

from .mip_backends import Backend, check_passthrough, get_backend, options_record
from .mip_highs import HighsSession, highs_callbacks, highs_outcome, run_highs
from .mip_result import (
    OPTIMAL_GAP,
    MipResult,
    ProgressPoint,
    _finite,
    _gap,
    _Interrupt,
    _objective_sense,
    _Recorder,
    _sigint_as_flag,
    status_for,
)

__all__ = [
    "HighsSession",
    "MipResult",
    "OPTIMAL_GAP",
    "ProgressPoint",
    "choose_answer",
    "highs_callbacks",
    "highs_outcome",
    "run_highs",
    "solve_model",
    "status_for",
    "unproven_if_infeasible",
    "_gap",
]


def choose_answer(problem: Problem, candidate: Solution | None, start: Solution | None, start_name: str,
                  start_objective: float | None, notes: list[str], *, why: str = "") -> tuple[Solution | None, str]:
    """``(answer, origin)``: the MIP's plan (origin ``"ip"``) when ``evaluate`` accepts it and it is no
    worse than the warm start, else the warm start (origin ``start_name``; a rejected plan is noted in
    ``notes``, with ``why`` appended), else ``(None, "")``."""
    if candidate is not None:
        ev = evaluate(problem, candidate)
        if not ev.feasible:
            notes.append(f"the MIP's plan fails evaluate ({ev.violations[0]}){why}")
            candidate = None
        elif start_objective is not None and ev.objective > start_objective:
            candidate = None
    if candidate is not None:
        return candidate, "ip"
    return (start, start_name) if start is not None else (None, "")


def unproven_if_infeasible(status: Status, bound: float | None, gap: float | None,
                           notes: list[str]) -> tuple[Status, float | None, float | None, list[str]]:
    """A backend "infeasible" next to an answer that ``evaluate`` accepts (the warm start, which the
    model holds up to the backend's tolerances) proves nothing: heuristic, without bound or gap."""
    if status != Status.INFEASIBLE:
        return status, bound, gap, notes
    return Status.HEURISTIC, None, None, [*notes, "the backend called the model infeasible though the warm start "
                                                   "satisfies it; unproven"]


# ------------------------------------------------------------------------------------ solving
def solve_model(model, options: SolveOptions, *, warm_start: bool = False, scale: float = 1.0) -> MipResult:
    """Solve ``model`` (a Pyomo model with one active objective) with ``options.backend``.

    With ``warm_start``, the current values of the model's variables are handed to the backend as a
    MIP start. On return, when the result ``has_solution``, the variables hold the backend's best
    solution. Objective values in the result (and in progress reports) are multiplied by ``scale``.
    """
    backend = get_backend(options.backend or "highs")
    check_passthrough(backend.name, options.passthrough)
    if backend.interface == "highs":
        return _solve_highs(model, options, backend, warm_start, scale)
    if backend.interface == "contrib":
        return _solve_contrib(model, options, backend, warm_start, scale)
    return _solve_legacy(model, options, backend, warm_start, scale)


def _solve_highs(model, options: SolveOptions, backend: Backend, warm_start: bool, scale: float) -> MipResult:
    return HighsSession(model).run(options, warm_start=warm_start, scale=scale)


def _solve_contrib(model, options: SolveOptions, backend: Backend, warm_start: bool, scale: float) -> MipResult:
    from pyomo.contrib.solver.common.factory import SolverFactory

    t0 = time.perf_counter()
    opt = SolverFactory(backend.pyomo_name)
    if not opt.available():
        raise SolverUnavailableError(f"MIP backend {backend.name!r} is installed but not usable here "
                                     f"({opt.available()}): {backend.install}")
    solver_options = {"Seed" if backend.name == "gurobi" else "randomization/randomseedshift": int(options.seed)}
    solver_options.update(options.passthrough)
    flag = _Interrupt()
    rec = _Recorder(options, scale, t0, flag, _objective_sense(model))
    try:
        res = opt.solve(model, time_limit=float(options.time_limit), rel_gap=float(options.rel_gap),
                        threads=int(options.threads), solver_options=solver_options, load_solutions=False,
                        raise_exception_on_nonoptimal_result=False, warmstart_discrete_vars=bool(warm_start))
    except KeyboardInterrupt:
        return MipResult(backend.name, "", "Interrupted by user", None, False, None, None, None,
                         "unknown" if warm_start else "not given", 0.0, time.perf_counter() - t0,
                         options=options_record(backend, options))
    solve_time = time.perf_counter() - t0
    termination = str(res.termination_condition.name)
    has = res.incumbent_objective is not None
    incumbent, bound = res.incumbent_objective, res.objective_bound
    gap = _gap(incumbent, bound, rec.sense)
    if has:
        res.solution_loader.load_vars()
        rec.observe(incumbent, bound, "final")
    return MipResult(
        backend=backend.name, version=f"{backend.pyomo_name} {'.'.join(map(str, opt.version() or ()))}",
        termination=termination, status=status_for(termination, has, gap), has_solution=has,
        incumbent=rec._conv(incumbent), bound=rec._conv(bound), gap=gap,
        warm_start="unknown" if warm_start else "not given", translate_time=0.0, solve_time=solve_time,
        history=tuple(rec.points), log=str(getattr(res, "solver_log", "") or ""),
        options=options_record(backend, options))


def _solve_legacy(model, options: SolveOptions, backend: Backend, warm_start: bool, scale: float) -> MipResult:
    import pyomo.environ as pyo
    from pyomo.opt import SolutionStatus

    t0 = time.perf_counter()
    opt = pyo.SolverFactory(backend.pyomo_name)
    if not opt.available(exception_flag=False):
        raise SolverUnavailableError(f"MIP backend {backend.name!r} is not usable here: {backend.install}")
    for key, value in ((backend.time_limit, max(1, int(math.ceil(options.time_limit)))),
                       (backend.rel_gap, options.rel_gap), (backend.threads, options.threads),
                       (backend.seed, options.seed)):
        if key is not None:
            opt.options[key] = value
    for key, value in options.passthrough.items():
        opt.options[key] = value
    flag = _Interrupt()
    rec = _Recorder(options, scale, t0, flag, _objective_sense(model))
    use_warm = bool(warm_start) and backend.warm_start and opt.warm_start_capable()
    stream = io.StringIO()
    with _sigint_as_flag(flag), contextlib.redirect_stdout(stream):
        kwargs = {"warmstart": True} if use_warm else {}
        res = opt.solve(model, load_solutions=False, tee=False, **kwargs)
    solve_time = time.perf_counter() - t0
    termination = str(res.solver.termination_condition)
    if flag.requested:
        termination = "Interrupted by user"
    has = len(res.solution) > 0 and res.solution(0).status in (SolutionStatus.optimal, SolutionStatus.feasible,
                                                               SolutionStatus.bestSoFar, SolutionStatus.stoppedByLimit)
    sense = _objective_sense(model)
    prob = res.problem[0] if len(res.problem) else None
    inc_raw = getattr(prob, "upper_bound" if sense > 0 else "lower_bound", None) if prob is not None else None
    bnd_raw = getattr(prob, "lower_bound" if sense > 0 else "upper_bound", None) if prob is not None else None
    incumbent = _finite(inc_raw) if has else None
    bound = _finite(bnd_raw)
    if has:
        model.solutions.load_from(res)
        if incumbent is None:
            objs = list(model.component_data_objects(pyo.Objective, active=True))
            incumbent = float(pyo.value(objs[0]))
    gap = _gap(incumbent, bound, rec.sense)
    rec.observe(incumbent, bound, "final")
    return MipResult(
        backend=backend.name, version=f"{backend.pyomo_name} {'.'.join(map(str, opt.version() or ()))}",
        termination=termination, status=status_for(termination, has, gap), has_solution=has,
        incumbent=rec._conv(incumbent), bound=rec._conv(bound), gap=gap,
        warm_start=("unknown" if use_warm else ("not supported" if warm_start else "not given")),
        translate_time=0.0, solve_time=solve_time, history=tuple(rec.points), log=stream.getvalue(),
        options=options_record(backend, options))

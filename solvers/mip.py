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
the same options, progress, Ctrl-C handling and result.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planmap.errors import SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions, Status, relative_gap

from .mip_backends import BACKENDS, Backend, check_passthrough, get_backend, options_record

__all__ = [
    "HighsSession",
    "MipResult",
    "ProgressPoint",
    "choose_answer",
    "highs_callbacks",
    "highs_outcome",
    "run_highs",
    "solve_model",
    "status_for",
    "unproven_if_infeasible",
]

OPTIMAL_GAP = 1e-6  # a backend "optimal" with at most this gap is reported as proven optimal


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


@dataclass(frozen=True)
class ProgressPoint:
    """One anytime observation: seconds since :func:`solve_model` started, incumbent and bound."""

    elapsed: float
    incumbent: float | None
    bound: float | None


@dataclass(frozen=True)
class MipResult:
    """What a backend returned, in the caller's units (objective values times ``scale``).

    ``termination`` is the backend's own word for how it stopped; ``status`` its mapping onto
    :class:`Status` (``None`` when it stopped without a solution and without proving infeasibility,
    e.g. a time limit before the first incumbent).
    """

    backend: str
    version: str
    termination: str
    status: Status | None
    has_solution: bool
    incumbent: float | None
    bound: float | None
    gap: float | None
    warm_start: str  # "accepted" | "rejected" | "not given" | "not supported" | "unknown"
    translate_time: float
    solve_time: float
    history: tuple[ProgressPoint, ...] = ()
    log: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return self.status == Status.INTERRUPTED


def status_for(termination: str, has_solution: bool, gap: float | None) -> Status | None:
    """Map a backend termination word onto :class:`Status` (None: stopped with nothing to show)."""
    t = termination.lower()
    if "infeasible" in t and "unbounded" not in t:
        return Status.INFEASIBLE
    if not has_solution:
        return None
    if "interrupt" in t:
        return Status.INTERRUPTED
    if "optimal" in t or "convergence" in t:
        return Status.OPTIMAL if gap is None or gap <= OPTIMAL_GAP else Status.GAP_REACHED
    return Status.TIME_LIMIT  # time, node, iteration or solution limits: stopped with an incumbent


# ------------------------------------------------------------------------------------ Ctrl-C
class _Interrupt:
    """A flag that SIGINT sets (instead of raising) while a backend runs in this thread."""

    def __init__(self) -> None:
        self.requested = False

    def request(self, *_: Any) -> None:
        self.requested = True


@contextlib.contextmanager
def _sigint_as_flag(flag: _Interrupt) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, flag.request)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Recorder:
    """Collects incumbents/bounds as they improve and forwards them to ``options.progress``."""

    def __init__(self, options: SolveOptions, scale: float, t0: float, flag: _Interrupt, sense: float = 1.0):
        self.progress = options.progress
        self.scale, self.t0, self.flag, self.sense = scale, t0, flag, sense
        self.points: list[ProgressPoint] = []
        self.incumbent: float | None = None
        self.bound: float | None = None
        self.error: BaseException | None = None

    def _conv(self, v: float | None) -> float | None:
        if v is None or not math.isfinite(v) or abs(v) >= 1e30:
            return None
        return float(v) * self.scale

    def observe(self, incumbent: float | None, bound: float | None, message: str = "") -> None:
        inc, bnd = self._conv(incumbent), self._conv(bound)
        better_inc = inc is not None and (self.incumbent is None
                                          or self.sense * (inc - self.incumbent) < -1e-12 * max(1.0, abs(inc)))
        better_bnd = bnd is not None and (self.bound is None
                                          or self.sense * (bnd - self.bound) > 1e-12 * max(1.0, abs(bnd)))
        if not (better_inc or better_bnd):
            return
        if better_inc:
            self.incumbent = inc
        if better_bnd:
            self.bound = bnd
        point = ProgressPoint(time.perf_counter() - self.t0, self.incumbent, self.bound)
        self.points.append(point)
        if self.progress is not None:
            try:
                self.progress(elapsed=point.elapsed, incumbent=point.incumbent, bound=point.bound, message=message)
            except KeyboardInterrupt:
                self.flag.request()
            except Exception as e:  # a broken progress display must not kill the solve
                self.error = e
                self.progress = None


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


def _objective_sense(model) -> float:
    import pyomo.environ as pyo

    objs = list(model.component_data_objects(pyo.Objective, active=True))
    if len(objs) != 1:
        raise ValueError(f"solve_model requires exactly one active objective, but got {len(objs)}")
    return 1.0 if objs[0].sense == pyo.minimize else -1.0


def _solve_highs(model, options: SolveOptions, backend: Backend, warm_start: bool, scale: float) -> MipResult:
    return HighsSession(model).run(options, warm_start=warm_start, scale=scale)


class HighsSession:
    """A Pyomo model translated into HiGHS once and solved as often as needed.

    Between runs, :meth:`restrict` fixes variables to values directly in HiGHS (column bounds; the
    Pyomo model is not touched), which is what large-neighbourhood search needs: re-translating a
    100,000-row model costs seconds, changing bounds costs nothing.
    """

    def __init__(self, model):
        from pyomo.contrib.solver.common.factory import SolverFactory

        get_backend("highs")
        self.model = model
        self.sense = _objective_sense(model)
        t0 = time.perf_counter()
        opt = SolverFactory("highs")
        for key in ("check_for_new_or_removed_constraints", "check_for_new_or_removed_vars",
                    "check_for_new_or_removed_params", "check_for_new_objective", "update_constraints",
                    "update_vars", "update_parameters", "update_named_expressions", "update_objective"):
            setattr(opt.config.auto_updates, key, False)  # the model does not change between runs
        opt.set_instance(model)
        self.translate_time = time.perf_counter() - t0
        self.opt = opt
        # pyomo 6.10 keeps the highspy object and the var -> column map private; both are pinned
        # (constraints.txt) and a test fails loudly if they move.
        self.highs = opt._solver_model
        self.colmap: dict[int, int] = opt._pyomo_var_to_solver_var_map
        self._bounds = None

    def columns(self, variables) -> np.ndarray:
        return np.array([self.colmap[id(v)] for v in variables], np.int32)

    def restrict(self, variables, values) -> None:
        """Fix ``variables`` to ``values`` for the following runs (until :meth:`release`)."""
        cols = self.columns(variables)
        if len(cols):
            vals = np.asarray(values, float)
            self.highs.changeColsBounds(len(cols), cols, vals, vals)

    def release(self, variables) -> None:
        """Give ``variables`` back their model bounds."""
        cols = self.columns(variables)
        if len(cols):
            lb = np.array([-np.inf if v.lb is None else v.lb for v in variables], float)
            ub = np.array([np.inf if v.ub is None else v.ub for v in variables], float)
            self.highs.changeColsBounds(len(cols), cols, lb, ub)

    def set_start(self) -> str:
        """Hand the variables' current values to HiGHS as a MIP start ("unknown" until the run's log
        says whether HiGHS found it feasible; "rejected" when some variable has no value)."""
        import highspy
        import pyomo.environ as pyo

        h = self.highs
        col = np.full(h.getNumCol(), np.nan)
        for v in self.model.component_data_objects(pyo.Var, active=True):
            j = self.colmap.get(id(v))
            if j is not None and v.value is not None:
                col[j] = v.value
        if np.isnan(col).any():
            return "rejected"  # incomplete start: say so rather than let HiGHS guess the rest
        sol = highspy.HighsSolution()
        sol.col_value = col.tolist()
        sol.value_valid = True
        return "unknown" if h.setSolution(sol) == highspy.HighsStatus.kOk else "rejected"

    def run(self, options: SolveOptions, *, warm_start: bool = False, scale: float = 1.0,
            t0: float | None = None) -> MipResult:
        """One HiGHS run with ``options``; progress times count from ``t0`` (default: now)."""

        backend = BACKENDS["highs"]
        check_passthrough(backend.name, options.passthrough)
        h = self.highs
        t0 = time.perf_counter() if t0 is None else t0
        warm = self.set_start() if warm_start else "not given"
        flag = _Interrupt()
        rec = _Recorder(options, scale, t0, flag, self.sense)

        solver_options = {"random_seed": int(options.seed), "mip_feasibility_tolerance": 1e-7}
        solver_options.update(options.passthrough)
        t1 = time.perf_counter()
        with highs_callbacks(h, rec, flag), _sigint_as_flag(flag):
            res = self.opt.solve(self.model, time_limit=float(options.time_limit), rel_gap=float(options.rel_gap),
                                 threads=int(options.threads), solver_options=solver_options,
                                 load_solutions=False, raise_exception_on_nonoptimal_result=False, tee=False)
        solve_time = time.perf_counter() - t1
        log = res.solver_log or ""
        if warm == "unknown":
            warm = _highs_start_verdict(log)
        termination, has, incumbent, bound, gap = highs_outcome(h, flag)
        if has:
            res.solution_loader.load_vars()
            rec.observe(incumbent, bound, "final")
        conv = rec._conv
        return MipResult(
            backend=backend.name, version="highs " + ".".join(map(str, self.opt.version())), termination=termination,
            status=status_for(termination, has, gap), has_solution=has, incumbent=conv(incumbent),
            bound=conv(bound), gap=gap, warm_start=warm, translate_time=self.translate_time, solve_time=solve_time,
            history=tuple(rec.points), log=log, options=options_record(backend, options))


@contextlib.contextmanager
def highs_callbacks(h, rec: _Recorder, flag: _Interrupt) -> Iterator[None]:
    """While a highspy ``Highs`` object runs: incumbents and bounds go to ``rec``; a raised ``flag`` stops it."""

    def on_improving(e) -> None:
        try:
            rec.observe(e.data_out.objective_function_value, e.data_out.mip_dual_bound, "new incumbent")
            if flag.requested:
                e.interrupt()
        except BaseException as err:  # never let an exception unwind through HiGHS' C++ frames
            rec.error = err

    def on_poll(e) -> None:
        try:
            rec.observe(e.data_out.mip_primal_bound, e.data_out.mip_dual_bound, "")
            if flag.requested:
                e.interrupt()
        except BaseException as err:
            rec.error = err

    h.cbMipImprovingSolution.subscribe(on_improving)
    h.cbMipInterrupt.subscribe(on_poll)
    try:
        yield
    finally:
        h.cbMipImprovingSolution.clear()
        h.cbMipInterrupt.clear()


def highs_outcome(h, flag: _Interrupt) -> tuple[str, bool, float | None, float | None, float | None]:
    """``(termination, has solution, incumbent, bound, gap)`` of a finished highspy run (model units)."""
    import highspy

    status = h.getModelStatus()
    info = h.getInfo()
    has = info.primal_solution_status == 2
    termination = h.modelStatusToString(status)
    if status == highspy.HighsModelStatus.kInterrupt or (
            flag.requested and has and status != highspy.HighsModelStatus.kOptimal):
        termination = "Interrupted by user"
    incumbent = info.objective_function_value if has else None
    bound = info.mip_dual_bound if info.mip_node_count >= 0 else None
    gap = info.mip_gap if has and bound is not None and math.isfinite(info.mip_gap) else None
    return termination, has, incumbent, bound, gap


def run_highs(h, options: SolveOptions, *, scale: float = 1.0, start: np.ndarray | None = None,
              translate_time: float = 0.0) -> MipResult:
    """One run of a minimisation already passed to the highspy object ``h`` (e.g. built from matrices,
    without Pyomo) under ``options``, optionally from the MIP start ``start`` (a value per column). The
    solution's column values are left in ``h.getSolution()``."""
    import highspy

    backend = BACKENDS["highs"]
    check_passthrough(backend.name, options.passthrough)
    t0 = time.perf_counter()
    warm = "not given"
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, float).tolist()
        sol.value_valid = True
        warm = "unknown" if h.setSolution(sol) == highspy.HighsStatus.kOk else "rejected"
    values = {"output_flag": False, "time_limit": float(options.time_limit), "mip_rel_gap": float(options.rel_gap),
              "threads": int(options.threads), "random_seed": int(options.seed), "mip_feasibility_tolerance": 1e-7,
              **options.passthrough}
    for key, value in values.items():
        h.setOptionValue(key, value)
    flag = _Interrupt()
    rec = _Recorder(options, scale, t0, flag)
    with highs_callbacks(h, rec, flag), _sigint_as_flag(flag):
        h.run()
    termination, has, incumbent, bound, gap = highs_outcome(h, flag)
    if has:
        rec.observe(incumbent, bound, "final")
    return MipResult(
        backend=backend.name, version="highs " + h.version(), termination=termination,
        status=status_for(termination, has, gap), has_solution=has, incumbent=rec._conv(incumbent),
        bound=rec._conv(bound), gap=gap, warm_start=warm, translate_time=translate_time,
        solve_time=time.perf_counter() - t0, history=tuple(rec.points), options=options_record(backend, options))


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


def _highs_start_verdict(log: str) -> str:
    """What HiGHS' log says of the MIP start: it prints "MIP start solution is feasible" before the
    branch and bound, or only "Assessing feasibility of MIP solution ...: feasible" when presolve
    alone solves the model."""
    if re.search(r"MIP start solution is feasible", log) or re.search(
            r"Assessing feasibility of MIP solution[^\n]*:\s*feasible", log):
        return "accepted"
    return "rejected"


def _finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and abs(f) < 1e30 else None


def _gap(incumbent: float | None, bound: float | None, sense: float) -> float | None:
    """:func:`planmap.problem.relative_gap` in the model's sense (``sense`` -1 for a maximisation)."""
    if incumbent is None or bound is None:
        return None
    return relative_gap(sense * incumbent, sense * bound)

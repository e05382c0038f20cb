"""HiGHS through highspy: a Pyomo model translated once (:class:`HighsSession`) and solved as often as
needed, or a model built as matrices (:func:`run_highs`); incumbents and bounds reported from highspy's
MIP callbacks as they improve, Ctrl-C as a request to stop at the next callback, and the MIP start's
verdict read from HiGHS' log (see :mod:`planmap.solvers.mip` for the backend-independent entry point)."""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Iterator

import numpy as np

from planmap.problem import SolveOptions

from .mip_backends import BACKENDS, check_passthrough, get_backend, options_record
from .mip_result import MipResult, _Interrupt, _objective_sense, _Recorder, _sigint_as_flag, status_for

__all__ = ["HighsSession", "highs_callbacks", "highs_outcome", "run_highs"]


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


def _highs_start_verdict(log: str) -> str:
    """What HiGHS' log says of the MIP start: it prints "MIP start solution is feasible" before the
    branch and bound, or only "Assessing feasibility of MIP solution ...: feasible" when presolve
    alone solves the model."""
    if re.search(r"MIP start solution is feasible", log) or re.search(
            r"Assessing feasibility of MIP solution[^\n]*:\s*feasible", log):
        return "accepted"
    return "rejected"

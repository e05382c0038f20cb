"""The Pyomo backend glue (solvers/mip.py, solvers/mip_backends.py): backends by name, options, warm starts,
read-back, anytime progress and Ctrl-C — with real HiGHS solves on small knapsack models."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal

import numpy as np
import pytest

pyo = pytest.importorskip("pyomo.environ")
pytest.importorskip("highspy")

from planmap.errors import PlanmapError, SolverUnavailableError  # noqa: E402
from planmap.problem import SolveOptions, Status  # noqa: E402
from planmap.solvers import mip, mip_backends  # noqa: E402


def knapsack(n: int = 30, seed: int = 0, *, hard: bool = False):
    """max value s.t. weight <= capacity, written as a minimisation (the solvers' convention)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(10, 100, n).astype(float)
    v = w + (rng.integers(-5, 6, n) if hard else rng.uniform(0, 30, n))
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, n - 1)
    m.x = pyo.Var(m.I, domain=pyo.Binary)
    m.cap = pyo.Constraint(expr=sum(w[i] * m.x[i] for i in m.I) <= w.sum() / 2 + 0.5)
    m.obj = pyo.Objective(expr=-sum(v[i] * m.x[i] for i in m.I), sense=pyo.minimize)
    return m, w, v


def greedy_start(m, w, v) -> float:
    order = np.argsort(-v / w, kind="stable")
    cap, used, total = w.sum() / 2 + 0.5, 0.0, 0.0
    for i in m.I:
        m.x[i].set_value(0.0)
    for i in order.tolist():
        if used + w[i] <= cap:
            m.x[i].set_value(1.0)
            used += w[i]
            total += v[i]
    return -total


def test_unknown_backend_lists_known_ones():
    with pytest.raises(PlanmapError,
                       match="unknown MIP backend 'nosuch'; planmap knows highs, gurobi, scip, cbc, glpk, cplex") as e:
        mip_backends.get_backend("nosuch")
    assert not isinstance(e.value, SolverUnavailableError)


def _missing_backend() -> str | None:
    for name, b in mip_backends.BACKENDS.items():
        if b.module and importlib.util.find_spec(b.module) is None:
            return name
        if b.executable and shutil.which(b.executable) is None:
            return name
    return None


def test_missing_backend_says_how_to_install():
    name = _missing_backend()
    if name is None:
        pytest.skip("every backend is installed here")
    with pytest.raises(SolverUnavailableError, match=rf"MIP backend '{name}' needs .*not installed: .*(install|PATH)"):
        mip_backends.get_backend(name)
    assert name not in mip_backends.available_backends()
    m, _, _ = knapsack(5)
    with pytest.raises(SolverUnavailableError):
        mip.solve_model(m, SolveOptions(backend=name))


def test_highs_is_available_and_default():
    assert mip_backends.get_backend("HiGHS").name == "highs"
    assert "highs" in mip_backends.available_backends()
    assert SolveOptions().backend == "highs"


def test_optimal_solve_reads_back_incumbent_bound_and_values():
    m, w, v = knapsack(25)
    res = mip.solve_model(m, SolveOptions(time_limit=30, rel_gap=0.0), scale=2.0)
    assert res.status == Status.OPTIMAL and res.has_solution
    assert res.termination == "Optimal"
    chosen = np.array([m.x[i].value for i in m.I]) > 0.5
    assert w[chosen].sum() <= w.sum() / 2 + 0.5
    assert res.incumbent == pytest.approx(-2.0 * v[chosen].sum(), rel=1e-9)  # scaled by 2
    assert res.bound is not None and res.bound <= res.incumbent + 1e-6
    assert res.gap is not None and res.gap <= 1e-6
    assert res.history and res.history[-1].incumbent == pytest.approx(res.incumbent)
    assert res.options["backend"] == "highs" and res.options["threads"] == 1


def test_warm_start_is_accepted_and_never_lost():
    m, w, v = knapsack(40, seed=3, hard=True)
    start = greedy_start(m, w, v)
    res = mip.solve_model(m, SolveOptions(time_limit=0.5, rel_gap=0.0), warm_start=True)
    assert res.warm_start == "accepted"
    assert res.has_solution and res.incumbent <= start + 1e-9
    assert res.history[0].incumbent is not None


def test_infeasible_warm_start_is_reported_rejected():
    m, w, v = knapsack(20, seed=1)
    for i in m.I:
        m.x[i].set_value(1.0)  # everything in: over capacity
    res = mip.solve_model(m, SolveOptions(time_limit=10, rel_gap=0.0), warm_start=True)
    assert res.warm_start == "rejected"
    assert res.status == Status.OPTIMAL  # the solve itself still works


def test_incomplete_warm_start_is_rejected_not_guessed():
    m, _, _ = knapsack(10)
    m.x[0].set_value(1.0)  # the others have no value
    res = mip.solve_model(m, SolveOptions(time_limit=10), warm_start=True)
    assert res.warm_start == "rejected"


def test_same_seed_same_solution():
    sols = []
    for _ in range(2):
        m, _, _ = knapsack(35, seed=7, hard=True)
        mip.solve_model(m, SolveOptions(time_limit=30, rel_gap=0.0, seed=5))
        sols.append(tuple(round(m.x[i].value) for i in m.I))
    assert sols[0] == sols[1]


def test_passthrough_options_reach_highs():
    m, _, _ = knapsack(40, seed=4, hard=True)
    res = mip.solve_model(m, SolveOptions(time_limit=30, rel_gap=0.0, passthrough={"mip_max_nodes": 0}))
    assert res.options["passthrough"] == {"mip_max_nodes": 0}
    assert res.termination == "Solution limit reached"  # HiGHS' word for its node limit
    assert res.status in (None, Status.TIME_LIMIT)  # stopped by a limit, with or without an incumbent
    m, _, _ = knapsack(40, seed=4, hard=True)
    assert mip.solve_model(m, SolveOptions(time_limit=30, rel_gap=0.0)).termination == "Optimal"


def test_progress_keyboard_interrupt_returns_best_incumbent():
    m, w, v = knapsack(60, seed=11, hard=True)
    start = greedy_start(m, w, v)
    calls = []

    def progress(*, elapsed, incumbent, bound, message=""):
        calls.append((incumbent, bound))
        raise KeyboardInterrupt  # what Ctrl-C does while the progress line is being drawn

    res = mip.solve_model(m, SolveOptions(time_limit=60, rel_gap=0.0, progress=progress), warm_start=True)
    assert calls
    if res.termination == "Optimal":  # presolve may finish before any callback can stop it
        pytest.skip("HiGHS solved the model before it could be interrupted")
    assert res.status == Status.INTERRUPTED and res.has_solution
    assert res.incumbent <= start + 1e-9


def test_sigint_stops_highs_with_its_incumbent():
    m, w, v = knapsack(60, seed=12, hard=True)
    start = greedy_start(m, w, v)
    previous = signal.getsignal(signal.SIGINT)

    def progress(*, elapsed, incumbent, bound, message=""):
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered while HiGHS runs

    res = mip.solve_model(m, SolveOptions(time_limit=60, rel_gap=0.0, progress=progress), warm_start=True)
    assert signal.getsignal(signal.SIGINT) is previous  # the handler is restored
    if res.termination == "Optimal":
        pytest.skip("HiGHS solved the model before it could be interrupted")
    assert res.status == Status.INTERRUPTED and res.has_solution and res.incumbent <= start + 1e-9


def test_status_mapping():
    assert mip.status_for("Optimal", True, 0.0) == Status.OPTIMAL
    assert mip.status_for("Optimal", True, 0.01) == Status.GAP_REACHED
    assert mip.status_for("Time limit reached", True, 0.3) == Status.TIME_LIMIT
    assert mip.status_for("Time limit reached", False, None) is None
    assert mip.status_for("Interrupted by user", True, 0.2) == Status.INTERRUPTED
    assert mip.status_for("Infeasible", False, None) == Status.INFEASIBLE
    assert mip.status_for("maxTimeLimit", True, None) == Status.TIME_LIMIT


def test_pyomo_private_attributes_still_exist():
    """The glue reads pyomo's highspy object and column map (pinned pyomo 6.10); fail loudly if they move."""
    from pyomo.contrib.solver.common.factory import SolverFactory

    m, _, _ = knapsack(5)
    opt = SolverFactory("highs")
    opt.set_instance(m)
    assert hasattr(opt, "_solver_model") and hasattr(opt._solver_model, "setSolution")
    assert set(opt._pyomo_var_to_solver_var_map) == {id(m.x[i]) for i in m.I}


@pytest.mark.parametrize("name", [n for n, b in mip_backends.BACKENDS.items() if b.interface != "highs"])
def test_other_installed_backends_solve_the_same_model(name):
    try:
        mip_backends.get_backend(name)
    except SolverUnavailableError:
        pytest.skip(f"{name} is not installed here")
    m, _, _ = knapsack(15, seed=2)
    ref = mip.solve_model(m, SolveOptions(time_limit=30, rel_gap=0.0))
    m2, _, _ = knapsack(15, seed=2)
    res = mip.solve_model(m2, SolveOptions(backend=name, time_limit=30, rel_gap=0.0))
    assert res.has_solution and res.incumbent == pytest.approx(ref.incumbent, rel=1e-6)

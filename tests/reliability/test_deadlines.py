"""Time limits that hold on large clusters (issue 18, item 6): every phase that scales with the cluster
stops at its deadline and the solver answers with its best plan so far, certified ``time limit``.
Checked by behaviour (what is returned when the time is already up), never by wall-clock timings."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, SolveOptions, Status
from planmap.solvers.heuristics.lazy_rows import LazyRows
from planmap.solvers.repair import single_device
from planmap.solvers.timebox import TimeBoxExpired, time_box
from planmap.workloads.graphs import paper_topology, random_dag


def _latency_problem(devices: int = 6, seed: int = 3) -> Problem:
    g = random_dag(30, seed=seed)
    topo = paper_topology(devices, 1, memory=float(g.state_bytes.sum()))
    return Problem.from_graph(g, topo, objective="latency", max_subgraphs=2, contiguous=False)


def test_time_box_interrupts_python_work_and_is_a_base_exception():
    with pytest.raises(TimeBoxExpired), time_box(0.01):
        while True:
            try:
                sum(range(1000))
            except Exception:  # a baseline's guard does not swallow the expiry
                pytest.fail("TimeBoxExpired was caught as an Exception")
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0  # disarmed on the way out
    with time_box(None):  # no limit: no timer
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def test_time_box_leaves_an_earlier_outer_alarm_alone_and_rearms_a_later_one():
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *a: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 50.0)
        with time_box(5.0):
            pass
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 40.0 < left <= 50.0  # the outer (fuzzer's) alarm is re-armed with its remaining time
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with time_box(5.0):  # the outer alarm comes first: the box installs nothing
            assert signal.getitimer(signal.ITIMER_REAL)[0] <= 0.5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)
    assert not fired


def test_single_device_past_its_deadline_answers_with_the_first_candidate():
    p = _latency_problem()
    sol, ev = single_device(p, Certificate(Status.HEURISTIC, "single"), deadline=time.perf_counter() - 1.0)
    first = int(p.topology.accelerators[0])
    assert set(sol.node_device().tolist()) == {first}
    full, _ = single_device(p, Certificate(Status.HEURISTIC, "single"))  # no deadline: every candidate
    assert evaluate(p, full).objective <= ev.objective


def test_best_baseline_out_of_time_still_answers():
    from planmap.solvers.latency.baselines import best_baseline

    p = _latency_problem()
    sol, name, notes = best_baseline(p, SolveOptions(time_limit=1), 1, seconds=1e-4)
    assert sol is not None and evaluate(p, sol).feasible
    assert any("stopped after" in n or "not tried (time limit)" in n for n in notes), notes


def test_latency_ip_whose_tables_are_too_large_answers_its_baseline_as_time_limit(monkeypatch):
    pytest.importorskip("pyomo.environ")
    pytest.importorskip("highspy")
    from planmap.solvers.latency import ip as lip

    p = _latency_problem()
    monkeypatch.setattr(lip, "MAX_TABLE_CELLS", 0)  # as if the cluster had thousands of devices
    sol = lip.LatencyIP().solve(p, SolveOptions(time_limit=5))
    cert = sol.certificate
    assert cert.status is Status.TIME_LIMIT and cert.bound is None
    assert "too large" in cert.message
    assert cert.objective == pytest.approx(evaluate(p, sol).objective)


def test_local_search_with_no_time_left_returns_its_start():
    from planmap import solvers

    p = _latency_problem()
    sol = solvers.get("local-search").solve(p, SolveOptions(time_limit=0.0))
    ev = evaluate(p, sol)
    assert sol.certificate.status is Status.HEURISTIC and ev.objective == pytest.approx(sol.certificate.objective)


def test_lazy_rows_read_the_same_values_as_the_matrix():
    m = np.arange(12.0).reshape(3, 4)
    rows = LazyRows(m)
    assert [rows[a][b] for a in range(3) for b in range(4)] == m.ravel().tolist() and len(rows) == 3
    assert rows[1] is rows[1]  # converted once


def test_dp_past_its_deadline_answers_the_best_known_plan_as_time_limit():
    from planmap import solvers

    g = random_dag(30, seed=5)
    topo = paper_topology(4, 1, memory=float(g.state_bytes.sum()))
    p = Problem.from_graph(g, topo, objective="throughput", contiguous=True, microbatches=4)
    sol = solvers.get("dp").solve(p, SolveOptions(time_limit=1e-9))
    assert sol.certificate.status is Status.TIME_LIMIT and "best known plan" in sol.certificate.message
    assert evaluate(p, sol).feasible

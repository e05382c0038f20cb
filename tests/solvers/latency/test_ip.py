"""The latency IP (solvers/latency/ip.py) against exhaustive enumeration under ``evaluate``, against an
independent transcription of the paper's model, and for its anytime guarantees (real HiGHS solves)."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import numpy as np
import pytest

pyo = pytest.importorskip("pyomo.environ")
pytest.importorskip("highspy")

from planmap import solvers  # noqa: E402
from planmap.errors import InfeasibleError, SolverUnavailableError  # noqa: E402
from planmap.evaluate import evaluate  # noqa: E402
from planmap.problem import Problem, Solution, SolveOptions, Status  # noqa: E402
from planmap.solve import solve as planmap_solve  # noqa: E402
from planmap.solvers.latency import ip as lip  # noqa: E402
from planmap.workloads.graphs import paper_topology, random_dag  # noqa: E402
from tests.solvers.latency.cases import bytes_graph, gpu_cluster, optimum, problem  # noqa: E402

EXACT = SolveOptions(time_limit=60, rel_gap=0.0)


# ------------------------------------------------------------------------------------ helpers
def check_against_enumeration(p: Problem) -> Solution:
    sol = lip.LatencyIP().solve(p, EXACT)
    ev = evaluate(p, sol)
    assert ev.feasible, ev.violations
    assert sol.certificate.status == Status.OPTIMAL
    assert sol.certificate.objective == pytest.approx(ev.objective, rel=1e-6)
    assert ev.objective == pytest.approx(optimum(p), rel=1e-6)
    return sol


# ------------------------------------------------------------------------- optimum = enumeration
@pytest.mark.parametrize("seed", range(6))
def test_optimum_equals_enumeration_paper_cluster(seed):
    n = 5 + seed % 3
    g = random_dag(n, seed=seed, unsupported=0.2 if seed % 2 else 0.0)
    topo = paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.6)
    check_against_enumeration(problem(g, topo))


@pytest.mark.parametrize("seed", [0, 3, 6])
def test_optimum_equals_enumeration_with_two_subgraphs_per_accelerator(seed):
    g = random_dag(5, seed=seed)
    topo = paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.6)
    check_against_enumeration(problem(g, topo, q=2))


def test_noncontiguous_placement_beats_contiguous_somewhere():
    """Seed 3 needs two subgraphs on one accelerator to reach its optimum (as the paper's Appendix A)."""
    g = random_dag(5, seed=3)
    topo = paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.6)
    one = lip.LatencyIP().solve(problem(g, topo, q=1), EXACT).certificate.objective
    two = check_against_enumeration(problem(g, topo, q=2))
    assert two.certificate.objective < one * (1 - 1e-3)
    assert max(np.bincount([s.device for s in two.stages])) == 2


@pytest.mark.parametrize("seed,q", [(0, 1), (2, 2), (4, 2)])
def test_optimum_equals_enumeration_when_charges_depend_on_the_link(seed, q):
    """NVLink between GPUs, PCIe to the CPU: a GPU sends to the CPU but not to a peer (send levels),
    and receives at different prices from each (receive levels)."""
    g = bytes_graph(6, seed)
    p = problem(g, gpu_cluster(float(g.state_bytes.sum()) * 0.45 + 3e6), q)
    m = lip.build_model(p, cuts=False)  # (presolve may rule out the devices that make charges differ)
    assert len(m.R) > 0 and len(m.O) > 0  # the non-uniform rows are in use
    check_against_enumeration(p)


@pytest.mark.parametrize("seed", [0, 1])
def test_optimum_equals_enumeration_with_cpu_receive_delays(seed):
    """Two hosts: a CPU receiving from the other host waits for the network (CPU delay levels)."""
    g = bytes_graph(6, seed)
    p = problem(g, gpu_cluster(float(g.state_bytes.sum()) * 0.45 + 3e6, hosts=2))
    assert len(lip.build_model(p).delay) > 0
    check_against_enumeration(p)


def test_colocation_pins_and_unsupported_ops_are_respected():
    g = random_dag(7, seed=5, unsupported=0.15)
    g = replace(g, colocation=np.array([0, -1, 0, -1, 1, 1, -1]))
    topo = paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.7)
    base = problem(g, topo)
    allowed = base.allowed.copy()
    allowed[6] = [False, False, True]  # pin the last node to the second accelerator
    p = replace(base, allowed=allowed)
    sol = check_against_enumeration(p)
    dev = sol.node_device()
    assert dev[0] == dev[2] and dev[4] == dev[5] and dev[6] == 2
    assert np.all(p.allowed[np.arange(7), dev])


# ------------------------------------------------------------------ the paper's model, transcribed
def paper_model_optimum(p: Problem) -> float:
    """Tarnawski et al.'s latency IP written from the paper's equations (all CPUs one machine, q
    subgraphs per accelerator in a fixed order, c_u paid in and out of each subgraph)."""
    g, q = p.graph, p.max_subgraphs
    n = g.num_nodes
    acc = list(np.flatnonzero(~p.topology.is_cpu))
    cpu_t, acc_t = g.measured["cpu"], g.measured["accelerator"]
    c = g.value_time
    size, cap = g.state_bytes.astype(float), float(p.capacity[acc[0]])
    edges = list(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    K = len(acc) * q
    ub = float(cpu_t.sum())
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(n), range(K + 1), domain=pyo.Binary)
    m.z = pyo.Var(range(n), range(1, K + 1), bounds=(0, 1))
    m.ci = pyo.Var(range(n), range(1, K + 1), bounds=(0, 1))
    m.co = pyo.Var(range(n), range(1, K + 1), bounds=(0, 1))
    m.lat = pyo.Var(range(n), bounds=(0, None))
    m.st = pyo.Var(range(1, K + 1), bounds=(0, None))
    m.fi = pyo.Var(range(1, K + 1), bounds=(0, None))
    m.T = pyo.Var(bounds=(0, None))
    m.c = pyo.ConstraintList()
    for v in range(n):
        m.c.add(sum(m.x[v, k] for k in range(K + 1)) == 1)
        if np.isnan(acc_t[v]):
            for k in range(1, K + 1):
                m.c.add(m.x[v, k] == 0)
        m.c.add(m.lat[v] >= cpu_t[v] * m.x[v, 0])
        m.c.add(m.T >= m.lat[v])
    for f in range(len(acc)):
        m.c.add(sum(size[v] * m.x[v, 1 + f * q + j] for v in range(n) for j in range(q)) <= cap)
        for j in range(1, q):
            m.c.add(m.st[1 + f * q + j] >= m.fi[f * q + j])
    for k in range(1, K + 1):
        for v in range(n):
            m.c.add(m.z[v, k] >= m.x[v, k])
            m.c.add(m.st[k] >= m.lat[v] - (1 - m.ci[v, k]) * ub)
            m.c.add(m.lat[v] >= m.fi[k] - (1 - m.x[v, k]) * ub)
        for u, v in edges:
            m.c.add(m.z[v, k] <= m.z[u, k])
            m.c.add(m.z[v, k] <= m.x[v, k] - m.x[u, k] + 1)
            m.c.add(m.ci[u, k] >= m.x[v, k] - m.x[u, k])
            m.c.add(m.co[u, k] >= m.x[u, k] - m.x[v, k])
        load = sum(np.nan_to_num(acc_t[v]) * m.x[v, k] + c[v] * (m.ci[v, k] + m.co[v, k]) for v in range(n))
        m.c.add(m.fi[k] == m.st[k] + load)
    for u, v in edges:
        m.c.add(m.lat[v] >= m.lat[u] + cpu_t[v] * m.x[v, 0])
    cls = g.colocation
    for a, b in zip(*np.nonzero((cls[:, None] == cls[None, :]) & (cls[:, None] >= 0)), strict=True):
        if a < b:
            m.c.add(m.x[a, 0] == m.x[b, 0])
            for f in range(len(acc)):
                m.c.add(sum(m.x[a, 1 + f * q + j] - m.x[b, 1 + f * q + j] for j in range(q)) == 0)
    m.o = pyo.Objective(expr=m.T)
    from planmap.solvers import mip

    res = mip.solve_model(m, EXACT)
    assert res.status == Status.OPTIMAL
    return res.incumbent


@pytest.mark.parametrize("seed,q", [(0, 1), (1, 1), (2, 2)])
def test_model_equals_the_papers_on_the_paper_cluster(seed, q):
    g = random_dag(8, seed=seed, unsupported=0.1)
    g = replace(g, colocation=np.where(np.arange(8) % 4 == 1, 1, -1))
    topo = paper_topology(3, 1, memory=float(g.state_bytes.sum()) * 0.45)
    p = problem(g, topo, q)
    m = lip.build_model(p)
    assert len(m.R) == len(m.O) == len(m.delay) == 0  # one c_u per value: exactly the paper's rows
    ours = lip.LatencyIP().solve(p, EXACT)
    assert ours.certificate.status == Status.OPTIMAL
    assert ours.certificate.objective == pytest.approx(paper_model_optimum(p), rel=1e-6)


# --------------------------------------------------------------------- claims, limits, warm start
@pytest.mark.parametrize("seed", [0, 1])
def test_claims_match_evaluate_and_memory_holds_under_a_time_limit(seed):
    g = random_dag(40, seed=seed, unsupported=0.05)
    topo = paper_topology(4, 1, memory=float(g.state_bytes.sum()) / 4 / 0.7)
    p = problem(g, topo, q=2)
    sol = lip.LatencyIP().solve(p, SolveOptions(time_limit=2, rel_gap=0.0))
    ev = evaluate(p, sol)
    assert ev.feasible and np.all(ev.memory <= p.capacity)
    assert sol.certificate.objective == pytest.approx(ev.objective, rel=1e-6)
    if "before the MIP" in sol.certificate.message:  # a loaded machine: the time ran out building the model
        assert sol.certificate.status is Status.TIME_LIMIT and sol.certificate.bound is None
    else:
        assert sol.certificate.bound is not None and sol.certificate.bound <= ev.objective * (1 + 1e-9)
    assert sol.certificate.status in (Status.OPTIMAL, Status.GAP_REACHED, Status.TIME_LIMIT)


def test_never_worse_than_any_baseline_or_the_given_warm_start():
    g = random_dag(50, seed=4)
    topo = paper_topology(4, 1, memory=float(g.state_bytes.sum()) / 4 / 0.6)
    p = problem(g, topo, q=2)
    given = solvers.get("even").solve(p, SolveOptions())
    sol = lip.LatencyIP().solve(p, SolveOptions(time_limit=2, rel_gap=0.0, warm_start=given))
    latency = evaluate(p, sol).objective
    assert latency <= evaluate(p, given).objective + 1e-12
    for name in ("even", "single", "greedy", "local-search"):
        try:
            base = solvers.get(name).solve(p, SolveOptions(time_limit=1))
        except SolverUnavailableError:
            continue
        ev = evaluate(p, base)
        if ev.feasible:
            assert latency <= ev.objective * (1 + 1e-9), name


def test_warm_start_is_a_complete_feasible_mip_start():
    g = random_dag(30, seed=2)
    p = problem(g, paper_topology(3, 1, memory=float(g.state_bytes.sum()) / 3 / 0.6), q=2)
    start = solvers.get("even").solve(p, SolveOptions())
    m = lip.build_model(p, horizon=evaluate(p, start).objective)
    assert lip.load_warm_start(m, p, start)
    for c in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        assert (not c.has_lb() or body >= pyo.value(c.lower) - 1e-7) and (
            not c.has_ub() or body <= pyo.value(c.upper) + 1e-7), c.name
    res = lip.solve(m, SolveOptions(time_limit=2), warm_start=True)
    assert res.warm_start == "accepted"
    assert res.incumbent <= evaluate(p, start).objective * (1 + 1e-9)


def test_interchangeable_devices():
    g = random_dag(6, seed=0)
    p = problem(g, paper_topology(3, 2))
    assert lip.interchangeable_devices(p) == [(0, 1), (2, 3, 4)]
    allowed = p.allowed.copy()
    allowed[0, 3] = False  # a pin makes accelerator 3 different
    assert lip.interchangeable_devices(replace(p, allowed=allowed)) == [(0, 1), (2, 4)]


def test_interrupt_returns_the_best_placement_with_status_interrupted(monkeypatch):
    # the frontier DP proves this instance optimal before the solve's second report: without it, the MIP runs
    monkeypatch.setattr(lip, "FRONTIER_SHARE", 0.0)
    g = random_dag(60, seed=1)
    p = problem(g, paper_topology(4, 1, memory=float(g.state_bytes.sum()) / 4 / 0.6), q=2)
    seen = []

    def progress(*, elapsed, incumbent, bound, message=""):
        seen.append(incumbent)
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C once the solve is under way

    sol = lip.LatencyIP().solve(p, SolveOptions(time_limit=120, rel_gap=0.0, progress=progress))
    ev = evaluate(p, sol)
    assert sol.certificate.status == Status.INTERRUPTED
    assert ev.feasible and sol.certificate.objective == pytest.approx(ev.objective, rel=1e-6)


def test_infeasible_problem_is_proven_and_explained():
    g = random_dag(6, seed=0)
    topo = paper_topology(2, 1, memory=float(g.state_bytes.max()) * 1.5)
    base = problem(g, topo)
    allowed = base.allowed.copy()
    allowed[:, 0] = False  # nothing may run on the CPU, and the accelerators are too small
    with pytest.raises(InfeasibleError, match=r"no placement satisfies memory.*proven by highs"):
        lip.LatencyIP().solve(replace(base, allowed=allowed), EXACT)


def test_missing_backend_fails_before_any_work():
    from planmap.solvers import mip_backends

    missing = next((n for n in mip_backends.BACKENDS if n not in mip_backends.available_backends()), None)
    if missing is None:
        pytest.skip("every backend is installed here")
    p = problem(random_dag(5, seed=0), paper_topology(2, 1))
    with pytest.raises(SolverUnavailableError, match="install"):
        lip.LatencyIP().solve(p, SolveOptions(backend=missing))


def test_registry_ip_dispatches_latency_and_the_driver_accepts_its_claim():
    solver = solvers.get("ip")
    assert solver.name == "ip" and solver.objectives == frozenset({"latency", "throughput"})
    g = random_dag(8, seed=1)
    p = problem(g, paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.6))
    result = planmap_solve(p, "ip", EXACT)
    assert "claimed" not in result.solution.certificate.message
    assert result.solution.certificate.objective == pytest.approx(optimum(p), rel=1e-6)


def test_same_inputs_same_plan():
    g = random_dag(12, seed=9)
    p = problem(g, paper_topology(2, 1, memory=float(g.state_bytes.sum()) / 2 / 0.6), q=2)
    a = lip.LatencyIP().solve(p, replace(EXACT, seed=3))
    b = lip.LatencyIP().solve(p, replace(EXACT, seed=3))
    assert a.certificate.status == b.certificate.status == Status.OPTIMAL
    assert np.array_equal(a.assignment, b.assignment) and a.stages == b.stages


def test_packed_splits_are_feasible_contiguous_starts_under_tight_memory():
    from planmap.solvers.latency.baselines import packed_splits
    from planmap.workloads.nets import bert, net_topology

    g = bert(2)
    p = problem(g, net_topology(g, 4, fill=0.8))  # q = 1: every accelerator one convex piece
    sols = packed_splits(p)
    evs = [evaluate(p, s) for s in sols]
    feasible = [ev.objective for ev in evs if ev.feasible]
    assert feasible  # candidates that a colocation class pushes over memory are dropped by best_baseline
    assert all(not any("contiguous" in v for v in ev.violations) for ev in evs)
    assert all(len({s.device for s in sol.stages}) == sol.num_stages for sol in sols)
    start, name, _ = lip.best_baseline(p, SolveOptions(time_limit=5), 5)
    assert evaluate(p, start).objective <= min(feasible) + 1e-12


def test_backend_infeasible_despite_a_feasible_warm_start_is_reported_unproven():
    """HiGHS can reject a model at the horizon's tolerance that the warm start satisfies; the answer
    is then the warm start, and the certificate must not claim infeasibility or a bound."""
    from planmap.solvers import mip

    g = random_dag(8, seed=1)
    p = problem(g, paper_topology(2, 1))
    start = solvers.get("greedy").solve(p, SolveOptions())
    latency = evaluate(p, start).objective
    m = lip.build_model(p, horizon=latency)
    rejected = mip.MipResult(backend="highs", version="highs 1.16.0", termination="Infeasible",
                              status=Status.INFEASIBLE, has_solution=False, incumbent=None, bound=None, gap=None,
                              warm_start="rejected", translate_time=0.0, solve_time=0.0)
    fields = lip._certificate_fields(p, latency, rejected, "greedy", "greedy", latency, [], m, 0.0, True, 0.0)
    assert fields["status"] == Status.HEURISTIC
    assert fields["bound"] is None and fields["gap"] is None
    assert "unproven" in fields["message"] and "answer is the warm start" in fields["message"]

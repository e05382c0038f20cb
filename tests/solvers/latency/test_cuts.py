"""The latency IP's strengthening (solvers/latency/cuts.py): every time bound holds on every feasible
placement of small graphs (exhaustive, under ``evaluate``), the model proves the same optimum with
and without the cuts and the presolve, and warm starts satisfy every added row (real HiGHS solves)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pyo = pytest.importorskip("pyomo.environ")
pytest.importorskip("highspy")

from planmap.cluster import Topology  # noqa: E402
from planmap.evaluate import evaluate  # noqa: E402
from planmap.problem import Problem, Solution, SolveOptions, Status  # noqa: E402
from planmap.solvers.latency import ip as lip  # noqa: E402
from planmap.solvers.latency.cuts import memory_buckets  # noqa: E402
from planmap.solvers.latency.data import prepare  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph, random_dag  # noqa: E402
from tests.solvers.latency.cases import CERT, bytes_graph, gpu_cluster, optimum, placements, problem  # noqa: E402

EXACT = SolveOptions(time_limit=60, rel_gap=0.0)


def instance(seed: int, n: int, q: int) -> Problem:
    """Small instances over the settings the bounds distinguish: one charge per value (the paper's
    cluster), link-dependent charges, CPU receive delays across hosts, unsupported ops, colocation,
    memory tight enough that a device cannot take every node."""
    kind = seed % 4
    if kind == 0:
        g = random_dag(n, seed=seed, unsupported=0.25)
        return problem(g, paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.55), q)
    if kind == 1:
        g = bytes_graph(n, seed)
        return problem(g, gpu_cluster(float(g.state_bytes.sum()) * 0.45 + 3e6), q)
    if kind == 2:
        g = bytes_graph(n, seed)
        return problem(g, gpu_cluster(float(g.state_bytes.sum()) * 0.6 + 3e6, hosts=2), q)
    g = random_dag(n, seed=seed)
    g = replace(g, colocation=np.where(np.arange(n) % 3 == 1, 0, -1))
    return problem(g, paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.7), q)


def pcie_instance(seed: int, n: int, q: int) -> Problem:
    """The example cluster of Tarnawski et al. (specs/clusters/cpu-4acc-pcie.yaml: 1 CPU, 4 accelerators
    through host memory, launch overheads) with memory so tight that at most half the graph fits a device."""
    from pathlib import Path

    from planmap.spec.loader import load_cluster

    path = Path(__file__).resolve().parents[3] / "specs" / "clusters" / "cpu-4acc-pcie.yaml"
    topo = Topology.from_spec(load_cluster(path).spec)
    g = bytes_graph(n, seed)
    g = replace(g, state_bytes=g.state_bytes * (2**30 // max(1, int(g.state_bytes.sum()))))
    cap = float(topo.memory[~topo.is_cpu].min())
    headroom = 1.0 - float(g.state_bytes.sum()) * 0.5 / cap
    return replace(problem(g, topo, q), memory_headroom=headroom)


def any_instance(seed: int, n: int, q: int) -> Problem:
    """``instance``'s four settings, the paper's cluster file with tight memory, and a pinned node."""
    if seed % 6 == 4:
        return pcie_instance(seed, n, q)
    if seed % 6 == 5:
        g = random_dag(n, seed=seed, comm_scale=0.1 + 0.2 * (seed % 5))
        p = problem(g, paper_topology(3, 1, memory=float(g.state_bytes.sum()) * 0.6), q)
        allowed = p.allowed.copy()
        allowed[n - 1] = [False, False, True, False]  # the last node pinned to the second accelerator
        return replace(p, allowed=allowed)
    return instance(seed, n, q)


def violated_rows(m) -> list[str]:
    """Names of the active rows and variable bounds of ``m`` its current values break."""
    bad = []
    for c in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        if (c.has_lb() and body < pyo.value(c.lower) - 1e-7) or (c.has_ub() and body > pyo.value(c.upper) + 1e-7):
            bad.append(c.name)
    for v in m.component_data_objects(pyo.Var, active=True):
        if v.value is None or (v.lb is not None and v.value < v.lb - 1e-9) or (
                v.ub is not None and v.value > v.ub + 1e-9):
            bad.append(v.name)
    return bad


# ---------------------------------------------------------------- bounds hold on every placement
def assert_bounds_hold_on_every_feasible_placement(p: Problem) -> None:
    """Every time bound of ``prepare(p)`` against every feasible placement's times under evaluate."""
    dt = prepare(p)
    b, u = dt.bounds, dt.time_scale
    nodes = np.arange(p.num_nodes)
    checked = 0
    for sol in placements(p):
        ev = evaluate(p, sol)
        if not ev.feasible:
            continue
        dev = sol.node_device()
        assert dt.allowed[nodes, dev].all()  # presolve never rules out a feasible placement's device
        T, fin = ev.objective / u, ev.node_finish / u
        tol = 1e-9 * T
        assert np.all(b.finish[nodes, dev] <= fin + tol)
        assert np.all(b.through[nodes, dev] <= T + tol)
        assert np.all(b.tail_fin[nodes, dev] <= T - fin + tol)
        assert np.all(b.ef[nodes, dev] + b.tail[nodes, dev] <= T + tol)
        checked += 1
    assert checked >= 10  # the instance leaves room to check


@pytest.mark.parametrize("seed,n,q", [(0, 6, 1), (1, 6, 1), (2, 5, 2), (3, 6, 1), (4, 5, 2), (5, 5, 2),
                                      (6, 5, 2), (7, 5, 2)])
def test_time_bounds_hold_on_every_feasible_placement(seed, n, q):
    assert_bounds_hold_on_every_feasible_placement(instance(seed, n, q))


FORK_JOINS = {
    "diamond": [(0, 1), (1, 2), (2, 5), (0, 3), (3, 4), (4, 5)],  # two branches of two nodes
    "three-way": [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)],  # a join of three producers
    "nested": [(0, 1), (0, 2), (1, 3), (2, 3), (1, 4), (3, 5), (4, 5)],  # joins inside joins, a skip edge
}


def fork_join_instance(shape: str | list[tuple[int, int]], seed: int, q: int) -> Problem:
    """Branchy graphs (the random DAGs have a backbone, so their joins never have independent
    producers): transfers cheap enough that running branches apart can pay, on the paper's cluster
    or link-dependent GPUs, with memory for about two thirds of the graph per accelerator. ``shape``
    names one of ``FORK_JOINS`` or gives the edges."""
    edges = FORK_JOINS[shape] if isinstance(shape, str) else shape
    n = max(b for _, b in edges) + 1
    rng = np.random.default_rng(seed)
    acc = rng.lognormal(0, 0.6, n)
    out = (rng.lognormal(0, 0.6, n) * 3e6).astype(np.int64)
    g = profiled_graph(edges, acc * rng.lognormal(np.log(4), 0.4, n), acc, rng.lognormal(np.log(0.3), 0.6, n),
                       size=rng.lognormal(0, 0.4, n) * 1e6, out_bytes=out)
    memory = float(g.state_bytes.sum()) * 0.67 + 4 * float(out.max())  # room for the working sets
    if seed % 2:
        return problem(g, gpu_cluster(memory), q)
    return problem(g, paper_topology(2, 1, memory=memory), q)


@pytest.mark.parametrize("shape,seed,q",
                         [(s, seed, q) for s in FORK_JOINS for seed, q in ((0, 1), (1, 1), (2, 2), (3, 2))])
def test_join_bounds_hold_on_every_feasible_placement_of_branchy_graphs(shape, seed, q):
    assert_bounds_hold_on_every_feasible_placement(fork_join_instance(shape, seed, q))


def test_join_bound_charges_both_branches_to_one_call():
    """Transfers far dearer than compute: the best placement runs the diamond on one accelerator, one
    branch after the other. A path bound sees only the longer branch; the join bound sees both."""
    t = [0.1, 0.2, 0.3, 0.25, 0.15, 0.1]
    g = profiled_graph(FORK_JOINS["diamond"], [10.0] * 6, t, 5.0, size=1)
    p = problem(g, paper_topology(2, 1), q=2)
    dt = prepare(p)
    bound = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale
    assert bound == pytest.approx(sum(t), rel=1e-9)  # the longest path alone is 0.1 + 0.5 + 0.1 = 0.7
    assert lip.LatencyIP().solve(p, EXACT).certificate.objective == pytest.approx(sum(t), rel=1e-6)


def test_join_bound_lets_a_branch_run_elsewhere_when_that_pays():
    """Cheap transfers and one slow branch node: the best placement computes it on the other
    accelerator while the first runs the other branch. The join bound must not charge that node to
    the join's call (the branch enters the call through its transfer instead)."""
    t = [0.1, 0.1, 0.1, 1.0, 0.1, 0.1]
    g = profiled_graph(FORK_JOINS["diamond"], [10.0] * 6, t, 0.01, size=1)
    p = problem(g, paper_topology(2, 1), q=2)
    dt = prepare(p)
    best = optimum(p)
    assert best < sum(t) - 0.1  # running node 3 apart pays (q = 2: the fork in a call of its own)
    for v in range(6):
        assert float(np.where(dt.allowed[v], dt.bounds.through[v], np.inf).min()) * dt.time_scale <= best * (1 + 1e-9)


def test_bounds_see_memory_force_a_transfer():
    """A chain too big for one accelerator must be cut once, paying the cut's transfer at both
    ends: the bound says so, and equals the optimum (without memory it would be the bare chain)."""
    n = 6
    g = profiled_graph([(i, i + 1) for i in range(n - 1)], [1.0] * n, [0.1] * n, [0.05, 0.5, 0.02, 0.5, 0.5, 0.0],
                       size=100_000)
    p = problem(g, paper_topology(2, 1, memory=350_000), q=1)  # clusters must be physical: >= 1 kB
    dt = prepare(p)
    bound = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale
    assert bound == pytest.approx(0.6 + 2 * 0.02, rel=1e-9)  # 6 x 0.1 compute + the 0.02 value twice
    sol = lip.LatencyIP().solve(p, EXACT)
    assert sol.certificate.objective == pytest.approx(bound, rel=1e-6)


def _sweep_bound(p: Problem) -> float:
    dt = prepare(p)
    return float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale


def test_join_bound_counts_the_other_branchs_memory():
    """A diamond whose every path fits one accelerator but whose two branches together do not, with
    transfers dearer than compute: one call cannot hold the join and both branches, so some value
    must cross. Counting only the memory of one path the bound was the bare compute (0.5 s)."""
    g = profiled_graph([(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)], [1.0] * 5, [0.1] * 5,
                       [0.5, 0.5, 0.5, 0.5, 0.0], size=100_000)
    p = problem(g, paper_topology(2, 1, memory=450_000), q=1)  # four of the five nodes fit
    bound, best = _sweep_bound(p), optimum(p)
    assert bound > 0.5 + 0.5  # compute and at least one transfer
    assert bound <= best * (1 + 1e-9)


def test_a_call_receives_its_entering_values_one_after_another():
    """0 -> 1 -> 2 and 0 -> 2, one node per accelerator at most two: when 2's call takes in 1's value
    it takes in 0's too (convexity), and pays both charges, not the larger one; the bound is the optimum."""
    g = profiled_graph([(0, 1), (1, 2), (0, 2)], [1.0] * 3, [0.1] * 3, [0.05, 0.04, 0.0], size=100_000)
    p = problem(g, paper_topology(2, 1, memory=250_000), q=1)
    assert _sweep_bound(p) == pytest.approx(optimum(p), rel=1e-9)


def test_memory_buckets_round_down_so_whatever_fits_still_fits():
    rng = np.random.default_rng(0)
    sizes = rng.uniform(0, 100, 40)
    cap = np.array([np.inf, 1000.0, 333.0])
    units = memory_buckets(sizes, cap, 64)
    assert (units[:, 0] == 0).all()
    for _ in range(200):
        pick = rng.random(40) < 0.3
        for d in (1, 2):
            if sizes[pick].sum() <= cap[d]:
                assert units[pick, d].sum() <= 64


@pytest.mark.parametrize("seed,q", [(s, 1 + s // 6) for s in range(12)])  # every setting with q = 1 and 2
def test_every_placement_under_the_horizon_is_a_complete_mip_start(seed, q):
    """Validity of every cut, bound and presolve step at once: any feasible placement no slower than
    the horizon (the optimum itself, or the best baseline's latency) loads as a warm start of the
    strengthened model and satisfies every one of its rows and variable bounds."""
    p = any_instance(seed, 5, q)
    feasible = []
    for sol in placements(p):
        ev = evaluate(p, sol)
        if ev.feasible:
            feasible.append((ev.objective, len(feasible), sol))
    feasible.sort(key=lambda f: f[:2])
    start, _, _ = lip.best_baseline(p, SolveOptions(time_limit=5), 5)
    base = evaluate(p, start).objective
    rng = np.random.default_rng(seed)
    checked = 0
    for horizon in (feasible[0][0], base):
        m = lip.build_model(p, horizon=horizon)
        under = [f for f in feasible if f[0] <= horizon]
        picks = under[:8] + [under[i] for i in rng.choice(len(under), min(12, len(under)), replace=False)]
        for latency, _, sol in [*picks, (base, -1, start)] if horizon == base else picks:
            assert lip.load_warm_start(m, p, sol), (horizon, latency, sol.node_device())
            assert violated_rows(m) == [], (horizon, latency, sol.node_device())
            checked += 1
    assert checked >= 10


# ------------------------------------------------------------ the same optimum, with and without
@pytest.mark.parametrize("seed", range(12))
def test_cuts_and_presolve_keep_the_optimum(seed):
    """The plain model (no bounds, rows or presolve) and the strengthened one, horizon = a
    baseline's latency, prove the same optimum on random small instances."""
    q = 1 + seed % 3
    p = instance(seed, 8 if q == 1 else 7, q)
    start, _, _ = lip.best_baseline(p, SolveOptions(time_limit=5), 5)
    horizon = evaluate(p, start).objective
    plain = lip.build_model(p, cuts=False)
    res_plain = lip.solve(plain, EXACT)
    strong = lip.build_model(p, horizon=horizon)
    assert lip.load_warm_start(strong, p, start)
    res_strong = lip.solve(strong, EXACT, warm_start=True)
    assert res_plain.status == res_strong.status == Status.OPTIMAL
    assert res_strong.incumbent == pytest.approx(res_plain.incumbent, rel=1e-6)
    sol = lip.extract(strong, p)
    assert evaluate(p, sol).objective == pytest.approx(res_strong.incumbent, rel=1e-6)


def test_the_solver_with_and_without_cuts_agrees():
    p = instance(3, 9, 2)
    a = lip.LatencyIP().solve(p, EXACT)
    b = lip.LatencyIP(cuts=False).solve(p, EXACT)
    assert a.certificate.status == b.certificate.status == Status.OPTIMAL
    assert a.certificate.objective == pytest.approx(b.certificate.objective, rel=1e-6)


# ------------------------------------------------------------------------ presolve and warm start
def test_presolve_keeps_nodes_on_the_cpu_when_leaving_it_cannot_pay():
    """Accelerators twice as fast but with a launch overhead, transfers dearer than what a heavy
    node saves there: no node can profitably leave the CPU, so presolve removes every accelerator
    column and the root is optimal (the example MLP's situation, where the plain model needed
    thousands of branch-and-bound nodes to prove it)."""
    n = 10
    edges = [(i, i + 1) for i in range(n - 1)] + [(0, 5), (3, 8)]
    cpu = np.array([1, 1, 4, 1, 1, 4, 1, 1, 1, 1], float)
    g = profiled_graph(edges, cpu, cpu * 0.5 + 1.0, 1.5, size=1)
    p = problem(g, paper_topology(4, 1), q=2)
    cpu_only = evaluate(p, Solution.from_devices(p, np.zeros(n, np.int64), CERT)).objective
    m = lip.build_model(p, horizon=cpu_only)
    assert not m.data.allowed[:, 1:].any()
    assert len(m.x) == n
    sol = lip.LatencyIP().solve(p, EXACT)
    assert sol.certificate.status == Status.OPTIMAL
    assert sol.certificate.objective == pytest.approx(cpu_only, rel=1e-9)


@pytest.mark.parametrize("q", [1, 2])
def test_warm_start_satisfies_every_row_of_the_strengthened_model(q):
    from planmap.workloads.nets import bert, net_topology

    g = bert(1)
    p = problem(g, net_topology(g, 3, fill=0.7), q)
    start, _, _ = lip.best_baseline(p, SolveOptions(time_limit=5), 5)
    m = lip.build_model(p, horizon=evaluate(p, start).objective)
    assert len(m.finish_bound) + len(m.tail_bound) > 0 and len(m.through_bound) == p.num_nodes
    assert (q == 1) == (len(m.slot_order) == 0)
    assert lip.load_warm_start(m, p, start)
    assert violated_rows(m) == []


def test_a_time_limited_certificate_keeps_the_models_own_bound():
    """HiGHS may stop (time limit, Ctrl-C) before it reports a dual bound, or with one weaker than the
    model's lower bound on T (the time bounds hold for every placement): the certificate then reports
    that bound and the gap to it, and says where it comes from."""
    from planmap.solvers import mip

    g = profiled_graph([(i, i + 1) for i in range(5)], [1.0] * 6, [0.1] * 6, [0.05, 0.5, 0.02, 0.5, 0.5, 0.0],
                       size=100_000)
    p = problem(g, paper_topology(2, 1, memory=350_000), q=1)  # clusters must be physical: >= 1 kB
    start = lip.best_baseline(p, SolveOptions(time_limit=5), 5)[0]
    latency = evaluate(p, start).objective
    m = lip.build_model(p, horizon=latency)
    static = m.T.lb * m.time_unit
    assert 0 < static <= latency
    for bound in (None, static * 0.5):
        stopped = mip.MipResult(backend="highs", version="highs 1.16.0", termination="Time limit reached",
                                 status=Status.TIME_LIMIT, has_solution=True, incumbent=latency, bound=bound, gap=None,
                                 warm_start="accepted", translate_time=0.0, solve_time=0.0)
        fields = lip._certificate_fields(p, latency, stopped, "ip", "greedy", latency, [], m, 0.0, True, 0.0)
        assert fields["status"] == Status.TIME_LIMIT
        assert fields["bound"] == pytest.approx(static, rel=1e-12)
        assert fields["gap"] == pytest.approx((latency - static) / latency, abs=1e-12)
        assert "from the model's time bounds" in fields["message"]

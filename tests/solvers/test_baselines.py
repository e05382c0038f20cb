"""Baselines (greedy, metis, local-search) and the shared stage builder, judged by ``evaluate``.

Cluster: planmap.synthetic.paper_topology — device 0 is the CPU, 1.. are accelerators that exchange
data only through host memory (a transfer is paid by the sending and the receiving accelerator);
transfer times are the graph's measured per-value times.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from planmap import solvers
from planmap.errors import InfeasibleError
from planmap.evaluate import evaluate, nonconvex_units, quotient_order
from planmap.problem import Certificate, Problem, Solution, SolveOptions
from planmap.solve import solve
from planmap.solvers.heuristics.greedy import greedy_latency, memory_fill
from planmap.solvers.heuristics.throughput_loads import ThroughputLoads
from planmap.solvers.repair import contiguous_repair, repair
from planmap.solvers.segments import segments_from_devices, split_pieces
from planmap.synthetic import layered_dag, paper_topology, profiled_graph, random_dag

CPU, ACC0, ACC1, ACC2, ACC3 = 0, 1, 2, 3, 4
CERT = Certificate("heuristic", "test")
BASELINES = ["greedy", "metis", "local-search"]
# local search bounded by evaluations, not the clock: deterministic and quick
LS = SolveOptions(time_limit=30, seed=0, passthrough={"max_evaluations": 150, "restarts": 2})


def problems():
    """(id, Problem) pairs: random DAGs and layered graphs, inference and training, both objectives."""
    topo = paper_topology(4)
    r = random_dag(60, seed=3)
    ru = random_dag(80, seed=4, unsupported=0.15)
    lay = layered_dag(5, 3, seed=1)
    tr = layered_dag(4, 3, seed=2, training=True)
    out = [
        ("random-lat-q1", Problem.from_graph(r, topo, objective="latency")),
        ("random-lat-q3", Problem.from_graph(r, topo, objective="latency", contiguous=False, max_subgraphs=3)),
        ("unsupported-lat-q2", Problem.from_graph(ru, topo, objective="latency", contiguous=False, max_subgraphs=2)),
        ("layered-lat-q1", Problem.from_graph(lay, topo, objective="latency")),
        ("training-lat-q4", Problem.from_graph(tr, topo, objective="latency", mode="training", contiguous=False,
                                               max_subgraphs=4)),
        ("random-thr", Problem.from_graph(r, topo, objective="throughput", microbatches=4)),
        ("random-thr-noncontig", Problem.from_graph(r, topo, objective="throughput", contiguous=False)),
        ("unsupported-thr-noncontig", Problem.from_graph(ru, topo, objective="throughput", contiguous=False)),
        ("layered-thr", Problem.from_graph(lay, topo, objective="throughput", microbatches=4)),
        ("training-thr-1f1b", Problem.from_graph(tr, topo, objective="throughput", mode="training", microbatches=4,
                                                 schedule="1f1b")),
        ("training-thr-fwbw", Problem.from_graph(tr, topo, objective="throughput", mode="training", microbatches=4,
                                                 variant="max-fw-plus-max-bw", contiguous=False)),
    ]
    return out


PROBLEMS = problems()
IDS = [name for name, _ in PROBLEMS]


def options_for(name: str) -> SolveOptions:
    return LS if name == "local-search" else SolveOptions(seed=0)


# ------------------------------------------------------------------------------- feasibility
@pytest.mark.parametrize("solver", BASELINES)
@pytest.mark.parametrize("problem", [p for _, p in PROBLEMS], ids=IDS)
def test_baseline_feasible_and_claim_matches_evaluate(problem, solver):
    sol = solvers.get(solver).solve(problem, options_for(solver))
    ev = evaluate(problem, sol)
    assert ev.feasible, ev.violations
    assert sol.certificate.objective == ev.objective
    assert sol.certificate.solver == solver
    assert sol.certificate.status == "heuristic"
    # the driver agrees: no "solver claimed" remark
    res = solve(problem, solver, options_for(solver))
    assert "claimed" not in res.solution.certificate.message
    assert res.evaluation.feasible


@pytest.mark.parametrize("problem", [p for n, p in PROBLEMS if "lat" in n], ids=[n for n in IDS if "lat" in n])
def test_greedy_expected_latency_is_evaluated_latency(problem):
    sol, expected = greedy_latency(problem)
    assert math.isclose(evaluate(problem, sol).objective, expected, rel_tol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_simulation_exact_on_random_graphs(seed):
    """The call schedule the greedy simulates is the evaluator's, transfers and re-propagation included."""
    g = random_dag(120, seed=seed, density=0.5, comm_scale=1.0, unsupported=0.1 * (seed % 3))
    for q in (1, 2, 4):
        p = Problem.from_graph(g, paper_topology(3), objective="latency", contiguous=q == 1, max_subgraphs=q)
        sol, expected = greedy_latency(p)
        ev = evaluate(p, sol)
        assert ev.feasible, ev.violations
        assert math.isclose(ev.objective, expected, rel_tol=1e-12)


# ------------------------------------------------------------------------- hand-checked cases
def test_greedy_chain_stays_on_one_accelerator():
    g = profiled_graph([(0, 1), (1, 2)], cpu=[10, 10, 10], acc=[1, 2, 3], comm=0.5)
    p = Problem.from_graph(g, paper_topology(3), objective="latency")
    sol = solvers.get("greedy").solve(p, SolveOptions())
    assert sol.certificate.objective == pytest.approx(6.0)  # 1 + 2 + 3, nothing crosses a device
    assert len(set(sol.node_device().tolist())) == 1


def test_greedy_unsupported_middle_operator_goes_through_the_cpu():
    # 0 (acc) -> 1 (CPU only) -> 2 (acc): acc0 runs 0 and sends (0.5); the CPU receives for free on its
    # host and runs 1 (4); a second accelerator call receives (0.25) and runs 2 (3): 1 + 0.5 + 4 + 0.25 + 3
    g = profiled_graph([(0, 1), (1, 2)], cpu=[8, 4, 24], acc=[1, np.nan, 3], comm=[0.5, 0.25, 0.0])
    p = Problem.from_graph(g, paper_topology(2), objective="latency")
    sol, expected = greedy_latency(p)
    assert expected == pytest.approx(8.75)
    dev = sol.node_device()
    assert dev[1] == CPU and dev[0] != CPU and dev[2] != CPU
    assert evaluate(p, sol).objective == pytest.approx(8.75)


def test_greedy_throughput_chain_halves():
    # four equal operators on two accelerators: two per device; the cut value is sent (0.1) by the
    # first and received (0.1) by the second -> bottleneck 2 + 0.1
    g = profiled_graph([(0, 1), (1, 2), (2, 3)], cpu=[8] * 4, acc=[1] * 4, comm=0.1)
    p = Problem.from_graph(g, paper_topology(2), objective="throughput")
    sol = solvers.get("greedy").solve(p, SolveOptions())
    assert sol.certificate.objective == pytest.approx(2.1)
    assert sol.node_device().tolist() == [ACC0, ACC0, ACC1, ACC1]


def test_memory_fill_is_the_papers_greedy():
    # 1 MB per operator, 2.5 MB per accelerator: two operators each, in topological order
    g = profiled_graph([(i, i + 1) for i in range(5)], cpu=[8] * 6, acc=[1] * 6, size=1e6)
    p = Problem.from_graph(g, paper_topology(4, memory=int(2.5e6)), objective="latency")
    assert memory_fill(p).tolist() == [ACC0, ACC0, ACC1, ACC1, ACC2, ACC2]


# ------------------------------------------------------------------------------- segments
def test_segments_split_a_cross_device_cycle():
    # acc0 holds {0, 2}, acc1 holds {1, 3}; 0 -> 3 and 1 -> 2: one piece per device would form a
    # cycle (acc0 -> acc1 -> acc0), so one device needs two calls
    g = profiled_graph([(0, 3), (1, 2)], cpu=[1] * 4, acc=[1] * 4, comm=0.1)
    p = Problem.from_graph(g, paper_topology(2), objective="latency", contiguous=False, max_subgraphs=2)
    sol = segments_from_devices(p, np.array([ACC0, ACC1, ACC0, ACC1]))
    ev = evaluate(p, sol)
    assert ev.feasible, ev.violations
    assert sol.num_stages == 3


def test_segments_fewest_pieces_through_the_cpu():
    # acc0: 0 and 2, with 1 on the CPU between them: two calls; 3 joins the second
    g = profiled_graph([(0, 1), (1, 2), (2, 3)], cpu=[1] * 4, acc=[1] * 4)
    p = Problem.from_graph(g, paper_topology(1), objective="latency", contiguous=False, max_subgraphs=2)
    pieces = split_pieces(p, np.array([ACC0, CPU, ACC0, ACC0]))
    assert pieces.piece_of.tolist() == [0, -1, 1, 1]
    assert pieces.counts(2).tolist() == [0, 2]


@pytest.mark.parametrize("seed", range(4))
def test_segments_valid_for_any_assignment(seed):
    rng = np.random.default_rng(seed)
    g = random_dag(300, seed=seed, density=0.6)
    p = Problem.from_graph(g, paper_topology(4), objective="latency", contiguous=False, max_subgraphs=64)
    dev = rng.integers(0, 5, g.num_nodes)
    sol = segments_from_devices(p, dev)
    assert (sol.node_device() == dev).all()
    stage_dev = np.array([s.device for s in sol.stages])
    acc = ~p.topology.is_cpu[stage_dev[sol.assignment]]
    unit = np.where(acc, sol.assignment, sol.num_stages + np.arange(g.num_nodes))
    assert not [u for u in nonconvex_units(g, sol.assignment) if not p.topology.is_cpu[stage_dev[u]]]
    assert quotient_order(g, np.unique(unit, return_inverse=True)[1].ravel(), len(np.unique(unit))) is not None
    assert "cycle" not in " ".join(evaluate(p, sol).violations)


@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_repair_gives_one_piece_per_device_and_keeps_most_work(objective):
    g = random_dag(400, seed=5)
    p = Problem.from_graph(g, paper_topology(4), objective=objective)
    blocks = np.minimum(np.arange(400) * 4 // 400, 3) + 1
    noisy = blocks.copy()
    noisy[np.random.default_rng(0).random(400) < 0.05] = ACC3
    fixed = repair(p, noisy)
    sol = Solution.from_devices(p, fixed, CERT) if objective == "throughput" else segments_from_devices(p, fixed)
    ev = evaluate(p, sol)
    assert ev.feasible, ev.violations
    assert (fixed == noisy).mean() > 0.9
    assert (repair(p, blocks) == blocks).all()  # already valid: unchanged


def test_contiguous_repair_respects_memory():
    g = profiled_graph([(i, i + 1) for i in range(11)], cpu=[8] * 12, acc=[1] * 12, size=1e6)
    p = Problem.from_graph(g, paper_topology(4, memory=int(3.5e6)), objective="throughput")
    dev = np.array([ACC0] * 6 + [ACC1] * 2 + [ACC0] * 4)  # acc0 over capacity and not convex
    fixed = contiguous_repair(p, dev)
    ev = evaluate(p, Solution.from_devices(p, fixed, CERT))
    assert ev.feasible, ev.violations


# ----------------------------------------------------------------------------- local search
@pytest.mark.parametrize("problem", [p for _, p in PROBLEMS], ids=IDS)
def test_local_search_never_worse_than_its_start(problem):
    starts = []
    for name in ("even", "single", "greedy", "metis"):
        try:
            ev = evaluate(problem, solvers.get(name).solve(problem, SolveOptions()))
        except InfeasibleError:
            continue
        if ev.feasible:
            starts.append(ev.objective)
    ls = solvers.get("local-search").solve(problem, LS)
    assert ls.certificate.objective <= min(starts) * (1 + 1e-12)


def test_local_search_improves_a_warm_start_and_reports_progress():
    g = layered_dag(6, 3, seed=4)
    p = Problem.from_graph(g, paper_topology(4), objective="throughput", contiguous=False)
    warm = Solution.from_devices(p, np.full(g.num_nodes, ACC0, np.int32), CERT)
    seen = []
    opts = SolveOptions(seed=1, warm_start=warm, passthrough={"max_evaluations": 400},
                        progress=lambda **kw: seen.append(kw))
    sol = solvers.get("local-search").solve(p, opts)
    assert sol.certificate.objective < evaluate(p, warm).objective / 2
    assert "warm start" in sol.certificate.message
    assert seen and all(set(kw) >= {"elapsed", "incumbent", "bound", "message"} for kw in seen)


def test_local_search_respects_the_time_limit():
    g = random_dag(1500, seed=1)
    p = Problem.from_graph(g, paper_topology(4), objective="latency", contiguous=False, max_subgraphs=2)
    res = solve(p, "local-search", SolveOptions(time_limit=3.0))
    assert res.wall_time < 3.0 + 3.0  # the start baselines plus one evaluation past the limit
    assert res.evaluation.feasible


def test_throughput_loads_match_evaluate_move_by_move():
    rng = np.random.default_rng(0)
    for g, mode in ((random_dag(150, seed=2), "inference"), (layered_dag(5, 3, training=True), "training")):
        for variant in ("max-load", "max-fw-plus-max-bw"):
            p = Problem.from_graph(g, paper_topology(4), objective="throughput", mode=mode, contiguous=False,
                                   variant=variant)
            model = ThroughputLoads(p, rng.integers(0, 5, g.num_nodes))
            for _ in range(40):
                model.move([int(rng.integers(g.num_nodes))], int(rng.integers(5)))
                ev = evaluate(p, Solution.from_devices(p, np.asarray(model.dev), CERT))
                assert model.key()[0] == pytest.approx(ev.objective, rel=1e-12)
                assert np.allclose(model.loads(), ev.load, rtol=1e-12)
                assert np.allclose([model.memory(d) for d in range(5)], ev.memory, rtol=1e-12)


# ------------------------------------------------------------------------------ determinism
@pytest.mark.parametrize("solver", BASELINES)
@pytest.mark.parametrize("name", ["random-lat-q3", "training-thr-1f1b", "random-thr-noncontig"])
def test_same_seed_same_answer(solver, name):
    problem = dict(PROBLEMS)[name]
    a = solvers.get(solver).solve(problem, options_for(solver))
    b = solvers.get(solver).solve(problem, options_for(solver))
    assert (a.assignment == b.assignment).all()
    assert a.stages == b.stages
    assert a.certificate.objective == b.certificate.objective


# --------------------------------------------------------------------------------- metis
def test_metis_keeps_colocation_classes_together():
    from planmap.solvers.heuristics.metis import metis_partition

    g = layered_dag(6, 4, seed=3, training=True)
    p = Problem.from_graph(g, paper_topology(4), objective="throughput", mode="training", contiguous=False)
    for dev in (metis_partition(p, seed=0), solvers.get("metis").solve(p, SolveOptions()).node_device()):
        for c in np.unique(g.colocation):
            assert len(set(dev[g.colocation == c].tolist())) == 1
    assert len(set(metis_partition(p, seed=0).tolist())) == 4


# -------------------------------------------------------------------------------- memory
def _memory_bound_chain(memory: float, n: int = 12):
    g = profiled_graph([(i, i + 1) for i in range(n - 1)], cpu=[8] * n, acc=[1] * n, comm=0.01, size=1e6)
    return g, paper_topology(4, cpus=0, memory=int(memory))


@pytest.mark.parametrize("objective", ["latency", "throughput"])
@pytest.mark.parametrize("solver", BASELINES)
def test_tight_memory_forces_splits(objective, solver):
    g, topo = _memory_bound_chain(4.5e6)  # 12 MB of operators, 4.5 MB per accelerator: >= 3 devices
    p = Problem.from_graph(g, topo, objective=objective, contiguous=objective == "throughput")
    res = solve(p, solver, options_for(solver))
    assert res.evaluation.feasible
    assert (res.evaluation.memory <= p.capacity).all()
    assert len(set(res.solution.node_device().tolist())) >= 3
    with pytest.raises(InfeasibleError):  # nothing fits on one device
        solve(p, "single")


def test_infeasible_memory_names_the_bytes():
    g, topo = _memory_bound_chain(0.9e6, n=6)  # 6 MB of operators, 4 x 0.9 MB of memory
    p = Problem.from_graph(g, topo, objective="latency")
    for solver in BASELINES:
        with pytest.raises(InfeasibleError, match=r"\d(\.\d+)? ?(B|KiB|MiB)\b") as e:
            solve(p, solver, options_for(solver))
        assert "memory" in str(e.value)


def test_infeasible_packing_reports_the_overflow():
    # three 6 MB operators, two 10 MB accelerators: the total fits, but no device holds two operators
    g = profiled_graph([(0, 1), (1, 2)], cpu=[8] * 3, acc=[1] * 3, size=6 * 2**20)
    p = Problem.from_graph(g, paper_topology(2, cpus=0, memory=10 * 2**20), objective="throughput")
    for solver in BASELINES:
        with pytest.raises(InfeasibleError) as e:
            solve(p, solver, options_for(solver))
        assert re.search(r"needs 1\dMiB of 10MiB", str(e.value)), str(e.value)


def test_latency_repair_dissolves_pieces_into_the_cpu():
    # CPU-only operators cut the accelerators' work into many stretches; with q = 1 each accelerator
    # keeps one, the rest runs on the (parallel) CPU, and the plan is valid
    g = random_dag(200, seed=6, unsupported=0.1)
    p = Problem.from_graph(g, paper_topology(4), objective="latency")
    rng = np.random.default_rng(1)
    dev = np.where(p.allowed[:, ACC0], rng.integers(ACC0, ACC3 + 1, g.num_nodes), CPU)
    fixed = repair(p, dev)
    ev = evaluate(p, segments_from_devices(p, fixed))
    assert ev.feasible, ev.violations
    assert (fixed != CPU).sum() > 0.2 * g.num_nodes

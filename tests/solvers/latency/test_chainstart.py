"""The articulation-chain start (solvers/latency/chainstart.py): on small graphs of parallel towers its routes
are feasible placements whose latency under ``evaluate`` is the DP's own number, it is never worse than the
contiguous split DP (also where tower prefixes run in side calls between CPU concats), it places a side head,
and it gives the same plan twice."""

from __future__ import annotations

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.solvers.latency.chainstart import _placements, chain_plan, chain_starts
from planmap.solvers.latency.splits import best_splits
from planmap.workloads.graphs import paper_topology, profiled_graph
from tests.solvers.latency.cases import problem
from tests.solvers.latency.test_towers import towers_edges, towers_instance

CASES = [(seed, n, q) for seed in range(8) for n, q in ((14, 2), (20, 2))] + [(s, 12, 1) for s in (0, 1, 2, 3)]


def _split_best(p) -> float:
    return min((ev.objective for ev in (evaluate(p, s) for s in best_splits(p)) if ev.feasible), default=np.inf)


@pytest.mark.parametrize("seed,n,q", CASES)
def test_routes_are_feasible_exact_and_beat_the_split_dp(seed, n, q):
    p = towers_instance(seed, n, q)
    plans = chain_plan(p)
    starts = chain_starts(p)
    assert bool(plans) == bool(starts)
    if not plans:
        return
    for value, lab in plans:  # the DP's number is evaluate's for a route without side nodes
        ev = evaluate(p, _placements(p, lab)[0])
        assert ev.feasible
        assert ev.objective == pytest.approx(value, rel=1e-9, abs=1e-12)
    assert all(evaluate(p, s).feasible for s in starts)
    assert evaluate(p, starts[0]).objective <= _split_best(p) + 1e-12


def slow_cpu_instance(seed: int):
    """Towers with a CPU 1,000 times slower than the accelerators, which hold 30% of the graph each: the best
    placements put tower prefixes in side calls between two CPU concats."""
    rng = np.random.default_rng(seed)
    edges = towers_edges(rng, 16)
    n = max(b for _, b in edges) + 1
    acc = rng.lognormal(0, 0.5, n)
    g = profiled_graph(edges, acc * 1000, acc, np.full(n, 0.3), size=np.full(n, 1e6),
                       out_bytes=np.full(n, 1_000_000, np.int64))
    return problem(g, paper_topology(2, 1, memory=float(g.state_bytes.sum()) * 0.3), 2)


@pytest.mark.parametrize("seed", [1, 4, 5, 6])
def test_side_calls_between_cpu_concats(seed):
    p = slow_cpu_instance(seed)
    value, lab = chain_plan(p)[0]
    ev = evaluate(p, _placements(p, lab)[0])
    assert ev.feasible and ev.objective == pytest.approx(value, rel=1e-9)
    assert ev.objective <= _split_best(p) + 1e-9


def test_side_head_goes_with_its_producer_or_the_cpu():
    # 0 -> {1, 2} -> 3 -> {6, 7} -> 8, and a side head 4 -> 5 hanging off the articulation node 3
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (4, 5), (3, 6), (3, 7), (6, 8), (7, 8)]
    n = 9
    rng = np.random.default_rng(3)
    acc = rng.lognormal(0, 0.3, n)
    g = profiled_graph(edges, acc * 8, acc, np.full(n, 0.2), size=np.full(n, 1e6),
                       out_bytes=np.full(n, 2_000_000, np.int64))
    p = problem(g, paper_topology(3, 1, memory=float(g.state_bytes.sum()) * 0.7), 2)
    plans = chain_plan(p)
    assert plans
    for _, lab in plans:
        assert (lab[[4, 5]] != -2).all()  # placed by the DP, not left to the caller
        assert lab[4] == lab[5] and lab[4] in (lab[3], -1)
    assert chain_starts(p)


def test_same_plan_twice():
    p = towers_instance(5, 20, 2)
    a, b = chain_starts(p), chain_starts(p)
    assert a and len(a) == len(b)
    assert all(np.array_equal(x.assignment, y.assignment) and x.stages == y.stages for x, y in zip(a, b, strict=True))


def test_wide_module_stays_within_the_combination_cap():
    # 0 -> 14 parallel single-node towers -> 15 -> 16: 3^14 combinations of whole-tower options, capped
    edges = [(0, v) for v in range(1, 15)] + [(v, 15) for v in range(1, 15)] + [(15, 16)]
    n = 17
    g = profiled_graph(edges, np.full(n, 5.0), np.ones(n), np.full(n, 0.2), size=np.full(n, 1e6),
                       out_bytes=np.full(n, 1_000_000, np.int64))
    p = problem(g, paper_topology(3, 1, memory=float(g.state_bytes.sum())), 2)
    starts = chain_starts(p)
    assert starts and evaluate(p, starts[0]).feasible


@pytest.mark.parametrize("seed", [4, 7])
def test_side_calls_after_a_cpu_prefix(seed):
    """A tower's first node on the CPU, its next nodes in the side call or a call of their own (which then
    receives that node's value, not the segment's input), the rest on the CPU: exact under evaluate and faster
    than side calls that start from the segment's input only."""
    p = slow_cpu_instance(seed)
    value, lab = chain_plan(p)[0]
    ev = evaluate(p, _placements(p, lab)[0])
    assert ev.feasible and ev.objective == pytest.approx(value, rel=1e-9)
    assert value < chain_plan(p, cpu_prefix=0)[0][0] * (1 - 1e-6)

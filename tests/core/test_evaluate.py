"""`evaluate` against schedules computed by hand on small graphs (chains, diamonds, fork-join).

Cluster: planmap.workloads.graphs.paper_topology — device 0 is the CPU, 1.. are accelerators that exchange
data only through host memory; transfer times are the graph's measured per-value times (c_u).
"""

from __future__ import annotations

import numpy as np
import pytest

from planmap.evaluate import evaluate, nonconvex_units
from planmap.problem import Certificate, Problem, Solution, Stage
from planmap.workloads.graphs import layered_dag, paper_topology, profiled_graph

CERT = Certificate("heuristic", "hand")
CPU, ACC0, ACC1, ACC2 = 0, 1, 2, 3


def sol(assignment, devices, **kw):
    return Solution(np.array(assignment), tuple(Stage((d,)) if isinstance(d, int) else Stage(d) for d in devices),
                    CERT, **kw)


@pytest.fixture
def chain():
    return profiled_graph([(0, 1), (1, 2)], cpu=[10, 10, 10], acc=[1, 2, 3], comm=0.5)


@pytest.fixture
def diamond():
    return profiled_graph([(0, 1), (0, 2), (1, 3), (2, 3)], cpu=[5, 5, 5, 5], acc=[1, 2, 3, 1],
                          comm=[0.5, 0.25, 0.25, 0.0])


def latency(g, s, **kw):
    p = Problem.from_graph(g, paper_topology(3), objective="latency", **kw)
    return evaluate(p, s)


@pytest.mark.parametrize("assignment,devices,expected", [
    ([0, 0, 0], [ACC0], 6.0),                   # one call: 1 + 2 + 3
    ([0, 0, 1], [ACC0, ACC1], 7.0),             # (1 + 2 + send .5) then (recv .5 + 3)
    ([0, 1, 2], [ACC0, CPU, ACC1], 15.0),       # 1.5 on acc0, CPU 10 (no transfer cost), recv .5 + 3
    ([0, 0, 0], [CPU], 30.0),                   # CPU only: the chain's sum
])
def test_chain_latency(chain, assignment, devices, expected):
    ev = latency(chain, sol(assignment, devices))
    assert ev.feasible, ev.violations
    assert ev.objective == pytest.approx(expected)


def test_chain_stage_times(chain):
    ev = latency(chain, sol([0, 1, 2], [ACC0, CPU, ACC1]))
    np.testing.assert_allclose(ev.stage_start, [0.0, 1.5, 11.5])
    np.testing.assert_allclose(ev.stage_finish, [1.5, 11.5, 15.0])


def test_diamond_two_subgraphs_on_one_accelerator(diamond):
    # S0={0,1} acc0: 1+2, send v0 (to acc1) .5, send v1 (to S2: same host-memory device) .25 -> 3.75
    # S1={2} acc1: recv v0 .5 + 3 + send v2 .25, starts at 3.75 -> 7.5
    # S2={3} acc0: starts at max(3.75, 7.5), recv v1 .25 + v2 .25 + 1 -> 9.0
    s = sol([0, 0, 1, 2], [ACC0, ACC1, ACC0])
    ev = latency(diamond, s, max_subgraphs=2, contiguous=False)
    assert ev.feasible, ev.violations
    assert ev.objective == pytest.approx(9.0)
    ev1 = latency(diamond, s)  # q = 1: two subgraphs on acc0 are not allowed
    assert not ev1.feasible and "subgraphs" in ev1.violations[0]


def test_diamond_cpu_branches_run_in_parallel(diamond):
    # S0={0} acc0: 1 + send .5 = 1.5; CPU 1 and 2 in parallel: 6.5; S1={3} acc0: 6.5 + .25 + .25 + 1 = 8.0
    ev = latency(diamond, sol([0, 1, 1, 2], [ACC0, CPU, ACC0]), max_subgraphs=2, contiguous=False)
    assert ev.objective == pytest.approx(8.0)
    assert latency(diamond, sol([0, 0, 0, 0], [CPU])).objective == pytest.approx(15.0)


def test_nonconvex_subgraph_is_a_violation(diamond):
    ev = latency(diamond, sol([0, 0, 1, 0], [ACC0, ACC1]))
    assert not ev.feasible
    assert any("not contiguous" in v for v in ev.violations)
    assert nonconvex_units(diamond, np.array([0, 0, 1, 0])) == [0]


def test_cycle_between_subgraphs_is_a_violation():
    # a->b, c->d with S0={a,d}, S1={b,c}: both convex, but each waits for the other
    g = profiled_graph([(0, 1), (2, 3)], cpu=[1] * 4, acc=[1] * 4)
    ev = latency(g, sol([0, 1, 1, 0], [ACC0, ACC1]))
    assert not ev.feasible and any("cycle" in v for v in ev.violations)


@pytest.fixture
def fork_join():
    return profiled_graph([(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)], cpu=[10] * 5, acc=[1, 2, 2, 2, 1],
                          comm=[0.5, 0.1, 0.1, 0.1, 0.0])


def throughput(g, s, **kw):
    p = Problem.from_graph(g, paper_topology(3), objective="throughput", **kw)
    return evaluate(p, s)


def test_fork_join_throughput_loads(fork_join):
    # acc0 {0,1,4}: 1+2+1, sends v0 once (.5), receives v2, v3 (.1 each) -> 4.7
    # acc1 {2}: 2 + recv v0 .5 + send v2 .1 -> 2.6; acc2 {3} likewise
    ev = throughput(fork_join, sol([0, 0, 1, 2, 0], [ACC0, ACC1, ACC2]), contiguous=False)
    assert ev.feasible, ev.violations
    np.testing.assert_allclose(ev.load, [0.0, 4.7, 2.6, 2.6])
    assert ev.objective == pytest.approx(4.7)
    ev_c = throughput(fork_join, sol([0, 0, 1, 2, 0], [ACC0, ACC1, ACC2]), contiguous=True)
    assert not ev_c.feasible


def test_cpu_pays_no_transfers_in_throughput(fork_join):
    ev = throughput(fork_join, sol([0, 1, 1, 1, 1], [CPU, ACC0]))
    # CPU: node 0 = 10, no comm; acc0: 2+2+2+1 + recv v0 .5 = 7.5
    np.testing.assert_allclose(ev.load[:2], [10.0, 7.5])
    assert ev.objective == pytest.approx(10.0)


def test_pipeline_step_time(chain):
    p = Problem.from_graph(chain, paper_topology(3), objective="throughput", microbatches=4)
    ev = evaluate(p, sol([0, 1, 2], [ACC0, ACC1, ACC2]))
    # loads: acc0 1+.5, acc1 .5+2+.5, acc2 .5+3 -> bottleneck 3.5; GPipe step (4 + 3 - 1) x 3.5
    assert ev.objective == pytest.approx(3.5)
    assert ev.step_time == pytest.approx(6 * 3.5)
    assert ev.stage_order == (0, 1, 2)


def test_training_variants_and_colocation():
    g = layered_dag(3, 2, training=True, seed=1)
    fwd = ~g.backward
    # split forward nodes by topological halves; backward nodes follow their colocation partner
    n = g.num_nodes
    half = np.flatnonzero(fwd)[len(np.flatnonzero(fwd)) // 2]
    dev_of_class = {}
    assign = np.zeros(n, int)
    for i in np.flatnonzero(fwd):
        assign[i] = 0 if i < half else 1
        dev_of_class[g.colocation[i]] = assign[i]
    for i in np.flatnonzero(~fwd):
        assign[i] = dev_of_class[g.colocation[i]]
    s = sol(assign, [ACC0, ACC1])
    ml = Problem.from_graph(g, paper_topology(2), objective="throughput", mode="training")
    fb = Problem.from_graph(g, paper_topology(2), objective="throughput", mode="training",
                            variant="max-fw-plus-max-bw")
    e1, e2 = evaluate(ml, s), evaluate(fb, s)
    assert e1.feasible and e2.feasible, (e1.violations, e2.violations)
    assert e1.objective == pytest.approx((e1.fw_load + e1.bw_load).max())
    assert e2.objective == pytest.approx(e2.fw_load.max() + e2.bw_load.max())
    assert e2.objective >= e1.objective - 1e-12
    bad = assign.copy()
    bad[np.flatnonzero(~fwd)[0]] ^= 1  # split one forward/backward pair
    assert any("colocation" in v for v in evaluate(ml, sol(bad, [ACC0, ACC1])).violations)


def test_memory_violation_names_device():
    g = profiled_graph([(0, 1)], cpu=[1, 1], acc=[1, 1], size=[3 * 2**30, 3 * 2**30])
    p = Problem.from_graph(g, paper_topology(2, memory=4 * 2**30), objective="latency")
    ev = evaluate(p, sol([0, 0], [ACC0]))
    assert not ev.feasible and "host0/acc0 needs 6GiB of 4GiB" in ev.violations[0]
    assert evaluate(p, sol([0, 1], [ACC0, ACC1])).feasible
    np.testing.assert_allclose(evaluate(p, sol([0, 1], [ACC0, ACC1])).memory, [0, 3 * 2**30, 3 * 2**30])


def test_unsupported_op_is_a_violation():
    g = profiled_graph([(0, 1)], cpu=[1, 1], acc=[1, np.nan])
    p = Problem.from_graph(g, paper_topology(2), objective="latency")
    assert not evaluate(p, sol([0, 0], [ACC0])).feasible
    assert evaluate(p, sol([0, 1], [ACC0, CPU])).feasible

"""Call-level moves (solvers/latency/moves.py): they beat the placement every earlier method stopped at
on GNMT's layer graph, stay feasible under ``evaluate``, never return anything slower, and give the
same plan for the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.problem import Problem
from planmap.solvers.latency.moves import calls_of, improve
from planmap.workloads.graphs import paper_topology, profiled_graph
from planmap.workloads.nets import gnmt, net_topology
from tests.solvers.latency.cases import placement, problem


def gnmt_problem() -> Problem:
    g = gnmt()
    return Problem.from_graph(g, net_topology(g, 4, fill=0.7), objective="latency", max_subgraphs=2, contiguous=False)


@pytest.mark.slow
def test_moves_beat_the_gnmt_incumbent():
    """The IP's (and the polished split's) 84.32 ms: the encoder on one call after the embedding. The
    moves put the embedding and one encoder chain in calls of their own (hand placement: 82.16 ms)."""
    p = gnmt_problem()
    start = placement([(0, [50]), (1, [*range(0, 33)]), (2, [*range(33, 50), 51]), (3, [*range(52, 99)])], p.num_nodes)
    assert round(evaluate(p, start).objective * 1e3, 2) == 84.32
    sol, found = improve(p, start, budget=5000)
    ev = evaluate(p, sol)
    assert found >= 1 and ev.feasible
    assert ev.objective <= 0.08216


def fork_graph():
    """A shared producer feeding two heavy chains that join: on two single-call accelerators the best
    placement runs the chains in parallel, which needs the producer on the host."""
    edges = [(0, 1), (1, 2), (0, 3), (3, 4), (2, 5), (4, 5)]
    cpu = np.array([0.2, 40, 40, 40, 40, 1.0]) * 1e-3
    acc = np.array([0.1, 4, 4, 4, 4, 0.5]) * 1e-3
    return profiled_graph(edges, cpu, acc, np.full(6, 0.3e-3), name="fork")


def test_moves_split_a_call_into_parallel_branches():
    p = problem(fork_graph(), paper_topology(2, 1, memory=1 << 34), q=1)
    one_call = placement([(1, list(range(6)))], p.num_nodes)
    before = evaluate(p, one_call).objective
    sol, found = improve(p, one_call)
    ev = evaluate(p, sol)
    assert found >= 1 and ev.feasible and ev.objective < before * 0.8
    # both chains run on accelerators, in different calls
    dev = sol.node_device()
    assert dev[1] == dev[2] and dev[3] == dev[4] and dev[1] != dev[3]
    assert not p.topology.is_cpu[dev[1]] and not p.topology.is_cpu[dev[3]]
    again, _ = improve(p, one_call)  # deterministic: the same plan
    assert np.array_equal(again.assignment, sol.assignment)
    assert [s.devices for s in again.stages] == [s.devices for s in sol.stages]


def test_moves_keep_an_optimal_or_infeasible_start():
    p = problem(fork_graph(), paper_topology(2, 1, memory=1 << 34), q=1)
    sol, _ = improve(p, placement([(1, list(range(6)))], p.num_nodes))
    best, found = improve(p, sol)
    assert found == 0 and best is sol  # a local optimum is returned as it is
    assert len(calls_of(p, sol)) == sol.compact().num_stages
    two_calls = placement([(1, [0, 1, 2]), (1, [3, 4, 5])], p.num_nodes)  # two calls on one accelerator, q = 1
    assert not evaluate(p, two_calls).feasible
    same, found = improve(p, two_calls)
    assert found == 0 and same is two_calls  # nothing to start from: returned untouched

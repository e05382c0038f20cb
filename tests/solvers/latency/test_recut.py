"""Recutting the longest calls (solvers/latency/recut.py): a slot freed by merging a small call, the longest
call cut into a diamond on the free slots; feasible under ``evaluate``, never slower than its start, the
same plan for the same inputs."""

from __future__ import annotations

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Problem
from planmap.solvers.latency.moves import calls_of, improve
from planmap.solvers.latency.recut import recut
from planmap.workloads.graphs import paper_topology
from planmap.workloads.nets import gnmt, net_topology
from tests.solvers.latency.cases import bytes_graph, placement, problem
from tests.solvers.latency.test_anneal import grid_problem


def test_recut_frees_a_slot_and_cuts_the_grid_into_a_wavefront():
    """The grid in one call and the sink alone on the other accelerator: one free slot per device, two
    short of the wavefront's three new calls. The call moves stop at one call of everything; the recutting
    merges the sink into the grid's call (both slots of the second device free) and cuts it there."""
    p = grid_problem()
    wavefront = evaluate(p, placement([(1, [0, 1, 2]), (2, [5, 6]), (1, [3, 4]), (2, [7, 8, 9])], p.num_nodes))
    start = placement([(1, list(range(9))), (2, [9])], p.num_nodes)
    stuck, _ = improve(p, start)
    assert evaluate(p, stuck).objective > wavefront.objective * 1.05
    sol, found = recut(p, start, budget=2000)
    ev = evaluate(p, sol)
    assert found >= 1 and ev.feasible
    assert ev.objective <= wavefront.objective * (1 + 1e-9)
    assert sorted(len(nodes) for _, nodes in calls_of(p, sol)) == [2, 2, 3, 3]  # four calls, the sink with the tail
    again, _ = recut(p, start, budget=2000)  # deterministic: the same plan
    assert np.array_equal(again.assignment, sol.assignment)
    assert [s.devices for s in again.stages] == [s.devices for s in sol.stages]


def gnmt_problem() -> Problem:
    g = gnmt(steps=4, encoder_layers=3)
    return Problem.from_graph(g, net_topology(g, 4, fill=0.7), objective="latency", max_subgraphs=2, contiguous=False)


# the call moves' local optimum on gnmt_problem(): the encoder's grid in one call
GNMT_MOVES_OPTIMUM = [(1, [0]), (2, [1, 2, 3, 4]), (0, [22]), (1, [5, 6, 7, 8]),
                      (2, [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27]),
                      (4, list(range(28, 47)))]


def test_recut_leaves_the_moves_local_optimum_on_a_gnmt_layer_graph():
    """GNMT with 4 steps: the call moves' local optimum keeps the encoder's grid in one call; the diamond
    (the grid's first cells; then the first row's rest next to the other rows' first cells; then the rest)
    is faster."""
    p = gnmt_problem()
    start = placement(GNMT_MOVES_OPTIMUM, p.num_nodes)
    before = evaluate(p, start)
    assert before.feasible
    _, moved = improve(p, start)
    assert moved == 0  # a local optimum of the call moves
    sol, found = recut(p, start, budget=1000)
    ev = evaluate(p, sol)
    assert found >= 1 and ev.feasible
    assert ev.objective < before.objective * 0.99
    grid = set(range(9, 21))
    assert sum(1 for _, nodes in calls_of(p, sol) if grid & set(nodes.tolist())) >= 3


def test_recut_is_feasible_never_worse_and_keeps_what_it_cannot_use():
    for seed in range(3):
        p = problem(bytes_graph(14, seed), paper_topology(3, 1, memory=1 << 34), q=2)
        start = placement([(1, list(range(p.num_nodes)))], p.num_nodes)  # everything in one call
        before = evaluate(p, start).objective
        sol, found = recut(p, start, budget=400)
        ev = evaluate(p, sol)
        assert ev.feasible and ev.objective <= before * (1 + 1e-12)
        assert (found == 0) == (sol is start)
    p = grid_problem()
    start = placement([(1, list(range(9))), (2, [9])], p.num_nodes)
    assert recut(p, start, budget=0) == (start, 0)
    three = placement([(1, [0, 1, 2]), (1, [3, 4]), (1, [5, 6, 7, 8, 9])], p.num_nodes)  # q = 2
    assert not evaluate(p, three).feasible
    assert recut(p, three, budget=100) == (three, 0)

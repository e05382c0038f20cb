"""Annealing over calls (solvers/latency/anneal.py): it leaves the local optimum the call moves stop in
(a grid of cells cut into a wavefront of four calls), stays feasible under ``evaluate``, never returns
anything slower than its start, and gives the same plan for the same inputs."""

from __future__ import annotations

import numpy as np

from planmap.evaluate import evaluate
from planmap.solvers.latency.anneal import anneal
from planmap.solvers.latency.moves import calls_of, improve
from planmap.workloads.graphs import paper_topology, profiled_graph
from tests.solvers.latency.cases import bytes_graph, placement, problem


def grid_problem():
    """A source, a 2 x 4 grid of cells (row 1: 1-4, row 2: 5-8; each cell feeds the next in its row and
    the cell below it) and a sink, on two accelerators with two calls each and a slow CPU."""
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 8), (1, 5), (2, 6), (3, 7), (4, 8), (8, 9), (4, 9)]
    cpu = np.array([1, 30, 30, 30, 30, 30, 30, 30, 30, 1.0]) * 1e-3
    acc = np.array([0.1, 4, 4, 4, 4, 4, 4, 4, 4, 0.1]) * 1e-3
    g = profiled_graph(edges, cpu, acc, 0.6e-3, name="grid")
    return problem(g, paper_topology(2, 1, memory=1 << 34), q=2)


def test_annealing_finds_the_wavefront_the_moves_miss():
    """Rows in calls of their own (every slot used) and the moves' local optimum (one call of all) are
    slower than the wavefront: row 1's first half, then row 1's rest next to row 2's first half, then
    row 2's rest. Each single step towards it is slower first, so the moves stop; annealing gets there."""
    p = grid_problem()
    wavefront = placement([(1, [0, 1, 2]), (2, [5, 6]), (1, [3, 4]), (2, [7, 8, 9])], p.num_nodes)
    best = evaluate(p, wavefront).objective
    rows = placement([(1, [0, 1, 2, 3, 4]), (2, [5, 6]), (2, [7, 8]), (1, [9])], p.num_nodes)
    assert all(slots == 2 for slots in np.bincount([d for d, _ in calls_of(p, rows)])[1:])
    stuck, _ = improve(p, rows)
    assert evaluate(p, stuck).objective > best * 1.05
    sol, found = anneal(p, rows, budget=1000)
    ev = evaluate(p, sol)
    assert found >= 1 and ev.feasible
    assert ev.objective <= best * (1 + 1e-9)
    again, _ = anneal(p, rows, budget=1000)  # deterministic: the same plan
    assert np.array_equal(again.assignment, sol.assignment)
    assert [s.devices for s in again.stages] == [s.devices for s in sol.stages]


def test_annealing_is_feasible_and_never_worse():
    for seed in range(3):
        p = problem(bytes_graph(14, seed), paper_topology(3, 1, memory=1 << 34), q=2)
        start = placement([(0, list(range(p.num_nodes)))], p.num_nodes)  # everything on the CPU
        before = evaluate(p, start).objective
        sol, found = anneal(p, start, budget=400, seed=seed)
        ev = evaluate(p, sol)
        assert ev.feasible and ev.objective <= before * (1 + 1e-12)
        assert (found == 0) == (sol is start)


def test_annealing_keeps_an_infeasible_start():
    p = grid_problem()
    three = placement([(1, [0, 1, 2]), (1, [3, 4]), (1, [5, 6, 7, 8, 9])], p.num_nodes)  # q = 2
    assert not evaluate(p, three).feasible
    same, found = anneal(p, three, budget=100)
    assert found == 0 and same is three

"""The graph's memory model: Tarnawski et al.'s node sizes versus planmap's working sets.

A paper-style graph (the Tarnawski import) where each node's ``size`` is its whole footprint: two
nodes per accelerator fit under ``node-sizes``, but adding the working set of their large tensors
(``working-set``) does not, so the two models disagree on the same placement, and every solver
follows the model the graph declares.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from planmap.errors import InfeasibleError
from planmap.evaluate import evaluate
from planmap.frontend import profiled
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Stage, Status
from planmap.solvers import get
from planmap.vocabulary import MemoryModel
from planmap.workloads.graphs import paper_topology

MB = 2**20
PAPER = {  # a chain of four 100 MiB nodes whose outputs are 300 MiB tensors
    "maxSizePerFPGA": 250 * MB, "maxFPGAs": 2, "maxCPUs": 0,
    "nodes": [{"id": i, "cpuLatency": 10.0, "fpgaLatency": 1.0 + i, "size": 100 * MB, "isBackwardNode": 0}
              for i in range(4)],
    "edges": [{"sourceId": i, "destId": i + 1, "cost": 0.5, "size": 300 * MB} for i in range(3)],
}


def graphs():
    paper = profiled.loads(json.dumps(PAPER), name="paper")
    doc = profiled.from_graph(paper).model_copy(update={"memory_model": MemoryModel.WORKING_SET})
    return paper, profiled.to_graph(doc)


def problem(g, objective="throughput"):
    return Problem.from_graph(g, paper_topology(2, cpus=0, memory=250 * MB), objective=objective)


def two_per_accelerator(p: Problem) -> Solution:
    return Solution(np.array([0, 0, 1, 1]), (Stage((0,)), Stage((1,))), Certificate(Status.HEURISTIC, "hand"))


def test_the_import_declares_the_paper_semantics_and_a_round_trip_keeps_it():
    paper, ours = graphs()
    assert paper.memory_model is MemoryModel.NODE_SIZES and ours.memory_model is MemoryModel.WORKING_SET
    again = profiled.loads(profiled.dumps(paper))
    assert again.memory_model is MemoryModel.NODE_SIZES
    assert '"memoryModel": "node-sizes"' in profiled.dumps(paper)
    assert "memoryModel" not in profiled.dumps(ours)  # the default is omitted


@pytest.mark.parametrize("objective", ["throughput", "latency"])
def test_the_two_models_disagree_on_the_same_placement(objective):
    paper, ours = graphs()
    ev_paper = evaluate(problem(paper, objective), two_per_accelerator(problem(paper, objective)))
    ev_ours = evaluate(problem(ours, objective), two_per_accelerator(problem(ours, objective)))
    assert ev_paper.feasible and list(ev_paper.memory) == [200 * MB, 200 * MB]
    assert not ev_ours.feasible and ev_ours.memory.min() > 250 * MB
    assert ev_paper.objective == pytest.approx(ev_ours.objective)  # times do not depend on the memory model


@pytest.mark.parametrize("solver,objective", [("dp", "throughput"), ("ip", "throughput"), ("ip", "latency"),
                                              ("greedy", "latency"), ("local-search", "throughput")])
def test_solvers_follow_the_declared_model(solver, objective):
    paper, ours = graphs()
    p = problem(paper, objective)
    sol = get(solver).solve(p, SolveOptions(time_limit=20))
    ev = evaluate(p, sol)
    assert ev.feasible and ev.memory.max() <= 250 * MB
    strict = problem(ours, objective)  # one node and its tensors already exceed an accelerator
    try:
        sol = get(solver).solve(strict, SolveOptions(time_limit=20))
    except InfeasibleError:
        return
    assert not evaluate(strict, sol).feasible  # a heuristic may answer, but not with a plan that fits

"""The cut-node block DP (solvers/latency/blocks.py): its bound never passes the optimum of small residual
and branchy graphs (exhaustive, under ``evaluate``), it closes a gap the path bounds leave, and its
labelling is a placement ``evaluate`` accepts."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.evaluate import evaluate  # noqa: E402
from planmap.solvers.latency.blocks import block_plan, cut_nodes  # noqa: E402
from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.solvers.latency.start import block_start  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import optimum, problem  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402
from tests.solvers.latency.test_intervals import RESIDUAL  # noqa: E402


def _plan(p):
    dt = prepare(p, bounds=False)
    own = _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes)
    plan = block_plan(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val, dt.pair_cons,
                      dt.recv, dt.send, own, dt.working_set, dt.capacity)
    return plan, dt.time_scale


def test_cut_nodes_are_the_nodes_every_path_passes():
    two_blocks = np.array(RESIDUAL["two-blocks"]).T
    assert cut_nodes(6, *two_blocks) == [0, 2, 4, 5]
    # two sources (0, 1) and two sinks (4, 5): only the node between them
    assert cut_nodes(6, [0, 1, 2, 3, 3], [2, 2, 3, 4, 5]) == [2, 3]
    assert cut_nodes(4, [0, 0, 1, 2], [1, 2, 3, 3]) == [0, 3]  # a diamond: its ends


CHAIN = [(0, 1), (1, 2), (2, 3), (0, 3), (3, 4), (4, 5), (3, 5), (5, 6)]  # two residual blocks and a tail


@pytest.mark.parametrize("shape,seed,q", [("block", 0, 2), ("block", 1, 1), ("two-blocks", 3, 1), ("projection", 4, 2),
                                          ("projection", 5, 1), ("chain", 6, 1), ("diamond", 7, 1),
                                          ("nested", 9, 1)])
def test_block_bound_never_passes_the_optimum(shape, seed, q):
    edges = CHAIN if shape == "chain" else RESIDUAL.get(shape, shape)
    p = fork_join_instance(edges, seed, q)
    plan, unit = _plan(p)
    assert plan is not None
    opt = optimum(p)
    assert plan.bound * unit <= opt * (1 + 1e-9)
    assert plan.bound * unit >= 0.5 * opt  # and says something


@pytest.mark.parametrize("seed,q", [(0, 1), (1, 2), (2, 1), (3, 2), (5, 1)])
def test_block_bound_never_passes_the_optimum_of_random_graphs(seed, q):
    """Random DAGs (link-dependent charges, CPU delays across hosts, unsupported ops, colocation, pins,
    launch overheads): their cut nodes are the backbone's."""
    p = any_instance(seed, 5, q)
    plan, unit = _plan(p)
    if plan is None:
        pytest.skip("no cut node")
    assert plan.bound * unit <= optimum(p) * (1 + 1e-9)


def test_block_bound_closes_the_gap_of_a_residual_block():
    """The instance of test_intervals: the cheapest cut is inside the block, where the shortcut's value
    would cross too. The path bounds reach 1.3 s; one labelling per block sees the optimum, 1.54 s."""
    g = profiled_graph(RESIDUAL["block"], [1.0] * 5, [0.1] * 5, [0.5, 0.02, 0.02, 0.5, 0.0], size=100_000)
    p = problem(g, paper_topology(2, 1, memory=350_000), q=1)
    opt = optimum(p)
    dt = prepare(p)
    sweep = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale
    assert sweep <= 1.3 + 1e-9
    assert dt.lower * dt.time_scale == pytest.approx(opt, rel=1e-9)
    sol = block_start(p)
    ev = evaluate(p, sol)
    assert ev.feasible and ev.objective == pytest.approx(opt, rel=1e-9)


def test_graphs_without_small_blocks_are_skipped():
    p = fork_join_instance("three-way", 0, 1)  # node 0 and node 4 are cut nodes, three nodes between
    assert _plan(p)[0] is not None
    wide = [(0, k) for k in range(1, 8)] + [(k, 8) for k in range(1, 8)]  # seven parallel nodes
    g = profiled_graph(wide, [1.0] * 9, [0.1] * 9, 0.1, size=1)
    assert _plan(problem(g, paper_topology(2, 1), q=1))[0] is None

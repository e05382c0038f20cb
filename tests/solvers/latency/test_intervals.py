"""A call holds every node between a producer and a consumer it runs (solvers/latency/intervals.py):
the time bounds with that added still hold on every feasible placement of small residual graphs
(exhaustive, under ``evaluate``), and a path over an identity shortcut no longer skips the block."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.solvers.latency.data import prepare  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import optimum, problem  # noqa: E402
from tests.solvers.latency.test_cuts import (  # noqa: E402
    assert_bounds_hold_on_every_feasible_placement,
    fork_join_instance,
)

RESIDUAL = {  # residual blocks: an identity shortcut over a branch, and two blocks in a row
    "block": [(0, 1), (1, 2), (2, 3), (0, 3), (3, 4)],
    "two-blocks": [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (2, 4), (4, 5)],
    "projection": [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)],
}


@pytest.mark.parametrize("shape,seed,q", [("block", 0, 2), ("two-blocks", 2, 1),
                                          ("two-blocks", 3, 1), ("projection", 4, 2)])
def test_bounds_hold_on_every_feasible_placement_of_residual_graphs(shape, seed, q):
    assert_bounds_hold_on_every_feasible_placement(fork_join_instance(RESIDUAL[shape], seed, q))


def test_a_path_over_an_identity_shortcut_holds_the_block():
    """0 -> 1 -> 2 -> 3 with the shortcut 0 -> 3, then 4; three nodes fit a call, transfers of the block's
    input and output (0.5 s) are dearer than compute (0.1 s a node), the branch's values cheap (0.02 s).
    The cheapest cut is inside the block (1 | 2), but then 0's value crosses too (to 3). Following the
    path 0 -> 3 -> 4, the sweep used to hold only 0, 3 and 4 in the call, so node 1's bound paid the cheap
    cut alone (0.54 s); 0 and 3 in one call hold 1 and 2 as well, which do not fit."""
    g = profiled_graph(RESIDUAL["block"], [1.0] * 5, [0.1] * 5, [0.5, 0.02, 0.02, 0.5, 0.0], size=100_000)
    p = problem(g, paper_topology(2, 1, memory=350_000), q=1)
    dt = prepare(p)
    bound = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale
    assert bound >= 1.3 - 1e-9
    assert bound <= optimum(p) * (1 + 1e-9)

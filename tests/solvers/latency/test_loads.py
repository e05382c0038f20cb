"""The device-contention bound (solvers/latency/loads.py): never above the optimum of small graphs
(exhaustive under ``evaluate``), with the CPU taken from the nodes that cannot use it under the
optimum's latency, and above every path bound where branches compete for too few accelerators."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.solvers.latency.cuts import time_bounds  # noqa: E402
from planmap.solvers.latency.data import prepare  # noqa: E402
from planmap.solvers.latency.loads import contention_bound  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import optimum, problem  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402


def _bound(p, horizon: float) -> float:
    """The contention bound at the horizon (presolve removes the devices that cannot beat it)."""
    dt = prepare(p, horizon, probe_seconds=0)
    return contention_bound(dt.t, dt.allowed, p.topology.is_cpu, dt.bounds) * dt.time_scale


@pytest.mark.parametrize("seed,n,q", [(0, 5, 1), (5, 5, 1), (11, 4, 2)])
def test_contention_never_passes_the_optimum(seed, n, q):
    p = any_instance(seed, n, q)
    opt = optimum(p)
    assert math.isfinite(opt)
    assert _bound(p, opt) <= opt * (1 + 1e-9)
    dt = prepare(p, opt * 1.5)  # the probing lower bound, refuting with this bound too
    assert dt.lower * dt.time_scale <= opt * (1 + 1e-7)


@pytest.mark.parametrize("shape,seed,q", [("diamond", 0, 1), ("three-way", 1, 1)])
def test_contention_never_passes_the_optimum_of_branchy_graphs(shape, seed, q):
    p = fork_join_instance(shape, seed, q)
    opt = optimum(p)
    assert _bound(p, opt) <= opt * (1 + 1e-9)


def test_contention_sees_four_branches_share_two_accelerators():
    """A fork of four heavy independent nodes on two accelerators, a CPU 100 times slower: a path
    bound sees one branch (0.1 + 1 + 0.1 s plus transfers); two of the branches share a device, so
    the latency is at least 0.1 + 2 + 0.1 s. The bound says so and stays below the optimum."""
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 5), (2, 5), (3, 5), (4, 5)]
    acc = [0.1, 1.0, 1.0, 1.0, 1.0, 0.1]
    g = profiled_graph(edges, [100 * a for a in acc], acc, 0.001, size=1)
    p = problem(g, paper_topology(2, 1), q=1)
    opt = optimum(p)
    dt = prepare(p, opt, probe_seconds=0)
    path = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale
    load = contention_bound(dt.t, dt.allowed, p.topology.is_cpu, dt.bounds) * dt.time_scale
    assert path < 1.3
    assert load >= 2.2 - 1e-9
    assert load <= opt * (1 + 1e-9)
    # prepare takes it, or more: the last-call DP (lastcall.py) sees the two calls run one after the other
    assert load * (1 - 1e-9) <= dt.lower * dt.time_scale <= opt * (1 + 1e-9)


def test_contention_is_zero_while_every_node_may_run_on_a_cpu():
    g = profiled_graph([(0, 1), (0, 2), (1, 3), (2, 3)], [1.0] * 4, [0.1] * 4, 0.01, size=1)
    p = problem(g, paper_topology(1, 1), q=1)
    dt = prepare(p)
    b = time_bounds(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.val_prod, dt.pair_val, dt.pair_cons, dt.recv,
                    dt.send)
    assert contention_bound(dt.t, dt.allowed, p.topology.is_cpu, b) == 0.0

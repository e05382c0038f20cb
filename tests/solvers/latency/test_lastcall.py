"""The last-call DP (solvers/latency/lastcall.py): its latency bound never passes the exact optimum (every
placement enumerated under ``evaluate``) of small random, branchy and grid graphs, also when the cheapest nodes
are deleted to fit, and it sees what the per-path call bounds cannot: the calls of parallel branches come out of
one budget."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

import planmap.solvers.latency.lastcall as lastcall  # noqa: E402
from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import optimum, problem  # noqa: E402
from tests.solvers.latency.test_calls import _grid  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402


def _bound(p) -> float:
    """The last-call bound in seconds."""
    dt = prepare(p, bounds=False)
    own = _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes)
    return lastcall.last_call_bound(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val,
                                    dt.pair_cons, dt.recv, dt.send, own, dt.capacity) * dt.time_scale


def _grid_problem(rows: int, cols: int, accelerators: int, q: int, cpu: bool = False):
    """A source, a ``rows`` x ``cols`` grid of 1-s cells, a sink (test_calls' grid), on ``accelerators``
    accelerators with ``q`` calls each; the CPU (100x slower) left out unless ``cpu``."""
    edges, n = _grid(rows, cols)
    acc = [0.1] + [1.0] * (n - 2) + [0.1]
    g = profiled_graph(edges, [100 * a for a in acc], acc, 0.01, size=1)
    p = problem(g, paper_topology(accelerators, 1), q=q)
    if not cpu:
        allowed = p.allowed.copy()
        allowed[:, p.topology.is_cpu] = False
        p = replace(p, allowed=allowed)
    return p


def _assert_below_optimum(p) -> float:
    opt = optimum(p)
    assert math.isfinite(opt)
    bound = _bound(p)
    assert bound <= opt * (1 + 1e-9), (bound, opt)
    return bound


@pytest.mark.parametrize("seed,n,q", [(0, 5, 1), (1, 5, 2), (5, 5, 1), (7, 6, 1)])
def test_bound_never_passes_the_optimum_of_random_graphs(seed, n, q):
    _assert_below_optimum(any_instance(seed, n, q))


@pytest.mark.parametrize("shape,seed,q", [("diamond", 0, 1), ("three-way", 1, 1), ("three-way", 2, 2),
                                          ("nested", 1, 1)])
def test_bound_never_passes_the_optimum_of_branchy_graphs(shape, seed, q):
    _assert_below_optimum(fork_join_instance(shape, seed, q))


def test_bound_never_passes_the_optimum_with_the_cheapest_nodes_deleted(monkeypatch):
    """Ideals capped below the graph's count, so the DP deletes its cheapest nodes and still stays below."""
    p = fork_join_instance("nested", 0, 1)
    full = _bound(p)
    monkeypatch.setattr(lastcall, "LASTCALL_MAX_IDEALS", 8)
    monkeypatch.setattr(lastcall, "LASTCALL_MAX_DROPPED", 0.5)
    preds = [[] for _ in range(p.num_nodes)]
    for a, b in zip(*p.graph.node_edges, strict=True):
        preds[int(b)].append(int(a))
    keep, _, _ = lastcall._fit(preds, p.cost.device_compute.min(axis=1))
    assert not keep.all()
    reduced = _assert_below_optimum(p)
    assert 0 < reduced <= full * (1 + 1e-9)


def test_bound_never_passes_the_optimum_of_a_grid_with_two_calls_per_accelerator():
    _assert_below_optimum(_grid_problem(2, 2, 2, 2))


def test_parallel_branches_share_the_call_budget():
    """A 3 x 3 grid of 1-s cells on two single-call accelerators: the per-path call bound lets every path cut
    the grid into its own two calls (7.22 s); with two calls in all the grid runs in one call and a third of it
    (or two thirds) in the other, and the DP proves the optimum, 9.2 s."""
    p = _grid_problem(3, 3, 2, 1)
    opt = optimum(p)
    dt = prepare(p, probe_seconds=0)
    assert opt == pytest.approx(9.2, abs=1e-9)
    assert _bound(p) == pytest.approx(opt, rel=1e-9)
    assert dt.lower * dt.time_scale == pytest.approx(opt, rel=1e-9)  # prepare takes it
    assert float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale < 7.3


def test_large_graphs_are_skipped(monkeypatch):
    monkeypatch.setattr(lastcall, "LASTCALL_MAX_NODES", 4)
    assert _bound(_grid_problem(2, 2, 2, 1)) == 0.0


def _random_grid_problem(seed: int):
    """A 1 x 2 .. 2 x 3 grid (source and sink included) of cells with log-normal compute on two or three
    accelerators with one or two calls each, the CPU left out."""
    rng = np.random.default_rng(seed)
    edges, n = _grid(int(rng.integers(1, 3)), int(rng.integers(2, 4)))
    acc = rng.lognormal(0, 1.0, n)
    g = profiled_graph(edges, [100 * a for a in acc], acc, float(rng.choice([0.01, 0.1, 0.3])), size=1)
    p = problem(g, paper_topology(int(rng.integers(2, 4)), 1), q=int(rng.integers(1, 3)))
    allowed = p.allowed.copy()
    allowed[:, p.topology.is_cpu] = False
    return replace(p, allowed=allowed)


@pytest.mark.parametrize("seed", [22])
def test_bound_never_passes_the_optimum_of_grids_with_uneven_cells(seed):
    _assert_below_optimum(_random_grid_problem(seed))


def test_geometric_shares_bound_a_large_last_call(monkeypatch):
    """A 2 x 3 grid of 1-s cells on three single-call accelerators (optimum 6.2 s): with ``K`` tabulated only at
    the costs' quantiles the last call's share falls far below its cost (5.32 s); the geometric shares find
    one close to it (6.12 s)."""
    p = _grid_problem(2, 3, 3, 1)
    bound = _assert_below_optimum(p)
    monkeypatch.setattr(lastcall, "LASTCALL_SHARES", 0)
    coarse = _bound(p)
    assert coarse == pytest.approx(5.32, abs=0.01)
    assert bound > 6.1

"""The call bound (solvers/latency/calls.py): a call's finish bound never exceeds the finish of that
node's call in any feasible placement of small graphs (exhaustive, under ``evaluate``), the latency
bound never passes the optimum, and it sees what path bounds cannot: a call computes all its nodes
before anything it feeds starts."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.evaluate import evaluate  # noqa: E402
from planmap.solvers.latency.calls import call_bound, call_bounds, call_lower_bound  # noqa: E402
from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import optimum, placements, problem  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402


def _bounds(p, dt, allowed=None):
    """(n, D) call finish bounds in seconds."""
    a = dt.allowed if allowed is None else allowed
    B = call_bounds(dt.t, a, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val, dt.pair_cons, dt.recv,
                    dt.send, _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes), dt.capacity)
    return B * dt.time_scale


def _assert_holds_on_every_placement(p) -> None:
    dt = prepare(p, bounds=False)
    B = _bounds(p, dt)
    checked = 0
    for sol in placements(p):
        ev = evaluate(p, sol)
        if not ev.feasible:
            continue
        dev = np.array([s.device for s in sol.stages])[sol.assignment]
        got = B[np.arange(p.num_nodes), dev]
        assert (got <= ev.node_finish * (1 + 1e-9) + 1e-12).all(), (got, ev.node_finish, sol.assignment)
        checked += 1
    assert checked


@pytest.mark.parametrize("seed,n,q", [(0, 5, 1), (1, 5, 2), (2, 5, 1), (5, 5, 1)])
def test_call_bounds_hold_on_every_feasible_placement(seed, n, q):
    _assert_holds_on_every_placement(any_instance(seed, n, q))


@pytest.mark.parametrize("shape,seed,q", [("diamond", 0, 1), ("three-way", 1, 1)])
def test_call_bounds_hold_on_every_feasible_placement_of_branchy_graphs(shape, seed, q):
    _assert_holds_on_every_placement(fork_join_instance(shape, seed, q))


@pytest.mark.parametrize("seed,n,q", [(0, 6, 1), (5, 6, 1)])
def test_prepare_lower_bound_never_passes_the_optimum(seed, n, q):
    p = any_instance(seed, n, q)
    opt = optimum(p)
    assert math.isfinite(opt)
    dt = prepare(p, opt, probe_seconds=0)
    bound = call_bound(_bounds(p, dt) / dt.time_scale, dt.allowed, dt.bounds.tail_fin) * dt.time_scale
    assert bound <= opt * (1 + 1e-9)
    assert dt.lower * dt.time_scale <= opt * (1 + 1e-7)


def _grid(rows: int, cols: int):
    """A source, a ``rows`` x ``cols`` grid of cells (each needs the cell below and the one before it),
    a sink: a wavefront could run the cells of one diagonal in parallel."""
    idx = {(r, c): 1 + r * cols + c for r in range(rows) for c in range(cols)}
    edges = [(0, v) if r == 0 else (idx[r - 1, c], v) for (r, c), v in idx.items()]
    edges += [(idx[r, c - 1], v) for (r, c), v in idx.items() if c > 0]
    edges.append((idx[rows - 1, cols - 1], len(idx) + 1))
    return edges, len(idx) + 2


def test_call_bound_charges_whole_calls_where_paths_see_the_wavefront():
    """A 2 x 3 grid of 1-s cells on two accelerators with one call each (no CPU): a path
    bound sees the wavefront (4 cells, 4.22 s); a call runs all its cells before its successors start,
    so with two calls the grid takes at least 5 cells (the optimum runs all 6 in one call, 6.2 s)."""
    edges, n = _grid(2, 3)
    acc = [0.1] + [1.0] * (n - 2) + [0.1]
    g = profiled_graph(edges, [100 * a for a in acc], acc, 0.01, size=1)
    p = problem(g, paper_topology(2, 1), q=1)
    allowed = p.allowed.copy()
    allowed[:, p.topology.is_cpu] = False  # 100x slower anyway; keeps the enumeration small
    p = replace(p, allowed=allowed)
    opt = optimum(p)
    dt = prepare(p, probe_seconds=0)
    sweep = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale
    calls = call_lower_bound(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val,
                             dt.pair_cons, dt.recv, dt.send, _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes),
                             dt.capacity, dt.bounds.tail_fin) * dt.time_scale
    assert sweep == pytest.approx(4.22, abs=1e-6)
    assert calls == pytest.approx(5.22, abs=1e-6)  # the second call also receives the cell beside it
    assert calls <= opt * (1 + 1e-9) and opt == pytest.approx(6.2, abs=1e-6)
    # prepare takes it, or more: the last-call DP (lastcall.py) proves the optimum here
    assert calls * (1 - 1e-9) <= dt.lower * dt.time_scale <= opt * (1 + 1e-9)

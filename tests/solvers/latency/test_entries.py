"""Entry charges of the call bound (solvers/latency/entries.py): with a call paying for every outside producer
of what it holds, the call finish bound still never exceeds the finish of that node's call in any feasible
placement of small graphs (exhaustive, under ``evaluate``), never passes the optimum, and rises where a call
takes in several values at once."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.solvers.latency.calls import call_bound, call_bounds  # noqa: E402
from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import optimum, problem  # noqa: E402
from tests.solvers.latency.test_calls import _assert_holds_on_every_placement as _holds  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402


def _bounds(p, dt, entries=True):
    """(n, D) call finish bounds in seconds."""
    B = call_bounds(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val, dt.pair_cons,
                    dt.recv, dt.send, _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes), dt.capacity,
                    entries=entries)
    return B * dt.time_scale


FAN_IN = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4), (4, 5)]  # three producers read by one node
LADDER = [(0, 1), (0, 2), (1, 3), (2, 3), (1, 2), (3, 4), (2, 4)]  # a 2 x 2 grid of cells over one source
FED_CHAIN = [(0, 1), (1, 2), (2, 3), (0, 2), (0, 3), (3, 4), (0, 4)]  # a source read by every step of a chain


@pytest.mark.parametrize("seed,n,q", [(3, 5, 1), (6, 5, 2), (7, 5, 1), (8, 5, 1), (11, 5, 1)])
def test_entry_bounds_hold_on_every_feasible_placement(seed, n, q):
    _holds(any_instance(seed, n, q))


@pytest.mark.parametrize("shape,seed,q", [("nested", 0, 1), ("three-way", 2, 2), (FAN_IN, 1, 1), (FAN_IN, 4, 1),
                                          (LADDER, 0, 1), (LADDER, 3, 1),
                                          (FED_CHAIN, 0, 1), (FED_CHAIN, 1, 1), (FED_CHAIN, 2, 2), (FED_CHAIN, 5, 1)])
def test_entry_bounds_hold_on_every_feasible_placement_of_branchy_graphs(shape, seed, q):
    _holds(fork_join_instance(shape, seed, q))


def test_entries_never_lower_the_bound_and_never_pass_the_optimum():
    p = any_instance(1, 6, 1)
    opt = optimum(p)
    assert math.isfinite(opt)
    dt = prepare(p, opt, probe_seconds=0)
    with_, without = _bounds(p, dt), _bounds(p, dt, entries=False)
    assert (with_ >= without - 1e-12).all()
    assert call_bound(with_ / dt.time_scale, dt.allowed, dt.bounds.tail_fin) * dt.time_scale <= opt * (1 + 1e-9)
    assert dt.lower * dt.time_scale <= opt * (1 + 1e-7)


def test_a_call_that_reads_three_values_pays_three_receives():
    """Three 1-s branches over a source, joined by one node, on two single-call accelerators (no CPU).
    Receives cost 0.25 s and every call pays each value it takes in: a call holding the join takes in
    two or three branch outputs (or computes the branches itself), which the path bound charges once."""
    acc = [0.1, 1.0, 1.0, 1.0, 0.1, 0.1]
    g = profiled_graph(FAN_IN, [100 * a for a in acc], acc, 0.25, size=1)
    p = problem(g, paper_topology(2, 1), q=1)
    allowed = p.allowed.copy()
    allowed[:, p.topology.is_cpu] = False
    p = replace(p, allowed=allowed)
    opt = optimum(p)
    dt = prepare(p, probe_seconds=0)
    with_, without = _bounds(p, dt), _bounds(p, dt, entries=False)
    lat = [call_bound(b / dt.time_scale, dt.allowed, dt.bounds.tail_fin) * dt.time_scale for b in (with_, without)]
    assert lat[0] > lat[1] + 0.1
    assert lat[0] <= opt * (1 + 1e-9)
    assert dt.lower * dt.time_scale >= lat[0] * (1 - 1e-9)  # prepare takes it


def test_a_call_entered_after_a_node_receives_that_nodes_ancestors():
    """A source read by every step of a chain, memory for three of the five nodes (1 MB each), two
    single-call accelerators, 0.3 s per transfer: the chain splits, and the call after the cut at node 2
    receives the source's value (0.3 s) — the source is an ancestor of 2, so it cannot be computed there
    (0.2 s). Bound 4.2 s (4.1 s if it could); optimum 4.5 s (the first call also sends the source's value)."""
    acc = [0.2, 1.0, 1.0, 1.0, 0.1]
    g = profiled_graph(FED_CHAIN, [100 * a for a in acc], acc, 0.3, size=[1e6] * 5)
    p = problem(g, paper_topology(2, 1, memory=3.5e6), q=1)
    allowed = p.allowed.copy()
    allowed[:, p.topology.is_cpu] = False
    p = replace(p, allowed=allowed)
    dt = prepare(p, probe_seconds=0)
    lat = call_bound(_bounds(p, dt) / dt.time_scale, dt.allowed, dt.bounds.tail_fin) * dt.time_scale
    assert lat == pytest.approx(4.2, abs=1e-6)
    assert optimum(p) == pytest.approx(4.5, abs=1e-6)
    _holds(p)

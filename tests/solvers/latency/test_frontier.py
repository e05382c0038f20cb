"""The frontier DP (solvers/latency/frontier.py): its latency bound never passes the exact optimum (every
placement enumerated under ``evaluate``) of small random, branchy and grid graphs, reaches it where the
last-call DP stops short (the two sides of a join placed consistently), and with an incumbent as its upper
bound proves a small GNMT's placement optimal."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.evaluate import evaluate  # noqa: E402
from planmap.solvers.latency import frontier  # noqa: E402
from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.solvers.latency.moves import improve  # noqa: E402
from planmap.solvers.latency.recut import recut  # noqa: E402
from tests.solvers.latency.cases import optimum, placement  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402
from tests.solvers.latency.test_lastcall import _bound as _last_call  # noqa: E402
from tests.solvers.latency.test_lastcall import _grid_problem  # noqa: E402
from tests.solvers.latency.test_recut import GNMT_MOVES_OPTIMUM, gnmt_problem  # noqa: E402


def _bound(p, upper: float = math.inf, **kw) -> float:
    """The frontier bound in seconds (``upper`` in seconds)."""
    dt = prepare(p, bounds=False)
    own = _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes)
    return frontier.frontier_bound(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val,
                                   dt.pair_cons, dt.recv, dt.send, own, dt.capacity, upper=upper / dt.time_scale,
                                   **kw) * dt.time_scale


CASES = ([(f"random-{s}-{n}-{q}", lambda s=s, n=n, q=q: any_instance(s, n, q))
          for s, n, q in [(0, 6, 1), (3, 6, 2), (5, 6, 1), (7, 6, 2), (11, 6, 1)]]
         + [(f"{shape}-{s}-{q}", lambda shape=shape, s=s, q=q: fork_join_instance(shape, s, q))
            for shape, s, q in [("diamond", 0, 2), ("diamond", 2, 2), ("three-way", 0, 2), ("nested", 2, 2)]]
         + [("grid-2x3-3acc", lambda: _grid_problem(2, 3, 3, 1)), ("grid-2x2-q2", lambda: _grid_problem(2, 2, 2, 2))])


@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
def test_bound_never_passes_the_optimum(name, make):
    p = make()
    opt = optimum(p)
    assert math.isfinite(opt)
    assert 0 < _bound(p) <= opt * (1 + 1e-9)
    # lowering the upper bound as labels outgrow a tiny cap prunes only what the lower one would
    assert 0 < _bound(p, upper=opt * 1.3, max_labels=3, floor=0.0) <= opt * (1 + 1e-9)


def test_the_two_sides_of_a_join_are_placed_once():
    """On a diamond with two calls per device the last-call DP places the shared source twice (once as
    each branch likes) and stays 11 % short; the frontier DP reaches the optimum."""
    p = fork_join_instance("diamond", 0, 2)
    opt = optimum(p)
    assert _last_call(p) < 0.95 * opt
    assert _bound(p) == pytest.approx(opt, rel=1e-9)


def test_an_upper_bound_prunes_and_caps():
    """With the optimum as the upper bound the result is the optimum; below it, the upper bound itself (every
    label pruned: nothing is faster); quantised times stay below."""
    p = _grid_problem(2, 3, 3, 1)
    opt = optimum(p)
    assert _bound(p, upper=opt * 1.5) == pytest.approx(opt, rel=1e-9)
    assert _bound(p, upper=opt * 0.9) == pytest.approx(opt * 0.9, rel=1e-9)
    assert _bound(p, quantum=0.05) <= opt * (1 + 1e-9)


def test_a_label_cap_gives_no_bound_rather_than_a_wrong_one():
    p = fork_join_instance("nested", 2, 2)
    assert _bound(p, max_labels=3) == 0.0
    assert _bound(p, deadline=0.0) == 0.0


def test_a_small_gnmt_placement_is_proved_optimal():
    """GNMT with 4 steps and 3 encoder layers on 4 accelerators (47 nodes, test_recut's instance): from the
    call moves' local optimum as the upper bound, the frontier DP reaches the latency of the placement the
    recut and the moves find next, so that placement is optimal; the last-call DP stays 7 % below. The upper
    bound prunes labels by the compute still ahead of each frontier node, which must count only the paths
    through consumers outside the ideal (counting all of them once gave a bound above this placement)."""
    p = gnmt_problem()
    start = placement(GNMT_MOVES_OPTIMUM, p.num_nodes)
    found, _ = recut(p, start, budget=1000)
    found, _ = improve(p, found)
    best = evaluate(p, found)
    assert best.feasible and best.objective < evaluate(p, start).objective
    bound = _bound(p, upper=evaluate(p, start).objective)
    assert bound == pytest.approx(best.objective, rel=1e-9) == GNMT_OPTIMUM
    assert _last_call(p) < 0.95 * bound


def _gnmt_at_the_moves_optimum():
    p = gnmt_problem()
    return p, evaluate(p, placement(GNMT_MOVES_OPTIMUM, p.num_nodes)).objective, GNMT_OPTIMUM


GNMT_OPTIMUM = 0.03723215471870768  # test_a_small_gnmt_placement_is_proved_optimal's placement (s)


def test_the_call_budget_ahead_prunes_what_compute_alone_cannot(monkeypatch):
    """Each frontier node's descendants run after it with the calls left: bounding their time by the last-call DP
    on the reversed graph keeps the 4-step GNMT's labels under a cap the compute on the longest path alone
    exceeds (the DP then gives up)."""
    p, upper, opt = _gnmt_at_the_moves_optimum()
    assert _bound(p, upper=upper, max_labels=250_000) == pytest.approx(opt, rel=1e-9)
    monkeypatch.setattr(frontier, "_tails", lambda M, d, S, fcols, desc: [np.zeros((S + 1, len(c))) for c in fcols])
    assert _bound(p, upper=upper, max_labels=250_000) == 0.0


def test_an_adaptive_upper_bound_proves_what_fits():
    """Past a label cap the DP gives up, unless it may lower its upper bound (to the median completion bound of
    the waiting labels): then it proves a bound between the floor and the optimum."""
    p, upper, opt = _gnmt_at_the_moves_optimum()
    floor = _last_call(p)
    assert _bound(p, upper=upper, max_labels=25_000) == 0.0
    got = _bound(p, upper=upper, max_labels=25_000, floor=floor / prepare(p, bounds=False).time_scale)
    assert floor < got <= opt * (1 + 1e-9)


def test_the_search_is_exact_at_the_horizon_where_it_fits_and_adapts_where_not(monkeypatch):
    """frontier_search: the exact DP at the horizon when it fits its label cap; else the adaptive one from
    halfway between the known bound and the horizon, which proves more than the floor."""
    p, upper, opt = _gnmt_at_the_moves_optimum()
    dt = prepare(p, bounds=False)
    own = _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes)
    floor = _last_call(p) / dt.time_scale

    def search():
        return frontier.frontier_search(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod,
                                        dt.pair_val, dt.pair_cons, dt.recv, dt.send, own, dt.capacity, lower=floor,
                                        horizon=upper / dt.time_scale, seconds=300) * dt.time_scale

    assert search() == pytest.approx(opt, rel=1e-9)
    monkeypatch.setattr(frontier, "FRONTIER_MAX_LABELS", 20_000)  # the run at the horizon gives up
    monkeypatch.setattr(frontier, "FRONTIER_ADAPT_LABELS", 25_000)
    got = search()  # from halfway between the floor and the horizon, below the optimum
    assert floor * dt.time_scale < got <= (floor * dt.time_scale + upper) / 2 < opt

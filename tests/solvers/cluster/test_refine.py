"""The stage IP on the stage DP's plans (solvers/cluster/refine.py): never worse than the composed baseline
layouts under evaluate, cached, deterministic, its stage costs put back into the DP's table, and each stage's
gap stated."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.problem import Certificate, SolveOptions, Status
from planmap.sharding import evaluate_spmd
from planmap.solvers.cluster.costs import StageCosts, inflight_rows
from planmap.solvers.cluster.dp import StageChoice
from planmap.solvers.cluster.refine import StageRefiner, _like, put_back, refine_plan, report_text
from planmap.solvers.cluster.solver import _score, _stage_plan
from planmap.solvers.cluster.space import build_solution, device_order, layer_groups, submeshes

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("highspy")


@cache
def setting():
    """cnn-tpu (8 layer groups on 2 × 4 TPU v5e) and the plan its stage DP picks: groups 0-2 on 4 devices,
    3-4 and 5-7 on 2 each, laid out with the groups' composed baseline layouts."""
    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    p = build_problem(load_spec(ROOT / "specs" / "cnn-tpu.yaml"))
    groups = layer_groups(p)
    costs = StageCosts(p, groups, SolveOptions())
    order = device_order(p)
    subs = submeshes(p, order)
    index = {(s.offset, s.size): k for k, s in enumerate(subs)}
    stages = [StageChoice(0, 3, index[(0, 4)], 0, 0.0), StageChoice(3, 5, index[(4, 2)], 0, 0.0),
              StageChoice(5, 8, index[(6, 2)], 0, 0.0)]
    table, mesh_of = costs.table(order, subs, p.microbatches)
    plans = [_stage_plan(p, costs, subs[s.sub], int(mesh_of[0, s.start, s.stop, s.sub]), s.start, s.stop, 1)
             for s in stages]
    sol = build_solution(p, groups, plans, Certificate(Status.HEURISTIC, "cluster"), microbatches=p.microbatches)
    return p, groups, costs, order, subs, stages, table, mesh_of, plans, sol, evaluate(p, sol)


def score(p):
    return lambda s, e: _score(p, s, e)


def test_refined_stages_never_worse_than_the_composed_baselines_and_each_states_its_gap():
    p, groups, costs, _, _, stages, _, _, plans, sol, ev = setting()
    refiner = StageRefiner(p, groups, SolveOptions(), budget=60.0)
    new_plans, new_sol, new_ev, reports = refine_plan(p, groups, plans, [1] * len(plans), sol, ev, refiner, score(p))
    assert new_ev.feasible
    assert _score(p, new_sol, new_ev) <= _score(p, sol, ev)
    assert new_ev.step_time < ev.step_time  # on this model the IP's stage layouts pay off
    for old, new in zip(plans, new_plans, strict=True):  # and no stage's own layout got slower
        assert evaluate_spmd(new.tables, new.specs).microbatch_time <= evaluate_spmd(
            old.tables, old.specs).microbatch_time * (1 + 1e-12)
    assert [r.origin for r in reports].count("ip") >= 1
    assert all(r.gap is not None and 0 <= r.gap <= 1 for r in reports)
    text = report_text(reports)
    assert "stage 0: groups 0-2 on mesh 4" in text and "gap" in text
    # the same stages again: answered from the cache, same layouts
    again = refine_plan(p, groups, plans, [1] * len(plans), sol, ev, refiner, score(p))
    assert refiner.stats.hits >= len(plans) and refiner.stats.solves <= len(plans)
    assert [a.specs for a in again[0]] == [a.specs for a in new_plans]


def test_without_time_left_stages_keep_their_baselines_and_say_so():
    p, groups, _, _, _, _, _, _, plans, sol, ev = setting()
    refiner = StageRefiner(p, groups, SolveOptions(), budget=0.0)
    new_plans, new_sol, new_ev, reports = refine_plan(p, groups, plans, [1] * len(plans), sol, ev, refiner, score(p))
    assert new_ev.step_time == ev.step_time and [a.specs for a in new_plans] == [a.specs for a in plans]
    assert all(r.gap is None and r.origin == "baselines" for r in reports)
    assert "baselines only (the stage IPs' time share was spent)" in report_text(reports)


def test_put_back_writes_the_stages_evaluated_time_plus_boundary_transfers():
    p, _, costs, order, subs, stages, table, mesh_of, plans, _, _ = setting()
    table, mesh_of = table.copy(), mesh_of.copy()
    rows = inflight_rows(p, p.microbatches)
    boundary = [costs.boundary_time(link, s.size) for link, s in zip(costs.links(order, subs), subs, strict=True)]
    assert put_back(table, mesh_of, stages, plans, rows, boundary) >= 1
    for st, plan in zip(stages, plans, strict=True):
        want = evaluate_spmd(plan.tables, plan.specs).microbatch_time + boundary[st.sub][st.start, st.stop]
        assert table[0, st.start, st.stop, st.sub] == pytest.approx(want, rel=1e-12)
    assert put_back(table, mesh_of, stages, plans, rows, boundary) == 0  # nothing left to change
    assert np.isfinite(table[0, 0, 3, stages[0].sub])

    # with the same stage elsewhere (same layer signatures, a submesh of the same mesh class): only lowered there
    like = _like(costs, subs)
    wide, wide_of = setting()[6].copy(), setting()[7].copy()
    assert put_back(wide, wide_of, stages, plans, rows, boundary, like) >= 1
    exact = np.zeros(wide.shape, bool)
    for st in stages:
        exact[:, st.start, st.stop, st.sub] = True
        assert (st.start, st.stop, st.sub) in [e[:3] for e in like(st.start, st.stop, st.sub, 0)]
    original = setting()[6]
    assert np.all((wide <= original) | exact | np.isinf(original))
    assert np.array_equal(wide[exact], table[exact])

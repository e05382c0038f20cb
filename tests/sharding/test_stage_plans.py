"""Whole-cluster plans (issue 13): pipelines of sharded stages written as one Solution and judged by evaluate."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.evaluate_stages import evaluate_stages
from planmap.problem import Certificate, Shardings, Solution, Stage, Status
from planmap.sharding import LogicalMesh, ShardingTables, logical_meshes, propagate
from planmap.sharding.solution import spmd_solution
from planmap.sharding.stage import stage_tables
from planmap.sharding.stage_layout import stage_layouts, stages_solution
from tests.sharding.stages import megatron_stages, split_assignment, two_stages

CERT = Certificate(Status.HEURISTIC, "test")


@pytest.fixture(scope="module")
def wc_plan(gpt_train):
    return megatron_stages(gpt_train)


def test_a_pipeline_of_single_device_stages_evaluates_as_today(gpt_train):
    p = gpt_train
    sol = Solution(split_assignment(p), (Stage((0,)), Stage((1,))), CERT, schedule="1f1b", microbatches=4)
    old, same = evaluate(p, sol), evaluate(p, replace(sol, shardings=Shardings(())))
    assert same.objective == old.objective and same.step_time == old.step_time
    assert np.array_equal(same.memory, old.memory) and same.violations == old.violations
    # the stage model itself agrees on time: per-op fused costs add up to the coarse nodes' costs
    new = evaluate_stages(p, replace(sol, shardings=Shardings(())))
    assert new.feasible and len(new.stages) == 2
    assert new.objective == pytest.approx(old.objective, rel=1e-9)
    assert new.step_time == pytest.approx(old.step_time, rel=1e-9)
    assert new.fw_load[:2] == pytest.approx(old.fw_load[:2], rel=1e-9)
    assert new.bw_load[:2] == pytest.approx(old.bw_load[:2], rel=1e-9)


def test_a_one_stage_sharded_plan_evaluates_as_today(gpt_train):
    from planmap.solvers.sharding.baselines import data_parallel, fsdp

    p = gpt_train
    for build in (data_parallel, fsdp):
        sol, ev = build(p)
        whole = replace(sol, stages=(replace(sol.stages[0], mesh_axes=sol.shardings.mesh_axes),),
                        shardings=replace(sol.shardings, mesh_axes=()))
        new = evaluate_stages(p, whole)
        assert new.feasible, new.violations
        assert new.objective == pytest.approx(ev.objective, rel=1e-12)
        assert new.step_time == pytest.approx(ev.step_time, rel=1e-12)
        assert new.memory == pytest.approx(ev.memory, rel=1e-12)


def test_two_stages_of_data_and_tensor_parallel_on_eight_devices(gpt_train, wc_plan):
    p, sol = gpt_train, wc_plan
    assert [s.mesh_axes for s in sol.stages] == [(("data", 2), ("tensor", 2))] * 2
    assert sol.shardings.mesh_axes == () and sol.shardings.args
    ev = evaluate(p, sol)
    assert ev.feasible and np.isfinite(ev.objective) and ev.objective > 0, ev.violations
    assert ev.step_time == pytest.approx((p.microbatches + 1) * ev.objective)
    assert ev.objective == pytest.approx(max(s.time for s in ev.stages))
    first, second = ev.stages
    assert first.recv > 0 and second.recv > 0  # activations forward, gradients back
    assert first.in_flight == min(p.microbatches, 2) and second.in_flight == 1  # 1F1B
    assert first.spmd.count("all-reduce") > 0  # Megatron's row-parallel all-reduces
    mesh = logical_meshes(p.topology)[0]
    t = ShardingTables.from_problem(p, mesh)
    replicated = evaluate(p, spmd_solution(p, t, propagate(t, {}), CERT))
    assert ev.memory.max() < replicated.memory.max()
    gpipe = evaluate(p, replace(sol, schedule="gpipe", microbatches=p.microbatches))
    assert gpipe.objective == ev.objective  # the schedule changes what is held, not the time per microbatch


def test_the_plan_dict_gives_each_stage_its_layout_back(gpt_train, wc_plan):
    p, sol = gpt_train, wc_plan
    stages = stage_layouts(p, sol)
    # the received values take their senders' specs restricted to the receiver's axes (same names here)
    second = stages[1]
    x = next(w for w in second.map.received.tolist() if len(second.tables.shapes[w]) == 3)
    v = int(second.map.values[x])
    sender = stages[0]
    assert second.layout[x] == sender.layout[sender.map.value_of(v)]
    # the layouts written back into a plan give the same layouts and the same evaluation
    again = stages_solution(p, sol.assignment, [(s.tables, s.layout) for s in stages], CERT, schedule="1f1b")
    assert again.stages == sol.stages
    assert [s.layout for s in stage_layouts(p, again)] == [s.layout for s in stages]
    assert evaluate(p, again).objective == pytest.approx(evaluate(p, sol).objective, rel=1e-12)


def test_invalid_whole_cluster_plans_are_violations(gpt_train, wc_plan):
    p, sol = gpt_train, wc_plan
    sh = sol.shardings
    some = next(iter(sh.args))
    bad = evaluate(p, replace(sol, shardings=replace(sh, args={**sh.args, some: ("model",) * len(sh.args[some])})))
    assert not bad.feasible and "unknown mesh axis 'model'" in bad.violations[-1]
    odd = replace(sol, stages=(Stage((0, 1, 2), (("data", 2),)), sol.stages[1]))
    assert "needs 2 devices, but the stage has 3" in evaluate(p, odd).violations[-1]
    two = replace(sol, stages=(sol.stages[0], Stage((0, 1, 2, 3), sol.stages[1].mesh_axes)))
    assert any("disjoint" in v for v in evaluate(p, two).violations)
    assert any("shardings.mesh_axes" in v for v in evaluate(p, replace(sol, shardings=replace(
        sh, mesh_axes=(("data", 2),)))).violations)
    g = p.graph
    split = np.asarray(sol.assignment).copy()
    split[(g.layer == 1) & g.backward] = 1  # layer 1's backward on the second stage
    assert any("layer 1" in v for v in evaluate(p, replace(sol, assignment=split)).violations)
    unaxed = replace(sol, stages=(Stage((0, 1, 2, 3)), sol.stages[1]))
    assert "no mesh axes" in evaluate(p, unaxed).violations[-1]


def test_a_stage_mixing_device_types_is_a_violation():
    from planmap.assemble import build_problem
    from planmap.spec import load_spec
    from tests.sharding.graphs import ROOT

    p = build_problem(load_spec(ROOT / "specs" / "cnn-train-mixed.yaml"))
    n = p.graph.num_nodes
    sol = Solution(np.zeros(n, np.int32), (Stage((7, 8), (("data", 2),)), Stage((9,))), CERT,
                   shardings=Shardings(()))
    sol = replace(sol, assignment=np.r_[np.zeros(n - 1, np.int32), [1]])
    ev = evaluate(p, sol)
    assert not ev.feasible and any("mixes device types" in v for v in ev.violations)


@pytest.mark.slow
def test_plan_file_round_trip_check_and_explain(gpt_train, wc_plan, workdir, capsys):
    from planmap import plan as plan_mod
    from planmap.cli import main
    from planmap.spec import load_spec

    spec = load_spec(workdir / "specs" / "gpt-train-8dev.yaml")
    s = spec.spec.solver  # a checked certificate names a solver the spec allows, with the spec's options
    p = gpt_train
    sol = wc_plan.with_certificate(solver="cluster", version="1", options={
        "time_limit": s.time_limit / 1e9, "rel_gap": s.rel_gap, "threads": s.threads, "seed": s.seed})
    ev = evaluate(p, sol)
    path = workdir / "wc.plan.yaml"
    doc = plan_mod.make_plan(p, sol, ev, spec=spec, plan_path=path)
    plan_mod.save(doc, path, header_lines=[])
    back = plan_mod.to_solution(p, plan_mod.load(path).document)
    assert back.shardings == sol.shardings and back.stages == sol.stages
    assert np.array_equal(back.assignment, sol.assignment)
    assert evaluate(p, back).objective == ev.objective
    assert [st.mesh.axis_names for st in doc.stages] == [["data", "tensor"]] * 2
    assert plan_mod.check(path).ok
    capsys.readouterr()
    assert main(["explain", "wc.plan.yaml", "--png", "wc.png"]) == 0
    text = capsys.readouterr().out
    assert "pipeline of 2 sharded stages (data=2 x tensor=2 | data=2 x tensor=2)" in text
    assert "stage 0 on node0/gpu0-3: mesh data=2 x tensor=2; tp=2 inside a host" in text
    assert "stage 1 on node0/gpu4-7" in text and "between stages" in text
    assert text.count("memory per device") == 2 and "in flight" in text
    assert (workdir / "wc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sharding_phrase_says_where_each_axis_runs():
    from planmap.sharding.summary import AxisSummary, sharding_phrase
    from tests.sharding.graphs import topology

    topo = topology("h100-2x8")
    mesh = LogicalMesh.build(topo, (2, 1, 8), np.arange(16))
    axes = [AxisSummary(name, size, scope, 1 / ibw if ibw else float("inf"), lat, 0.0, 0)
            for name, size, scope, ibw, lat in zip(("data", "a1", "tensor"), mesh.axis_sizes, mesh.scope,
                                                   mesh.inv_bw, mesh.latency, strict=True)]
    assert sharding_phrase(axes) == "tp=8 inside a host (450 GB/s), dp=2 over the network (50 GB/s)"
    assert sharding_phrase(axes[1:2]) == "not sharded"


def test_data_parallel_stages_pass_the_batch_split_on(gpt_train):
    """Both stages data parallel over 4 devices: the received activations carry the batch (dim 0), so the
    second stage's axis is named ``data`` like the first's and receives them split as they were sent; the
    head's gradient of the tied embedding (no batch dim) does not make the first stage's axis ``fsdp``."""
    from planmap.sharding.stage import stage_map

    p = gpt_train
    layouts = []
    for ops, devs in zip(two_stages(p), ([0, 1, 2, 3], [4, 5, 6, 7]), strict=True):
        t = stage_tables(p, ops, LogicalMesh.build(p.topology, (4,), devs))
        m = stage_map(t.graph)
        data = {a.value: ((0,),) + ((),) * (a.type.rank - 1) for a in t.graph.args if m.batch[a.value] == 0}
        layouts.append((t, propagate(t, data)))
    first, second = (stage_map(t.graph) for t, _ in layouts)
    shapes = {layouts[0][0].shapes[w]: int(first.batch[w]) for w in first.received.tolist()}
    assert shapes == {(512, 128): -1, (8, 64, 128): 0}  # the tied embedding's gradient, the activations' gradient
    sol = stages_solution(p, split_assignment(p), layouts, CERT, schedule="1f1b")
    assert [s.mesh_axes for s in sol.stages] == [(("data", 4),)] * 2
    ev = evaluate(p, sol)
    assert ev.feasible, ev.violations
    got = stage_layouts(p, sol)[1]
    x = next(w for w in second.received.tolist() if second.batch[w] == 0)
    assert got.layout[x] == ((0,), (), ())
    assert got.layout == layouts[1][1]

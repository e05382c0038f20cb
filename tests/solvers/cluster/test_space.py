"""The decision space of whole-cluster plans on the example specs: layer groups, submeshes, solutions."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.problem import Certificate, SolveOptions, Status
from planmap.sharding import evaluate_spmd, propagate
from planmap.sharding.solution import spmd_solution
from planmap.sharding.stage import stage_tables
from planmap.solvers.cluster.layouts import baseline_layouts, compose_layout, solve_stage
from planmap.solvers.cluster.space import (
    StagePlan,
    build_solution,
    device_order,
    layer_groups,
    stage_meshes,
    submeshes,
)

ROOT = Path(__file__).resolve().parents[3]


@cache
def problem(name: str):
    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    return build_problem(load_spec(ROOT / "specs" / f"{name}.yaml"))


def test_groups_cover_every_op_once_in_pipeline_order_with_backward_beside_forward():
    p = problem("gpt-train-8dev")
    lg = layer_groups(p)
    ops = np.concatenate(lg.ops)
    assert sorted(ops.tolist()) == list(range(p.original.num_nodes))
    g = p.graph
    for layer in range(4):  # a layer's forward and backward nodes share a group
        assert len(set(lg.node_group[g.layer == layer].tolist())) == 1
    fwd = ~g.backward
    first = [int(np.flatnonzero(fwd & (lg.node_group == k)).min()) for k in range(lg.num_groups)]
    assert first == sorted(first)
    # layers 1..3 of the GPT are identical: one signature, costed once
    assert lg.names[1:5] == ("layer0", "layer1", "layer2", "layer3")
    assert lg.signature[2] == lg.signature[3] == lg.signature[4]


def test_submeshes_tile_hosts_and_span_whole_hosts_across_the_network():
    p = problem("gpt-train-2host")
    order = device_order(p)
    host = p.topology.device_host
    subs = submeshes(p, order)
    assert {(s.size, s.hosts) for s in subs} == {(1, 1), (2, 1), (4, 1), (8, 1), (16, 2)}
    for s in subs:
        assert len({int(host[d]) for d in s.devices}) == s.hosts
    whole = [s for s in subs if s.size == 16][0]
    assert whole.shape == "2x8" and [m.shape for m in stage_meshes(p, whole)] == ["16", "2x8", "4x4", "8x2"]


def test_heterogeneous_submeshes_are_of_one_device_type():
    p = problem("cnn-train-mixed")
    t = p.topology.device_type
    for order in (device_order(p), device_order(p, reverse_hosts=True)):
        for s in submeshes(p, order):
            assert len({int(t[d]) for d in s.devices}) == 1


def test_one_stage_solution_is_the_spmd_plan_of_its_layout():
    p = problem("gpt-8dev")
    lg = layer_groups(p)
    sub = [s for s in submeshes(p, device_order(p)) if s.size == 2][0]
    mesh = stage_meshes(p, sub)[0]
    tables = stage_tables(p, lg.range_ops(0, lg.num_groups), mesh)
    specs = propagate(tables, {a.value: ((0,),) + ((),) * (a.type.rank - 1) for a in tables.graph.args
                               if a.role == "data"})
    sol = build_solution(p, lg, [StagePlan(0, lg.num_groups, tuple(int(d) for d in mesh.devices), tables, specs)],
                         Certificate(Status.HEURISTIC, "test"), microbatches=p.microbatches)
    ref = spmd_solution(p, tables, specs, Certificate(Status.HEURISTIC, "test"))
    assert sol.shardings == ref.shardings and sol.stages == ref.stages and sol.schedule is None
    assert sol.stages[0].mesh_axes == (("data", 2),)
    ev = evaluate(p, sol)
    assert ev.feasible and ev.objective == pytest.approx(evaluate_spmd(tables, specs).microbatch_time, rel=1e-9)


def test_composed_layout_of_one_group_is_that_groups_layout():
    p = problem("gpt-8dev")
    lg = layer_groups(p)
    mesh = stage_meshes(p, [s for s in submeshes(p, device_order(p)) if s.size == 4][0])[0]
    t = stage_tables(p, lg.ops[2], mesh)
    name, specs = baseline_layouts(t)[0]
    lay = solve_stage(t, SolveOptions())[0]
    again = compose_layout(t, [lay])
    assert again.specs == lay.specs and again.time == pytest.approx(lay.time)
    assert name == "data-parallel" and specs


def test_pipeline_of_single_devices_is_todays_pipeline_form():
    p = problem("gpt-8dev")
    lg = layer_groups(p)
    G = lg.num_groups
    stages = [StagePlan(0, 2, (0,)), StagePlan(2, G, (1,))]
    sol = build_solution(p, lg, stages, Certificate(Status.HEURISTIC, "test"), microbatches=4)
    assert sol.shardings is None and sol.schedule == "gpipe" and sol.num_stages == 2
    assert evaluate(p, sol).feasible
    with pytest.raises(ValueError, match="contiguous stages"):
        build_solution(p, lg, [StagePlan(0, 2, (0,))], Certificate(Status.HEURISTIC, "t"), microbatches=4)

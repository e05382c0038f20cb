"""Stage tables (issue 13): the sharding model of one pipeline stage on its submesh, on the GPT training export."""

from __future__ import annotations

import numpy as np
import pytest

from planmap.problem import SolveOptions
from planmap.sharding import LogicalMesh, ShardingTables, evaluate_spmd, logical_meshes, propagate
from planmap.sharding.stage import stage_graph, stage_map, stage_tables
from tests.sharding.stages import two_stages


def test_a_stage_of_every_op_is_the_whole_problem(gpt_train):
    p = gpt_train
    mesh = logical_meshes(p.topology)[0]
    full = ShardingTables.from_problem(p, mesh)
    st = stage_tables(p, np.arange(p.original.num_nodes), mesh)
    assert st is stage_tables(p, np.arange(p.original.num_nodes), mesh)  # cached in the problem's memo
    assert st.graph.num_nodes == full.graph.num_nodes and st.shapes == full.shapes
    assert [a.value for a in st.graph.args] == [a.value for a in full.graph.args]
    assert (st.graph.results == p.original.results).all()
    for name in ("compute", "comm", "memory", "working", "out_specs"):
        assert all(np.array_equal(x, y) for x, y in zip(getattr(st, name), getattr(full, name), strict=True)), name
    assert all(np.array_equal(x, y) for x, y in zip(st.edge_matrix, full.edge_matrix, strict=True))
    assert st.grad_param == full.grad_param
    rep = {a.value: ((),) * a.type.rank for a in full.graph.args}
    assert evaluate_spmd(st, propagate(st, rep)).step_time == evaluate_spmd(full, propagate(full, rep)).step_time


def test_two_stages_split_parameters_and_receive_crossing_values(gpt_train):
    p = gpt_train
    o = p.original
    s0, s1 = two_stages(p)
    g0, g1 = stage_graph(o, s0), stage_graph(o, s1)
    m0, m1 = stage_map(g0), stage_map(g1)
    params = {a.index for a in o.args if a.role == "param"}
    p0 = {int(i) for i in m0.args if i in params}
    p1 = {int(i) for i in m1.args if i in params}
    assert p0 | p1 == params
    wte = next(a.index for a in o.args if "wte" in a.name)
    assert p0 & p1 == {wte}  # the tied embedding: read by the embedding (stage 0) and the head (stage 1)
    # received values are arguments of role data with the producer's result type, produced in the other stage
    for g, m, other in ((g0, m0, s1), (g1, m1, s0)):
        assert len(m.received) > 0 and len(m.sent) > 0
        for v in m.received.tolist():
            a = next(a for a in g.args if a.value == v)
            node = int(o.value_node[m.values[v]])
            assert a.role == "data" and node in set(other.tolist())
            assert a.type == o.outputs[node][int(o.value_index[m.values[v]])]
    # every non-recomputed op runs in exactly one stage
    from planmap.frontend.recompute import recomputed_nodes

    rec = recomputed_nodes(o)
    both = np.intersect1d(m0.ops, m1.ops)
    assert rec[both].all() and np.isin(np.flatnonzero(~rec), np.union1d(m0.ops, m1.ops)).all()
    # the stages' gradients still end in their parameters' layouts
    mesh = LogicalMesh.build(p.topology, (2, 2), [0, 1, 2, 3])
    t0, t1 = stage_tables(p, s0, mesh), stage_tables(p, s1, LogicalMesh.build(p.topology, (2, 2), [4, 5, 6, 7]))
    whole = ShardingTables.from_problem(p, mesh)
    assert len(t0.grad_param) + len(t1.grad_param) >= len(whole.grad_param)
    # parameter memory: each parameter once, the tied one in both stages
    rep0, rep1, full = (evaluate_spmd(t, propagate(t, {})) for t in (t0, t1, whole))
    tied = float(o.value_bytes[o.args[wte].value]) * p.cost.param_factor
    assert rep0.memory_parts["params"] + rep1.memory_parts["params"] == pytest.approx(
        full.memory_parts["params"] + tied)
    assert rep0.compute + rep1.compute == pytest.approx(full.compute, rel=1e-3)  # copies of constants cost nothing


def test_data_parallel_and_megatron_layouts_work_on_a_stage(gpt_train):
    from planmap.solvers.sharding.baselines import gradient_layouts, megatron_overrides

    p = gpt_train
    s0, s1 = two_stages(p)
    mesh = LogicalMesh.build(p.topology, (2, 2), [4, 5, 6, 7])
    t = stage_tables(p, s1, mesh)
    data = {a.value: ((0,),) + ((),) * (a.type.rank - 1) for a in t.graph.args
            if a.role == "data" and a.type.rank and a.type.shape[0] % 2 == 0}
    dp = evaluate_spmd(t, propagate(t, gradient_layouts(t, data)))
    rep = evaluate_spmd(t, propagate(t, {}))
    meg = evaluate_spmd(t, propagate(t, megatron_overrides(t, 1, 0)))
    for ev in (dp, rep, meg):
        assert ev.feasible and np.isfinite(ev.step_time) and ev.step_time > 0
    assert dp.memory_parts["data"] < rep.memory_parts["data"]
    assert meg.memory_parts["params"] < dp.memory_parts["params"]


@pytest.mark.slow
def test_the_sharding_ip_solves_a_stage(gpt_train):
    from planmap.solvers.sharding.baselines import gradient_layouts
    from planmap.solvers.sharding.ip import solve_mesh

    p = gpt_train
    t = stage_tables(p, two_stages(p)[0], LogicalMesh.build(p.topology, (2, 2), [0, 1, 2, 3]))
    data = {a.value: ((0,),) + ((),) * (a.type.rank - 1) for a in t.graph.args
            if a.role == "data" and a.type.rank and a.type.shape[0] % 2 == 0}
    dp = propagate(t, gradient_layouts(t, data))
    ans = solve_mesh(t, SolveOptions(time_limit=3, rel_gap=0.05), warm_start=dp)
    assert ans.specs is not None and ans.objective <= evaluate_spmd(t, dp).step_time * (1 + 1e-9)

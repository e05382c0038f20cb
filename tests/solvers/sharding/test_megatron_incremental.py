"""The Megatron baseline with incremental propagation lays out exactly what the rule computes with one full
propagation per step (the reference below: every decision, pin round and partial-sum round re-propagated
from scratch), on the example MLP and GPT exports and every mesh Megatron tries."""

from __future__ import annotations

import pytest

from planmap import frontend
from planmap.problem import Problem
from planmap.sharding import logical_meshes, propagate
from planmap.sharding.solution import tables_cache
from planmap.solvers.sharding import baselines as b
from tests.sharding.graphs import ROOT, topology


def _pins(t, over, tensor):
    specs = propagate(t, over)
    return {vals[0]: b._without(specs[vals[0]], tensor) for i in range(t.num_ops) if (vals := t.unit_values(i))
            and vals[0] not in over and any(tensor in d for d in specs[vals[0]])
            and not any(any(tensor in d for d in specs[v]) for v in t.operands[i])}


def _downstream(t, over, tensor, rounds):
    for _ in range(rounds):
        pins = _pins(t, over, tensor)
        if not pins:
            break
        over = {**over, **pins}
    return over


def reference(t, tensor, data):
    """The Megatron rule of :func:`megatron_overrides` with a full :func:`propagate` wherever it reads the layout."""
    g = t.graph
    over = b._data_specs(t, data) if data is not None else {}
    decided = set()
    for i in range(g.num_nodes):
        m = g.dim_maps[i]
        if g.kind[i] != "stablehlo.dot_general" or m is None or len(t.operands[i]) != 2 or not m.reduced:
            continue
        lhs, rhs = t.operands[i]
        lhs_c, rhs_c, rhs_free = b._dot_roles(m)
        traced = b._param_dims(g, t.operands, rhs, rhs_c + rhs_free)
        if traced is None or traced[0] in decided:
            continue
        p, pdims = traced
        decided.add(p)
        specs = propagate(t, _downstream(t, b._replicated_closure(t, over), tensor, 2))
        lhs_split = any(tensor in specs[lhs][d] for d in lhs_c)
        shape = g.args[[a.value for a in g.args].index(p)].type.shape
        dim = next((d for d in (pdims[:len(rhs_c)] if lhs_split else pdims[len(rhs_c):])
                    if d >= 0 and shape[d] % t.mesh.axis_sizes[tensor] == 0), None)
        if dim is not None:
            over[p] = b._split(len(shape), dim, (tensor,))
            if lhs_split:
                res = t.unit_values(i)[0]
                over[res] = b._without(propagate(t, over)[res], tensor)
    over = b._replicated_closure(t, b.gradient_layouts(t, over))
    for _ in range(4):
        specs = propagate(t, over)
        pins = {}
        for i in range(g.num_nodes):
            m, vals = g.dim_maps[i], t.unit_values(i)
            if g.kind[i] != "stablehlo.dot_general" or m is None or not m.reduced or not vals:
                continue
            if vals[0] in over or vals[0] in t.grad_param:
                continue
            if any(tensor in specs[v][slot[k]] for slot in m.reduced for k, v in enumerate(t.operands[i])
                   if k < len(slot) and slot[k] >= 0):
                pins[vals[0]] = b._without(specs[vals[0]], tensor)
        if not pins:
            break
        over.update(pins)
    return _downstream(t, over, tensor, 8)


@pytest.mark.parametrize("model", ["mlp_train", pytest.param("gpt", marks=pytest.mark.slow)])
def test_incremental_megatron_equals_the_fully_propagated_rule(model):
    g = frontend.load_model(ROOT / "specs" / "models" / f"{model}.mlir")
    topo = topology("h100-1x8")
    problem = Problem.from_graph(g, topo, mode="training" if model.endswith("_train") else "inference")
    meshes = [m for m in logical_meshes(topo) if m.scope[-1] == "intra" and m.num_axes <= 2]
    assert len(meshes) == 3
    for mesh in meshes:
        t = tables_cache(problem).get(mesh)
        tensor, data = mesh.num_axes - 1, (0 if mesh.num_axes == 2 else None)
        got = b.megatron_overrides(t, tensor, data)
        assert got == reference(t, tensor, data)
        assert any(tensor in d for v, s in got.items() for d in s if v in {a.value for a in g.args})

"""Dimension maps (:class:`planmap.graph.DimMap`) of real exports: the example models, the TF/PyTorch
fixtures, and small JAX functions exported here, one op kind each."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from planmap.graph import DimMap, GraphError, OpGraph

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = sorted((ROOT / "specs" / "models").glob("*.mlir")) + [ROOT / "tests" / "fixtures" / "tf_mlp.mlir",
                                                                     ROOT / "tests" / "fixtures" / "torch_mlp.mlir"]
S = jax.ShapeDtypeStruct
F32 = jnp.float32


def _graph_of_text(text: str, name: str = "t") -> OpGraph:
    from planmap.frontend.mlir import parse_artifact
    from planmap.frontend.stablehlo import build_graph

    return build_graph(parse_artifact(text.encode(), where=name), name=name)


def inline_calls(fn):
    """``fn`` with its inner ``jax.jit`` calls traced inline: ``jnp.take``, ``jnp.sort`` and others are
    jitted functions that export as a ``func.call`` (a unit to the front end); this evaluates ``fn``'s
    jaxpr, binding every primitive but a jit call, whose jaxpr is evaluated in its place."""
    from jax.extend import core

    def evaluate(jaxpr, consts, *vals):
        env = dict(zip(jaxpr.constvars, consts, strict=True)) | dict(zip(jaxpr.invars, vals, strict=True))

        def read(v):
            return v.val if isinstance(v, core.Literal) else env[v]

        for e in jaxpr.eqns:
            ins = [read(v) for v in e.invars]
            if e.primitive.name in ("jit", "pjit"):
                outs = evaluate(e.params["jaxpr"].jaxpr, e.params["jaxpr"].consts, *ins)
            else:
                outs = e.primitive.bind(*ins, **e.params)
                outs = outs if e.primitive.multiple_results else [outs]
            env.update(zip(e.outvars, outs, strict=True))
        return [read(v) for v in jaxpr.outvars]

    def run(*args):
        closed = jax.make_jaxpr(fn)(*args)
        out = evaluate(closed.jaxpr, closed.consts, *jax.tree.leaves(args))
        return out[0] if len(out) == 1 else tuple(out)

    return run


def graph_of(fn, *args, inline: bool = False) -> OpGraph:
    """The OpGraph of ``fn`` exported at ``args`` (ShapeDtypeStructs), through the real front end
    (``inline``: with ``fn``'s inner jit calls inlined, see :func:`inline_calls`)."""
    import planmap.export

    return _graph_of_text(planmap.export.exported(inline_calls(fn) if inline else fn, *args).mlir_module())


def ops(g: OpGraph, kind: str) -> list[int]:
    return [i for i, k in enumerate(g.kind) if k == "stablehlo." + kind]


def only(g: OpGraph, kind: str) -> DimMap:
    found = ops(g, kind)
    assert len(found) == 1, (kind, g.kind)
    return g.dim_maps[found[0]]


def value_shape(g: OpGraph, v: int) -> tuple[int, ...]:
    node = int(g.value_node[v])
    return g.args[v].type.shape if node < 0 else g.outputs[node][int(g.value_index[v])].shape


# ------------------------------------------------------------------------------- the property
def mlir_operand_counts(path: Path) -> list[int]:
    """Operand counts of the entry function's top-level ops, read independently with the bindings."""
    from jaxlib.mlir import ir

    from planmap.frontend.mlir import make_context

    with make_context():
        module = ir.Module.parse(path.read_text())
        main = next(op for op in module.body.operations if op.operation.attributes["sym_name"].value == "main")
        return [len(op.operation.operands) for op in main.regions[0].blocks[0].operations
                if op.operation.name != "func.return"]


@pytest.mark.parametrize("path", ARTIFACTS, ids=lambda p: p.name)
def test_every_op_of_every_example_has_a_consistent_map(path):
    from planmap.frontend import load_model

    g = load_model(path)
    assert len(g.operands) == len(g.dim_maps) == g.num_nodes
    assert [len(o) for o in g.operands] == mlir_operand_counts(path)
    mapped = 0
    for i, dm in enumerate(g.dim_maps):
        if dm is None:
            continue
        assert len(dm.operands) == len(g.operands[i])
        out = g.outputs[i][0].shape
        assert all(len(o.shape) == len(out) for o in g.outputs[i])
        for k, (m, v) in enumerate(zip(dm.operands, g.operands[i], strict=True)):
            shape = value_shape(g, v)
            assert len(m) == len(shape), (g.kind[i], k)
            targets = [d for d in m if d >= 0]
            assert len(targets) == len(set(targets)), (g.kind[i], m)  # no result dim fed by two dims
            for j, d in enumerate(m):
                if d < 0:
                    continue
                mapped += 1
                assert 0 <= d < len(out)
                if g.kind[i] == "stablehlo.reshape":  # a major factor: same flat offset, one size divides the other
                    assert shape[j] % out[d] == 0 or out[d] % shape[j] == 0, (shape, out, j, d)
                    assert math.prod(shape[:j]) == math.prod(out[:d]), (shape, out, j, d)
                else:
                    assert shape[j] == out[d] > 1, (g.kind[i], shape, out, j, d)
        for slot in dm.reduced:
            assert len(slot) == len(g.operands[i])
            for e, v in zip(slot, g.operands[i], strict=True):
                assert -1 <= e < len(value_shape(g, v))
            assert any(e >= 0 for e in slot)
    assert mapped > g.num_nodes  # the maps carry dims, not just -1s
    units = {k for k, dm in zip(g.kind, g.dim_maps, strict=True) if dm is None}
    assert units <= {"func.call"}, units


def test_example_mlp_first_dot(models_dir):
    from planmap.frontend import load_model

    g = load_model(models_dir / "mlp.mlir")
    first = ops(g, "dot_general")[0]
    assert g.dim_maps[first] == DimMap(operands=((0, -1), (-1, 1)), reduced=((1, 0),))
    assert [value_shape(g, v) for v in g.operands[first]] == [(32, 256), (256, 512)]
    assert g.args[g.operands[first][0]].name == "x"


def test_tensorflow_legacy_dot(fixtures_dir):
    from planmap.frontend import load_model

    g = load_model(fixtures_dir / "tf_mlp.mlir")
    assert g.dim_maps[ops(g, "dot")[0]] == DimMap(operands=((0, -1), (-1, 1)), reduced=((1, 0),))


def test_isolated_load_carries_the_same_maps(artifacts):
    from planmap.frontend import load_model

    text, vhlo = load_model(artifacts["stablehlo"]), load_model(artifacts["vhlo"])  # VHLO: built in a child
    assert vhlo.operands == text.operands and vhlo.dim_maps == text.dim_maps
    assert pickle.loads(pickle.dumps(text)).dim_maps == text.dim_maps


def test_coarsened_and_profiled_graphs_have_none(models_dir):
    from planmap.frontend import coarsen, load_model
    from planmap.frontend.profiled import dumps, loads

    g = load_model(models_dir / "gpt.mlir")
    assert g.dim_maps is not None
    for c in (coarsen(g, "fuse"), coarsen(g, "layers"), loads(dumps(g))):
        assert c.operands is None and c.dim_maps is None


# --------------------------------------------------------------------------------- op kinds
def test_einsum_dot_general():
    g = graph_of(lambda x, w: jnp.einsum("bsd,df->bsf", x, w), S((4, 8, 16), F32), S((16, 32), F32))
    assert only(g, "dot_general") == DimMap(((0, 1, -1), (-1, 2)), ((2, 0),))
    g = graph_of(lambda q, k: jnp.einsum("bhqd,bhkd->bhqk", q, k), S((2, 4, 8, 16), F32), S((2, 4, 8, 16), F32))
    assert only(g, "dot_general") == DimMap(((0, 1, 2, -1), (0, 1, 3, -1)), ((3, 3),))


def test_reshape_split_and_merge():
    g = graph_of(lambda x: x.reshape(4, 8, 2, 16), S((4, 8, 32), F32))
    assert only(g, "reshape").operands == ((0, 1, 2),)
    g = graph_of(lambda x: x.reshape(32, 16), S((4, 8, 16), F32))
    assert only(g, "reshape").operands == ((0, -1, 1),)
    g = graph_of(lambda x: x.reshape(4, 2, 24), S((4, 6, 8), F32))  # 6*8 -> 2*24: 6 is not a multiple of 2's major
    assert only(g, "reshape").operands == ((0, 1, -1),)
    g = graph_of(lambda x: x.reshape(4, 32), S((4, 1, 32), F32))  # size-1 dims are carried by nobody
    assert only(g, "reshape").operands == ((0, -1, 1),)


def test_transpose_and_broadcast():
    g = graph_of(lambda x: jnp.transpose(x, (0, 2, 3, 1)), S((2, 3, 4, 5), F32))
    assert only(g, "transpose").operands == ((0, 3, 1, 2),)
    g = graph_of(lambda b, x: x + b, S((16,), F32), S((8, 16), F32))
    (b,) = [i for i in ops(g, "broadcast_in_dim") if g.operands[i] == (0,)]
    assert g.dim_maps[b].operands == ((1,),)
    assert only(g, "add").operands == ((0, 1), (0, 1))
    g = graph_of(lambda b, x: x + b, S((1, 16), F32), S((8, 16), F32))  # broadcast from size 1
    (b,) = [i for i in ops(g, "broadcast_in_dim") if g.operands[i] == (0,)]
    assert g.dim_maps[b].operands == ((-1, 1),)
    for dims in ((0,), (1,)):  # sizes leave the broadcast dimension open: it is read from the attribute
        g = graph_of(lambda x, d=dims: jax.lax.broadcast_in_dim(x, (8, 8), d), S((8,), F32))
        assert only(g, "broadcast_in_dim").operands == (dims,)
    g = graph_of(lambda x: x * 2.0, S((8, 1), F32))  # size-1 dims map to -1, scalars to ()
    assert only(g, "multiply").operands == ((0, -1), (0, -1))


def test_reductions():
    g = graph_of(lambda x: jnp.sum(x, axis=1), S((4, 8, 16), F32))
    assert only(g, "reduce") == DimMap(((0, -1, 1), ()), ((1, -1),))
    def argmax(x):  # a variadic reduce (jnp.argmax lowers to a call)
        iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, 2)

        def pick(a, b):
            take_a = a[0] >= b[0]
            return jnp.where(take_a, a[0], b[0]), jnp.where(take_a, a[1], b[1])

        return jax.lax.reduce((x, iota), (-jnp.inf, 0), pick, (2,))[1]

    g = graph_of(argmax, S((4, 8, 16), F32))
    assert only(g, "reduce") == DimMap(((0, 1, -1), (0, 1, -1), (), ()), ((2, 2, -1, -1),))
    g = graph_of(lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
                 S((2, 8, 8, 3), F32))
    assert only(g, "reduce_window").operands == ((0, -1, -1, 3), ())
    g = graph_of(jax.grad(lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                                          "VALID").sum()), S((2, 8, 8, 3), F32))
    assert only(g, "select_and_scatter").operands == ((0, -1, -1, 3), (0, -1, -1, 3), ())


def test_sort_reverse_concatenate_slice_pad():
    g = graph_of(lambda x: jnp.sort(x, axis=1), S((4, 8), F32), inline=True)
    assert only(g, "sort").operands == ((0, -1),)
    g = graph_of(lambda x: jnp.flip(x, 1), S((4, 8), F32), inline=True)
    assert only(g, "reverse").operands == ((0, -1),)
    g = graph_of(lambda a, b: jnp.concatenate([a, b], axis=1), S((4, 8, 16), F32), S((4, 2, 16), F32))
    assert only(g, "concatenate").operands == ((0, -1, 2), (0, -1, 2))
    g = graph_of(lambda x: x[:, :4], S((8, 16), F32))
    assert only(g, "slice").operands == ((0, -1),)
    g = graph_of(lambda x: jnp.pad(x, ((0, 0), (1, 2))), S((8, 16), F32), inline=True)
    assert only(g, "pad").operands == ((0, -1), ())


def test_dynamic_slice_and_update():
    g = graph_of(lambda x, i: jax.lax.dynamic_slice(x, (0, i), (8, 4)), S((8, 16), F32), S((), jnp.int32))
    dm = only(g, "dynamic_slice")
    assert dm.operands[0] == (0, -1) and all(m == () for m in dm.operands[1:])
    g = graph_of(lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (0, i)), S((8, 16), F32), S((8, 4), F32),
                 S((), jnp.int32))
    dm = only(g, "dynamic_update_slice")
    assert dm.operands[:2] == ((0, 1), (0, -1)) and all(m == () for m in dm.operands[2:])


def _embed(table, tokens):
    return table[tokens]


def test_embedding_gather_and_its_gradient_scatter_add():
    table, tokens = S((512, 64), F32), S((4, 16), jnp.int32)
    for g in (graph_of(_embed, table, tokens), graph_of(lambda t, x: jnp.take(t, x, axis=0), table, tokens,
                                                         inline=True)):
        dm = only(g, "gather")
        assert dm.operands[0] == (-1, 2)  # the vocabulary dim is gathered from, the feature dim is carried
        assert dm.operands[1] == (0, 1, -1)  # token batch dims -> the result's batch dims
        assert dm.reduced == ((0, -1),)  # vocabulary-parallel: masked gather + all-reduce
    g = graph_of(jax.grad(lambda t, x: _embed(t, x).sum()), table, tokens)
    dm = only(g, "scatter")
    assert dm.operands[0] == (0, 1)
    assert dm.operands[2] == (-1, -1, 1)  # updates (4, 16, 64): the feature dim fills result dim 1
    assert dm.reduced == ((-1, 0, 0), (-1, 1, 1))  # each token dim: partial sums of the table gradient
    assert dm.operands[1][:2] == (-1, -1)


def test_scatter_that_overwrites_is_a_unit():
    g = graph_of(lambda x, i, u: x.at[i].set(u), S((16, 8), F32), S((4,), jnp.int32), S((4, 8), F32))
    assert only(g, "scatter") is None


def _conv(x, w, groups=1):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        feature_group_count=groups)


def test_convolutions():
    g = graph_of(_conv, S((2, 8, 8, 4), F32), S((3, 3, 4, 16), F32))
    assert only(g, "convolution") == DimMap(((0, -1, -1, -1), (-1, -1, -1, 3)), ((3, 2),))
    g = graph_of(lambda x, w: _conv(x, w, 4), S((2, 8, 8, 4), F32), S((3, 3, 1, 4), F32))  # depthwise
    assert only(g, "convolution") == DimMap(((0, -1, -1, 3), (-1, -1, -1, 3)))
    g = graph_of(lambda x, w: _conv(x, w, 2), S((2, 8, 8, 4), F32), S((3, 3, 2, 8), F32))  # grouped
    assert only(g, "convolution") == DimMap(((0, -1, -1, -1), (-1, -1, -1, -1)))


def test_iota_constants_and_units():
    g = graph_of(lambda x: x + jnp.arange(8, dtype=F32), S((8,), F32))
    assert only(g, "iota") == DimMap(operands=())
    g = graph_of(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0, x), S((8,), F32))
    assert only(g, "while") is None
    assert len(g.operands[ops(g, "while")[0]]) == 2  # the counter and the carry


def test_case_captures_are_not_operands():
    def f(p, x, y):
        return jax.lax.cond(p, lambda: x * y, lambda: x + y)

    g = graph_of(f, S((), jnp.bool_), S((8,), F32), S((8,), F32))
    case = ops(g, "case")[0]
    assert g.dim_maps[case] is None
    captured = set(g.edge_value[g.edge_dst == case].tolist())
    assert set(g.operands[case]) < captured  # x and y are edges into the case, not its operands


def test_opgraph_validates_the_new_columns(models_dir):
    from dataclasses import replace

    from planmap.frontend import load_model

    g = load_model(models_dir / "mlp.mlir")
    with pytest.raises(GraphError, match="operands requires"):
        replace(g, operands=g.operands[:-1])
    with pytest.raises(GraphError, match="dim_maps requires"):
        replace(g, dim_maps=g.dim_maps[:-1])
    with pytest.raises(GraphError, match="value ids"):
        replace(g, operands=((g.num_values,),) + g.operands[1:])
    bad = list(g.dim_maps)
    i = ops(g, "dot_general")[0]
    bad[i] = DimMap(operands=((0, -1),))
    with pytest.raises(GraphError, match=f"dim_maps\\[{i}\\] maps 1 operands"):
        replace(g, dim_maps=tuple(bad))
    assert np.array_equal(replace(g).flops, g.flops)


def test_chlo_broadcasts_custom_calls_and_unknown_ops():
    text = """
    func.func @main(%a: tensor<16xf32>, %b: tensor<8x16xf32>, %c: tensor<16x8xf32>) -> tensor<8x16xf32> {
      %0 = chlo.broadcast_add %a, %b : (tensor<16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
      %1 = chlo.broadcast_multiply %a, %c {broadcast_dimensions = array<i64: 0>}
          : (tensor<16xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
      %2 = stablehlo.custom_call @Sharding(%0) : (tensor<8x16xf32>) -> tensor<8x16xf32>
      %3 = "foo.bar"(%2) : (tensor<8x16xf32>) -> tensor<8x16xf32>
      return %3 : tensor<8x16xf32>
    }"""
    with pytest.warns(UserWarning, match="foo.bar"):
        g = _graph_of_text(text)
    assert g.dim_maps[0].operands == ((1,), (0, 1))  # right-aligned, as numpy broadcasts
    assert g.dim_maps[1].operands == ((0,), (0, 1))  # by its broadcast_dimensions
    assert g.dim_maps[2] is None and g.dim_maps[3] is None


def test_calls_of_pointwise_functions_map_like_elementwise_ops():
    def calls(g):
        return [i for i, k in enumerate(g.kind) if k == "func.call"]

    g = graph_of(lambda x: jax.nn.relu(x) * 2.0, S((8, 16), F32))  # relu exports as a private call
    (c,) = calls(g)
    assert g.dim_maps[c] == DimMap(operands=((0, 1),))
    # a call whose body moves dims (a transpose) or reduces stays a unit
    g = graph_of(lambda x: jax.jit(lambda y: y.T * 2.0)(x), S((8, 16), F32))
    assert [g.dim_maps[i] for i in calls(g)] == [None]
    g = graph_of(lambda x: jax.jit(lambda y: y * y.sum())(x), S((8, 16), F32))
    assert [g.dim_maps[i] for i in calls(g)] == [None]
    # nested pointwise calls are pointwise
    g = graph_of(lambda x: jax.jit(lambda y: jax.nn.relu(y) + 1.0)(x), S((8, 16), F32))
    assert [g.dim_maps[i] for i in calls(g)] == [DimMap(operands=((0, 1),))]

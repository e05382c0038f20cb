"""while / case / func.call / composite are single nodes costed from their bodies, as specified."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import planmap.export as E
from planmap.errors import InputError
from planmap.frontend import load_model

S = jax.ShapeDtypeStruct
X, W = S((4, 8), jnp.float32), S((8, 8), jnp.float32)
DOT = 2 * 4 * 8 * 8  # FLOPs of one (4x8) @ (8x8)


def _load(tmp_path, fn, *args, **kw):
    return load_model(E.jax(fn, *args, path=tmp_path / "m.mlir"), **kw)


def _only(g, kind):
    (i,) = [k for k, kd in enumerate(g.kind) if kd == kind]
    return i


def test_fori_loop_is_one_node_with_its_static_trip_count(tmp_path):
    g = _load(tmp_path, lambda x, w: jax.lax.fori_loop(0, 7, lambda i, h: jnp.tanh(h @ w), x), X, W)
    i = _only(g, "stablehlo.while")
    # 7 x (dot + tanh + counter add) + 8 condition checks
    assert g.flops[i] == 7 * (DOT + 32 + 1) + 8
    assert g.meta["loops"] == [{"trip_count": 7, "static": True}]
    assert g.dtype[i] == "f32"


@pytest.mark.parametrize("start, stop, step", [(2, 11, 3), (0, 0, 1), (5, 1, 1)])
def test_static_trip_counts_of_strided_and_empty_loops(tmp_path, start, stop, step):
    def f(x, w):
        def cond(c):
            return c[0] < stop

        def body(c):
            return c[0] + step, c[1] @ w

        return jax.lax.while_loop(cond, body, (start, x))[1]

    g = _load(tmp_path, f, X, W)
    trips = len(range(start, stop, step))
    assert g.meta["loops"] == [{"trip_count": trips, "static": True}]
    assert g.flops[_only(g, "stablehlo.while")] == trips * (DOT + 1) + (trips + 1)


def test_data_dependent_loop_uses_the_spec_estimate(tmp_path):
    def f(x, w):
        return jax.lax.while_loop(lambda h: jnp.sum(h) < 100.0, lambda h: h @ w, x)

    g1 = _load(tmp_path, f, X, W)
    g5 = load_model(tmp_path / "m.mlir", loop_trip_count=5)
    assert g1.meta["loops"] == [{"trip_count": 1, "static": False}]
    assert g5.meta["loops"] == [{"trip_count": 5, "static": False}]
    cond = 4 * 8 - 1 + 1  # the sum and the compare
    i = _only(g1, "stablehlo.while")
    assert g1.flops[i] == DOT + 2 * cond
    assert g5.flops[i] == 5 * DOT + 6 * cond


def test_scan_over_stacked_weights(tmp_path):
    def f(x, ws):
        return jax.lax.scan(lambda c, w: (c @ w, None), x, ws)[0]

    g = _load(tmp_path, f, X, S((5, 8, 8), jnp.float32))
    assert g.meta["loops"] == [{"trip_count": 5, "static": True}]
    assert g.flops[_only(g, "stablehlo.while")] == 5 * (DOT + 1) + 6


def test_case_costs_its_most_expensive_branch_and_captures_become_edges(tmp_path):
    branches = [lambda a, w: a @ w, lambda a, w: jnp.sin(a), lambda a, w: (a @ w) @ w]
    g = _load(tmp_path, lambda i, x, w: jax.lax.switch(i, branches, x, w), S((), jnp.int32), X, W)
    i = _only(g, "stablehlo.case")
    assert g.flops[i] == 2 * DOT
    # the branches read x and w from the entry function: both are uses by the case node
    used = {int(v) for v, d in zip(g.edge_value, g.edge_dst, strict=True) if d == i}
    x_value, w_value = g.args[1].value, g.args[2].value
    assert {x_value, w_value} <= used


def test_func_call_is_costed_at_every_call_site(tmp_path):
    @jax.jit
    def layer(h, w):
        return jnp.tanh(h @ w)

    def f(x, w):
        return layer(layer(layer(x, w), w), w)

    g = _load(tmp_path, f, X, W)
    calls = [k for k, kd in enumerate(g.kind) if kd == "func.call"]
    text = (tmp_path / "m.mlir").read_text()
    assert text.count("func.func private") == 1  # one callee, three call sites
    assert len(calls) == 3
    assert all(g.flops[k] == DOT + 32 for k in calls)
    assert g.total_flops == 3 * (DOT + 32)


def test_composite_is_costed_by_its_decomposition(tmp_path):
    def f(x, w):
        return jax.lax.composite(lambda x, w: jnp.tanh(x @ w) * 2.0, name="acme.dense_tanh")(x, w)

    g = _load(tmp_path, f, X, W)
    i = _only(g, "stablehlo.composite")
    assert g.flops[i] == DOT + 32 + 32
    assert not g.meta["unknown_ops"]


def test_nested_control_flow(tmp_path):
    def f(x, w):
        def outer(i, h):
            return jax.lax.fori_loop(0, 3, lambda j, k: k @ w, h)

        return jax.lax.fori_loop(0, 2, outer, x)

    g = _load(tmp_path, f, X, W)
    inner = 3 * (DOT + 1) + 4
    assert g.flops[_only(g, "stablehlo.while")] == 2 * (inner + 1) + 3
    assert [loop["trip_count"] for loop in g.meta["loops"]] == [3, 2]


def test_recursive_and_missing_callees_are_input_errors(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}""")
    with pytest.raises(InputError, match=r"@f calls itself \(recursion: @f -> @f\)"):
        load_model(bad)

"""FLOPs, bytes, dtypes and dimension roles against XLA's own cost analysis and hand counts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import planmap.export as E
from planmap.examples.models import EXAMPLES
from planmap.frontend import load_model
from planmap.graph import DimRoles
from tests.frontend.helpers import abstract_args, xla_flops

S = jax.ShapeDtypeStruct


@pytest.mark.parametrize("name", ["mlp", "gpt", "cnn"])
@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_example_model_flops_within_5_percent_of_xla(models_dir, name, train):
    model = EXAMPLES[name]
    fn = model.train_step() if train else model.forward
    graph = load_model(models_dir / f"{name}{'_train' if train else ''}.mlir")
    expected = xla_flops(fn, *abstract_args(model, train))
    assert graph.total_flops == pytest.approx(expected, rel=0.05)


def _load(tmp_path, fn, *args, name="m"):
    return load_model(E.jax(fn, *args, path=tmp_path / f"{name}.mlir"))


@pytest.mark.parametrize("groups", [
    dict(feature_group_count=1), dict(feature_group_count=4), dict(feature_group_count=16),
    dict(batch_group_count=2),
], ids=["dense", "grouped", "depthwise", "batch-grouped"])
@pytest.mark.parametrize("stride, padding, lhs_dil, rhs_dil", [
    ((1, 1), "SAME", (1, 1), (1, 1)), ((2, 2), "VALID", (1, 1), (1, 1)), ((1, 1), ((2, 1), (0, 3)), (2, 2), (1, 1)),
    ((1, 2), "SAME", (1, 1), (2, 2)),
], ids=["same", "strided", "lhs-dilated", "rhs-dilated"])
def test_convolution_flops_are_exact(tmp_path, groups, stride, padding, lhs_dil, rhs_dil):
    fgc, bgc = groups.get("feature_group_count", 1), groups.get("batch_group_count", 1)
    cin, cout = 16, 32
    x = S((4 * bgc, 9, 11, cin), jnp.float32)
    w = S((3, 3, cin // fgc, cout), jnp.float32)

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, stride, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"), **groups)

    g = _load(tmp_path, conv, x, w)
    (i,) = [k for k, kind in enumerate(g.kind) if kind == "stablehlo.convolution"]
    assert g.flops[i] == xla_flops(conv, x, w)
    d = g.dims[i]
    assert (d.op, d.lhs_batch, d.lhs_contracting, d.lhs_spatial) == ("convolution", (0,), (3,), (1, 2))
    assert (d.rhs_contracting, d.rhs_free, d.rhs_spatial, d.out_rhs_free) == ((2,), (3,), (0, 1), (3,))
    assert (d.feature_group_count, d.batch_group_count) == (fgc, bgc)


def test_dot_general_flops_dims_and_operand_dtype(tmp_path):
    def f(a, b):
        return jnp.einsum("bik,bkj->bij", a, b, preferred_element_type=jnp.float32)

    g = _load(tmp_path, f, S((3, 4, 5), jnp.bfloat16), S((3, 5, 6), jnp.bfloat16))
    (i,) = [k for k, kind in enumerate(g.kind) if kind == "stablehlo.dot_general"]
    assert g.flops[i] == 2 * 3 * 4 * 6 * 5
    assert g.dtype[i] == "bf16"  # the operand type selects the peak, not the f32 result
    assert g.outputs[i][0].dtype == "f32"
    assert g.dims[i] == DimRoles(op="dot_general", lhs_batch=(0,), rhs_batch=(0,), lhs_contracting=(2,),
                                 rhs_contracting=(1,), lhs_free=(1,), rhs_free=(2,), out_batch=(0,),
                                 out_lhs_free=(1,), out_rhs_free=(2,))
    assert g.bytes_accessed[i] == (3 * 4 * 5 + 3 * 5 * 6) * 2 + 3 * 4 * 6 * 4


def test_legacy_dot_from_tensorflow(fixtures_dir):
    g = load_model(fixtures_dir / "tf_mlp.mlir")
    dots = [k for k, kind in enumerate(g.kind) if kind == "stablehlo.dot"]
    assert len(dots) == 4
    first = dots[0]
    assert g.flops[first] == 2 * 32 * 256 * 512
    assert g.dims[first] == DimRoles(op="dot", lhs_contracting=(1,), rhs_contracting=(0,), lhs_free=(0,),
                                     rhs_free=(1,), out_lhs_free=(0,), out_rhs_free=(1,))


def test_reductions_elementwise_and_data_movement(tmp_path):
    def f(x):
        s = jnp.sum(x, axis=1)  # reduce: (8*16 - 8) adds
        m = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 4), (1, 2), "VALID")  # 8x7 outputs, 3 maxes each
        e = jnp.exp(x) * 2.0  # 128 + 128 (the broadcast of 2.0 is free)
        return s, m, e.T

    g = _load(tmp_path, f, S((8, 16), jnp.float32))
    by_kind: dict[str, float] = {}
    for k, fl in zip(g.kind, g.flops, strict=True):
        by_kind[k] = by_kind.get(k, 0.0) + fl
    assert by_kind["stablehlo.reduce"] == 8 * 16 - 8
    assert by_kind["stablehlo.reduce_window"] == 8 * 7 * 3
    assert by_kind["stablehlo.exponential"] == 128 and by_kind["stablehlo.multiply"] == 128
    assert by_kind["stablehlo.transpose"] == 0 and by_kind["stablehlo.broadcast_in_dim"] == 0


def test_a_value_used_twice_by_one_op_is_one_edge_and_read_once(tmp_path):
    g = _load(tmp_path, lambda x: x * x, S((4, 8), jnp.float32))
    (i,) = [k for k, kind in enumerate(g.kind) if kind == "stablehlo.multiply"]
    assert list(g.edge_dst).count(i) == 1
    assert g.bytes_accessed[i] == 2 * 4 * 8 * 4  # read x once, write the result


def test_constants_are_resident_state(tmp_path):
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    g = _load(tmp_path, lambda x: x @ jnp.asarray(table), S((2, 8), jnp.float32))
    (c,) = [k for k, kind in enumerate(g.kind) if kind == "stablehlo.constant" and g.out_bytes[k] == 256]
    assert g.state_bytes[c] == 256 and g.flops[c] == 0


def test_every_op_of_the_registered_dialects_has_a_cost_formula():
    import inspect

    from jaxlib.mlir.dialects import chlo, sdy, stablehlo

    from planmap.frontend.costs import is_known

    names = {getattr(c, "OPERATION_NAME", None) for mod in (stablehlo, chlo, sdy)
             for _, c in inspect.getmembers(mod, inspect.isclass)} - {None}
    assert len(names) > 150
    assert sorted(n for n in names if not is_known(n)) == []


def test_legacy_einsum_ops(tmp_path):
    path = tmp_path / "einsum.mlir"
    path.write_text("""
func.func @main(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3xf32> {
  %0 = "stablehlo.einsum"(%a, %b) {einsum_config = "bik,bkj->bij"}
      : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  %1 = "stablehlo.unary_einsum"(%0) {einsum_config = "bij->bi"} : (tensor<2x3x5xf32>) -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}""")
    g = load_model(path)
    assert list(g.flops) == [2 * 2 * 3 * 4 * 5, 2 * 3 * 5]
    assert not g.meta["unknown_ops"]

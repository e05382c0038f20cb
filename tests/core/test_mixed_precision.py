"""Mixed-precision training memory (issue 16 item 3): bf16 weights and gradients, f32 master weights
and optimizer state; ``model.masterDtype`` in the spec."""

from __future__ import annotations

import pytest

from tests.core.test_cost import cluster

jax = pytest.importorskip("jax")
jnp = jax.numpy

D = 64


def _model(x, w, scale):
    return ((x @ w).astype(jnp.float32) * scale).sum()


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    from planmap.export import jax as export_jax
    from planmap.frontend import load_model

    path = tmp_path_factory.mktemp("mixed") / "m.mlir"
    export_jax(_model, jax.ShapeDtypeStruct((8, D), jnp.bfloat16), jax.ShapeDtypeStruct((D, D), jnp.bfloat16),
               jax.ShapeDtypeStruct((D,), jnp.float32), path=path)
    return load_model(path, arguments={"data": ["x"], "parameters": ["w", "scale"]})


def test_master_copy_and_state_in_f32(graph):
    from planmap.cost import CostModel

    w, s = D * D, D  # elements: bf16 matrix, f32 vector
    params = 2 * w + 4 * s
    plain = CostModel.build(graph, cluster(), mode="training", optimizer="adam")
    mixed = CostModel.build(graph, cluster(), mode="training", optimizer="adam", master_dtype="f32")
    assert plain.param_factor == 4.0  # weights, gradients, two Adam moments, all in the parameter dtype
    # bf16 matrix: weights + grads 2+2, f32 master 4, Adam 2 x 4 -> 16 bytes/element; the f32 vector:
    # weights + grads 4+4, no extra master (already f32), Adam 2 x 4 -> 16 bytes/element
    assert mixed.param_factor == pytest.approx((16 * w + 16 * s) / params)
    sgd = CostModel.build(graph, cluster(), mode="training", optimizer="sgd", master_dtype="f32")
    assert sgd.param_factor == pytest.approx((8 * w + 8 * s) / params)
    inference = CostModel.build(graph, cluster(), master_dtype="f32")
    assert inference.param_factor == 1.0


def test_unknown_master_dtype_is_an_input_error(graph):
    from planmap.cost import CostModel
    from planmap.errors import InputError

    with pytest.raises(InputError, match="master dtype"):
        CostModel.build(graph, cluster(), mode="training", master_dtype="i8")


def test_spec_key(tmp_path):
    from pathlib import Path

    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    root = Path(__file__).resolve().parents[2] / "specs"
    text = (root / "gpt-train-8dev.yaml").read_text().replace("    optimizer: adam\n",
                                                              "    optimizer: adam\n    masterDtype: f32\n")
    text = text.replace("models/", f"{root}/models/").replace("clusters/", f"{root}/clusters/")
    (tmp_path / "s.yaml").write_text(text)
    problem = build_problem(load_spec(tmp_path / "s.yaml"))
    assert problem.cost.master_dtype == "f32"
    assert problem.cost.param_factor == pytest.approx(4.0)  # the GPT's parameters are f32: no extra copy

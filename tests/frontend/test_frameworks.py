"""TensorFlow and PyTorch exports of the example MLP give the FLOPs of the JAX export.

The fixtures are committed (tools/export_tf_fixture.py, tools/export_torch_fixture.py regenerate them);
neither framework is needed to run these tests.
"""

from __future__ import annotations

import pytest

from planmap.frontend import coarsen, load_model
from planmap.frontend.mlir import detect_format, read_bytes


@pytest.fixture(scope="module")
def jax_mlp(models_dir):
    return load_model(models_dir / "mlp.mlir")


@pytest.mark.parametrize("fixture, fmt", [("tf_mlp.mlir", "stablehlo"), ("tf_mlp.mlirbc", "mlirbc"),
                                          ("torch_mlp.mlir", "stablehlo")])
def test_framework_exports_match_the_jax_flops(fixtures_dir, jax_mlp, fixture, fmt):
    path = fixtures_dir / fixture
    assert detect_format(read_bytes(path)) == fmt
    g = load_model(path)
    assert g.total_flops == pytest.approx(jax_mlp.total_flops, rel=0.05)
    # same parameters, same data
    assert sorted(int(g.value_bytes[a.value]) for a in g.args if a.role == "param") == sorted(
        int(jax_mlp.value_bytes[a.value]) for a in jax_mlp.args if a.role == "param")
    assert [str(a.type) for a in g.args if a.role == "data"] == ["tensor<32x256xf32>"]
    # four matmuls, each its own node after fusion
    c = coarsen(g, "fuse")
    assert sum(d is not None for d in c.dims) == 4


def test_tensorflow_text_and_bytecode_agree(fixtures_dir):
    text, blob = load_model(fixtures_dir / "tf_mlp.mlir"), load_model(fixtures_dir / "tf_mlp.mlirbc")
    assert text.kind == blob.kind and text.total_flops == blob.total_flops
    assert text.args[0].name == "XLA_Args"  # TF names every argument alike: roles fall back to positions

"""TensorFlow and PyTorch exports of the example MLP give the FLOPs of the JAX export.

The fixtures are committed (tools/export_tf_fixture.py, tools/export_torch_fixture.py regenerate them);
neither framework is needed to run these tests.
"""

from __future__ import annotations

import pytest

from planmap.frontend import coarsen, load_model
from planmap.frontend.mlir import detect_format, read_bytes
from tests.frontend.conftest import FIXTURES


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


@pytest.mark.parametrize("fixture", ["tf_mlp.mlir", "tf_mlp.mlirbc"])
def test_tensorflow_numbered_op_names_give_layers(fixtures_dir, fixture):
    """TF numbers op names per type (MatMul, MatMul_1, ...): number k is layer k, named ``layer{k}``."""
    g = load_model(fixtures_dir / fixture)
    assert g.meta["layer_names"] == ["layer0", "layer1", "layer2", "layer3"]
    c = coarsen(g, "auto")
    assert c.meta["coarsening"]["method"] == "names"
    assert list(c.op_name) == ["layer0", "layer1", "layer2", "layer3"]


def test_unnamed_repeated_blocks_get_block_names(tmp_path):
    """torchax exports name every op ``jit(func)/<primitive>`` (no module path), like a JAX function
    without named scopes: repeated layers are found from structure and named ``block{k}``."""
    jax = pytest.importorskip("jax")
    from planmap.export import jax as export_jax

    def blocks(x, ws):
        for w1, w2 in ws:
            x = jax.nn.relu(x @ w1) @ w2 + x
        return x

    f32 = jax.numpy.float32
    pair = (jax.ShapeDtypeStruct((64, 128), f32), jax.ShapeDtypeStruct((128, 64), f32))
    g = load_model(export_jax(blocks, jax.ShapeDtypeStruct((8, 64), f32), [pair] * 4, path=tmp_path / "b.mlir"))
    assert {n.split("/")[0] for n in g.op_name} == {"jit(blocks)"}
    c = coarsen(g, "auto")
    assert c.meta["coarsening"]["method"] == "structure"
    assert list(c.op_name) == c.meta["layer_names"] == ["block0", "block1", "block2", "block3"]
    assert load_model(FIXTURES / "torch_mlp.mlir").meta["layer_names"] == []  # four different shapes: no repeat

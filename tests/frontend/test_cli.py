"""`planmap inspect` and `planmap export` through the console entry point."""

from __future__ import annotations

import json

import pytest

from planmap.cli import main


def test_inspect_prints_counts_flops_and_coarsening(models_dir, capsys):
    assert main(["inspect", str(models_dir / "gpt_train.mlir"), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "gpt_train (stablehlo): 1,092 ops" in out
    assert "stablehlo.dot_general" in out and "heaviest ops" in out and "heaviest layers" in out
    assert "coarsened: 1,092 ops -> 82 fused nodes -> 12 layer nodes, 4 repeated layers found by names" in out
    assert "training step: 560 backward ops" in out


def test_inspect_json(models_dir, capsys):
    assert main(["inspect", str(models_dir / "cnn.mlir"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ops"] == 79 and doc["op_counts"]["stablehlo.convolution"] == 15
    assert doc["parameter_bytes"] > 0 and doc["data_bytes"] == 8 * 32 * 32 * 3 * 4
    assert doc["coarsened"]["layers"]["repeated_layers"] == 6
    assert len(doc["heaviest_ops"]) == 10 and doc["heaviest_ops"][0]["kind"] == "stablehlo.convolution"
    assert doc["unknown_op_kinds"] == {}


def test_inspect_reports_unknown_op_kinds(tmp_path, capsys):
    path = tmp_path / "foreign.mlir"
    path.write_text('func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
                    '  %0 = "acme.magic"(%x) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n')
    assert main(["inspect", str(path)]) == 0
    captured = capsys.readouterr()
    assert "no cost formula for 1 op kind(s)" in captured.err
    assert "op kinds without a cost formula (costed from bytes): acme.magic (1)" in captured.out


def test_inspect_a_corrupt_file_exits_1_with_the_file_name(tmp_path, capsys):
    path = tmp_path / "broken.vhlo"
    path.write_bytes(b"ML\xefR\x00garbage")
    assert main(["inspect", str(path)]) == 1
    assert f"{path}: error[input]:" in capsys.readouterr().err


def test_export_from_abstract_shapes_then_inspect(tmp_path, capsys):
    module = tmp_path / "tiny_model.py"
    module.write_text("import jax.numpy as jnp\n\ndef forward(x, w):\n    return jnp.tanh(x @ w)\n")
    out = tmp_path / "tiny.mlir"
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["export", "tiny_model:forward", "--arg", "f32[8,128]", "--arg", "bf16[128,64]",
                     "-o", str(out)]) == 0
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tiny_model", None)
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    assert "tensor<8x128xf32>" in text and "tensor<128x64xbf16>" in text
    assert main(["inspect", str(out), "--json"]) == 0
    # the dot, the tanh, and JAX's converts of both operands to the common type f32
    assert json.loads(capsys.readouterr().out)["flops"] == 2 * 8 * 128 * 64 + 8 * 64 + 8 * 128 + 128 * 64


def test_export_with_args_from_a_function(tmp_path, capsys):
    out = tmp_path / "mlp.jaxexport"
    assert main(["export", "planmap.examples.models:mlp.forward", "--args-from",
                 "tests.frontend.helpers:mlp_args", "-o", str(out)]) == 0
    assert main(["inspect", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert doc["format"] == "exported" and doc["ops"] == 19


@pytest.mark.parametrize("argv, message", [
    (["export", "nosuchmodule_xyz:f", "--arg", "f32[2]", "-o", "x.mlir"], "cannot import module 'nosuchmodule_xyz'"),
    (["export", "planmap.examples.models:nope", "--arg", "f32[2]", "-o", "x.mlir"], "has no attribute 'nope'"),
    (["export", "planmap.examples.models:mlp.forward", "--arg", "f32(2)", "-o", "x.mlir"], "DTYPE[DIMS]"),
    (["export", "planmap.examples.models:mlp.forward", "--arg", "q7[2]", "-o", "x.mlir"], "unknown dtype 'q7'"),
    (["export", "planmap.examples.models:mlp.forward", "--arg", "f32[2]", "-o", "x.txt"], "suffixes"),
])
def test_export_mistakes_exit_1(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    assert message in capsys.readouterr().err

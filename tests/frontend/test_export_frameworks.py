"""`planmap export --from jax|torch|tf` on the example models under examples/export/.

torch with torchax is the ``export`` extra (part of ``all``, so these tests run in CI); TensorFlow is not
installable against the project's pins: its tests skip without it (tests/frontend/test_tf_fixture.py runs the
committed TF export instead). The exports must give the example MLP's FLOPs and parameters (the committed
fixtures, tests/fixtures/*_mlp.mlir, are the reference)."""

from __future__ import annotations

import importlib.util

import pytest

from planmap.cli import main
from planmap.frontend import load_model


def _missing(*modules: str) -> bool:
    return any(importlib.util.find_spec(m) is None for m in modules)


@pytest.fixture
def examples(root):
    return root / "examples" / "export"


def _assert_is_the_mlp(path, fixtures_dir):
    g, ref = load_model(path), load_model(fixtures_dir / "torch_mlp.mlir")
    assert g.total_flops == pytest.approx(ref.total_flops, rel=0.05)
    assert sorted(int(g.value_bytes[a.value]) for a in g.args if a.role == "param") == sorted(
        int(ref.value_bytes[a.value]) for a in ref.args if a.role == "param")


def test_export_jax_from_a_file(examples, fixtures_dir, tmp_path):
    src = examples / "jax_mlp.py"
    assert main(["export", f"{src}:forward", "--args-from", f"{src}:example_args", "-o", str(tmp_path / "m.mlir")]) == 0
    _assert_is_the_mlp(tmp_path / "m.mlir", fixtures_dir)


@pytest.mark.skipif(_missing("torch", "torchax"), reason="needs torch and torchax")
def test_export_torch_module_is_the_committed_fixture(examples, fixtures_dir, tmp_path):
    out = tmp_path / "t.mlir"
    assert main(["export", "--from", "torch", f"{examples / 'torch_mlp.py'}:model", "--arg", "f32[32,256]",
                 "-o", str(out)]) == 0
    assert out.read_bytes() == (fixtures_dir / "torch_mlp.mlir").read_bytes()


@pytest.mark.skipif(_missing("tensorflow"), reason="needs tensorflow")
@pytest.mark.parametrize("suffix", [".mlir", ".mlirbc"])
def test_export_keras_model(examples, fixtures_dir, tmp_path, suffix):
    out = tmp_path / f"k{suffix}"
    assert main(["export", "--from", "tf", f"{examples / 'keras_mlp.py'}:model", "--arg", "f32[32,256]",
                 "-o", str(out)]) == 0
    _assert_is_the_mlp(out, fixtures_dir)


def test_export_rejects_an_unknown_framework_and_a_missing_one(examples, tmp_path, capsys):
    assert main(["export", "--from", "mxnet", "x:y", "-o", str(tmp_path / "m.mlir")]) == 1
    assert "--from requires one of jax, torch, tf" in capsys.readouterr().err
    if _missing("tensorflow"):
        assert main(["export", "--from", "tf", f"{examples / 'keras_mlp.py'}:model", "--arg", "f32[32,256]",
                     "-o", str(tmp_path / "k.mlir")]) == 1
        assert "tensorflow" in capsys.readouterr().err


def test_tf_model_factories_are_called_and_forward_functions_are_not():
    """``keras_mlp.py:model`` builds the model (call it); ``def forward(x)`` is the model (trace it)."""
    from planmap.cli.frontend_cmds import _is_factory

    def model():
        return None

    def configured(width=8, **kw):
        return None

    def forward(x):
        return x

    def many(*xs):
        return xs

    assert _is_factory(model) and _is_factory(configured)
    assert not _is_factory(forward) and not _is_factory(many) and not _is_factory(len)


@pytest.mark.skipif(_missing("tensorflow"), reason="needs tensorflow")
def test_export_a_tf_saved_model_directory(examples, fixtures_dir, tmp_path):
    import tensorflow as tf

    from planmap.cli.frontend_cmds import _import_file

    net = _import_file(examples / "keras_mlp.py").model()
    net(tf.zeros((32, 256)))
    tf.saved_model.save(net, str(tmp_path / "sm"))
    del net  # the export must hold the loaded SavedModel's variables itself
    out = tmp_path / "sm.mlir"
    assert main(["export", "--from", "tf", str(tmp_path / "sm"), "--arg", "f32[32,256]", "-o", str(out)]) == 0
    _assert_is_the_mlp(out, fixtures_dir)

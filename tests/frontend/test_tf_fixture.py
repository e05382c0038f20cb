"""A real TensorFlow export, without TensorFlow: parse, solve and run the committed Keras fixture.

tests/fixtures/keras_mlp.{mlir,mlirbc} were written by ``planmap export --from tf`` from
examples/export/keras_mlp.py, keras_mlp_savedmodel.mlir from that model saved as a SavedModel (commands and
versions: tests/fixtures/keras_mlp.PROVENANCE.md). The example MLP must come out with the JAX export's FLOPs
and parameters, its inputs before its Keras variables, and the plan solved for it must run sharded and match
the unsharded artifact.
"""

from __future__ import annotations

import shutil

import pytest

from planmap.cli import main
from planmap.frontend import coarsen, load_model
from planmap.frontend.mlir import detect_format, read_bytes

SPEC = """apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata: {name: keras-mlp}
spec:
  model: {source: keras_mlp.mlir, mode: inference, globalBatch: 64, microbatches: 2}
  cluster: cluster.yaml
  objective: {kind: throughput}
  solver: {name: dp}
  constraints: {placement: contiguous, schedule: gpipe}
"""


@pytest.mark.parametrize("name, fmt", [("keras_mlp.mlir", "stablehlo"), ("keras_mlp.mlirbc", "mlirbc"),
                                       ("keras_mlp_savedmodel.mlir", "stablehlo")])
def test_keras_export_is_the_example_mlp(fixtures_dir, models_dir, name, fmt):
    path = fixtures_dir / name
    assert detect_format(read_bytes(path)) == fmt
    g, jax_mlp = load_model(path), load_model(models_dir / "mlp.mlir")
    assert g.total_flops == jax_mlp.total_flops
    assert [a.role for a in g.args] == ["data"] + ["param"] * 8  # Keras variables come after the input
    assert sorted(int(g.value_bytes[a.value]) for a in g.args if a.role == "param") == sorted(
        int(jax_mlp.value_bytes[a.value]) for a in jax_mlp.args if a.role == "param")
    c = coarsen(g, "fuse")
    assert sum(d is not None for d in c.dims) == 4  # four Dense matmuls


@pytest.mark.slow
def test_keras_export_solves_and_runs_verified(fixtures_dir, specs_dir, tmp_path, monkeypatch, capsys):
    shutil.copy(fixtures_dir / "keras_mlp.mlir", tmp_path)
    shutil.copy(specs_dir / "clusters" / "h100-1x8.yaml", tmp_path / "cluster.yaml")
    (tmp_path / "keras.yaml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    assert main(["solve", "keras.yaml", "-o", "keras.plan.yaml", "-q"]) == 0
    assert main(["check", "keras.plan.yaml"]) == 0
    capsys.readouterr()
    assert main(["run", "keras.plan.yaml", "--steps", "1", "--verify"]) == 0
    out = capsys.readouterr().out
    err = float(out.split("max error:")[1].split()[0])
    assert err < 1e-4 and "verify:" in out

"""``planmap run --verify`` from random inputs: finite references, and clear words when they are not.

A CNN with batch norm (inference statistics as arguments) is the case that used to fail: random
normal parameters give negative variances, so the single-device reference was all NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from planmap.cli import main
from planmap.export import jax as export_jax
from planmap.frontend import load_model
from planmap.plan.manual import device_names as devs
from planmap.plan.manual import stage
from planmap.plan.manual import write_plan as write_manual_plan
from planmap.runtime.artifact import Artifact
from planmap.runtime.inputs import input_domains

B = 8
F32 = jnp.float32


def _bn_cnn(x, kernel, mean, var, gamma, beta, dense):
    y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = (y - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta
    y = jnp.maximum(y, 0.0).mean(axis=(1, 2))
    return y @ dense


def _sqrt_of_shifted(x, w):
    return jnp.sqrt(x - 10.0) @ w  # NaN for inputs below 10: the reference itself is not finite


def _dead_relu(x, w, b):
    return jnp.maximum(x @ w - 1e4, 0.0) + b  # every row equals b: the output ignores the inputs


def _plan(tmp_path, fn, shapes, name):
    artifact = export_jax(fn, *[jax.ShapeDtypeStruct(s, F32) for s in shapes], path=tmp_path / f"{name}.mlir")
    n = load_model(artifact).num_nodes
    return write_manual_plan(tmp_path / f"{name}.plan.yaml", artifact, [stage(devs(1), [(0, n)])], data_args=[0])


BN_SHAPES = [(B, 16, 16, 3), (3, 3, 3, 8), (8,), (8,), (8,), (8,), (8, 10)]


def test_batch_norm_variance_is_drawn_positive(tmp_path):
    _plan(tmp_path, _bn_cnn, BN_SHAPES, "bn")
    domains = input_domains(Artifact.from_file(tmp_path / "bn.mlir"))
    assert [d.positive for d in domains] == [False, False, False, True, False, False, False]


def test_run_verify_passes_on_a_cnn_with_batch_norm(tmp_path, capsys):
    plan = _plan(tmp_path, _bn_cnn, BN_SHAPES, "bn")
    assert main(["run", str(plan), "--unchecked", "--steps", "1", "--verify"]) == 0
    out = capsys.readouterr().out
    err = float(out.split("max error:")[1].split()[0])
    assert np.isfinite(err) and err < 1e-4
    assert "same for every sample" not in out


def test_run_verify_says_when_the_reference_is_not_finite(tmp_path, capsys):
    plan = _plan(tmp_path, _sqrt_of_shifted, [(B, 4), (4, 4)], "nan")
    assert main(["run", str(plan), "--unchecked", "--steps", "1", "--verify"]) == 1
    assert "the single-device reference itself is not finite" in capsys.readouterr().err


def test_run_verify_warns_when_outputs_ignore_the_inputs(tmp_path, capsys):
    plan = _plan(tmp_path, _dead_relu, [(B, 4), (4, 4), (4,)], "dead")
    assert main(["run", str(plan), "--unchecked", "--steps", "1", "--verify"]) == 0
    assert "is the same for every sample" in capsys.readouterr().out

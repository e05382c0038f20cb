"""Predicted vs measured step time of a profiled training program on the local CPU device (issue 16 item 5).

A small training step (three layers with layer norms, value_and_grad, an SGD update) is exported, profiled
with ``planmap profile`` (its nodes one by one and the whole program), and named in a spec as
``cost.profile``; the single-device problem's predicted step (the node times in context plus one call)
is compared with the step measured afterwards on its own: within 2x either way, in one of three
attempts. The tolerance is loose because this 2-core machine is shared (under load a program's
minimum over a few rounds moves by 2x and more between passes), and still fails for a model that
misses the whole program's context (nodes alone can be 2-5x off on training programs under load) or
charges roofline or launch terms on top of the measured times.
"""

from __future__ import annotations

import pytest

from planmap.cli import main

jax = pytest.importorskip("jax")
jnp = jax.numpy

B, W = 64, 256

SPEC = """\
apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata: {name: profiled-step}
spec:
  model: {source: step.mlir, arguments: {data: [x, y], parameters: ["w*"]}}
  cluster:
    deviceTypes:
      - {name: host-cpu, kind: cpu, memory: 8GiB, memoryBandwidth: 20GB/s,
         peakFlops: [{dtype: f32, rate: 100GFLOP/s}], efficiency: 0.5}
    hosts: [{name: h, devices: [{name: cpu, type: host-cpu, count: 1}]}]
  objective: {kind: latency}
  constraints: {coarsening: fuse}
  cost: {profile: step.profile.json}
"""


def _norm(h):
    mu = h.mean(-1, keepdims=True)
    return (h - mu) * jax.lax.rsqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def _step(x, y, w1, w2, w3):
    def loss(ws):
        h = x
        for w in ws:
            h = h + jnp.tanh(_norm(h) @ w)
        return ((h - y) ** 2).mean()

    value, grads = jax.value_and_grad(loss)((w1, w2, w3))
    return (value, *(w - 0.1 * g for w, g in zip((w1, w2, w3), grads, strict=True)))


def test_profiled_training_step_predicts_the_measured_step(tmp_path):
    from planmap.assemble import build_problem
    from planmap.export import jax as export_jax
    from planmap.profile import load_profile
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.profile import _empty_program, time_rounds, whole_program
    from planmap.spec import load_spec

    x = jax.ShapeDtypeStruct((B, W), jnp.float32)
    w = jax.ShapeDtypeStruct((W, W), jnp.float32)
    export_jax(_step, x, x, w, w, w, path=tmp_path / "step.mlir")
    (tmp_path / "spec.yaml").write_text(SPEC)
    dev = jax.local_devices()[0]
    step = whole_program(Artifact.from_file(tmp_path / "step.mlir"), dev)
    ratios = []
    for _ in range(3):  # a burst of load can hit one pass; a wrong model misses in every attempt
        assert main(["profile", str(tmp_path / "step.mlir"), "-o", str(tmp_path / "step.profile.json"), "--stat",
                     "min", "--repeats", "7", "-q"]) == 0
        prof = load_profile(tmp_path / "step.profile.json")
        assert prof.program_seconds is not None and prof.program_seconds > 0
        node_times = build_problem(load_spec(tmp_path / "spec.yaml")).cost.compute[:, 0]
        assert node_times.sum() == pytest.approx(prof.program_seconds)  # the node times in context
        predicted = node_times.sum() + prof.call_overhead  # one call of the stage's program per step
        measured = float(time_rounds([_empty_program(dev), step], 2, 7).min(axis=0)[1])
        ratios.append(predicted / measured)
        if 0.5 <= ratios[-1] <= 2.0:
            break
    assert 0.5 <= ratios[-1] <= 2.0, ratios

"""``planmap profile`` (issue 16 item 5): measured node times on the local CPU device feed the cost model.

A small MLP is exported, profiled on one real CPU device, and named in a spec as ``cost.profile``; the
problem's node times are then the measured ones (no launch term), the plan records the profile as an
input (re-profiling stales it), and a profile of another model is refused.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from planmap.cli import main

jax = pytest.importorskip("jax")
jnp = jax.numpy

B, W = 32, 256


def _mlp(x, w1, w2, w3):
    return jnp.tanh(jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3).sum()


SPEC = """\
apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata: {{name: profiled}}
spec:
  model: {{source: m.mlir, arguments: {{data: [x], parameters: ["w*"]}}}}
  cluster:
    deviceTypes:
      - {{name: host-cpu, kind: cpu, memory: 8GiB, memoryBandwidth: 20GB/s,
         peakFlops: [{{dtype: f32, rate: 100GFLOP/s}}], efficiency: 0.5}}
    hosts: [{{name: h, devices: [{{name: cpu, type: host-cpu, count: 1}}]}}]
  objective: {{kind: latency}}
  constraints: {{coarsening: fuse}}
{cost}"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planmap.export import jax as export_jax

    tmp = tmp_path_factory.mktemp("profile")
    x = jax.ShapeDtypeStruct((B, W), jnp.float32)
    w = jax.ShapeDtypeStruct((W, W), jnp.float32)
    export_jax(_mlp, x, w, w, w, path=tmp / "m.mlir")
    assert main(["profile", str(tmp / "m.mlir"), "-o", str(tmp / "m.profile.json"), "--level", "fuse",
                 "--repeats", "3", "-q"]) == 0
    return tmp


def test_profile_file(model_dir):
    from planmap.frontend import load_model
    from planmap.profile import file_sha256, load_profile

    prof = load_profile(model_dir / "m.profile.json")
    ops = load_model(model_dir / "m.mlir").num_nodes
    assert prof.device_kind == "cpu" and prof.model_sha256 == file_sha256(model_dir / "m.mlir")
    assert len(prof.op_seconds) == ops and prof.repeats == 3
    secs = np.nan_to_num(prof.op_seconds)
    assert (secs >= 0).all() and secs.sum() > 0
    assert prof.call_overhead > 0


def test_spec_uses_the_profile_and_records_it(model_dir):
    from planmap.assemble import build_problem
    from planmap.profile import load_profile
    from planmap.spec import load_spec

    (model_dir / "plain.yaml").write_text(SPEC.format(cost=""))
    (model_dir / "prof.yaml").write_text(SPEC.format(cost="  cost: {profile: m.profile.json}\n"))
    plain, prof = (build_problem(load_spec(model_dir / f"{n}.yaml")) for n in ("plain", "prof"))
    measured = prof.graph.measured["cpu"]
    timed = load_profile(model_dir / "m.profile.json")
    assert timed.program_seconds is not None  # the whole program was timed too: node times in context
    assert measured.sum() == pytest.approx(np.nansum(timed.op_seconds) * timed.context_factor)
    assert measured.sum() == pytest.approx(timed.program_seconds)
    assert np.array_equal(prof.cost.compute[:, 0], measured)
    assert not np.array_equal(plain.cost.compute[:, 0], measured)
    assert prof.cost.launch.sum() == 0  # measured times include the launches
    out = model_dir / "prof.plan.yaml"
    assert main(["solve", str(model_dir / "prof.yaml"), "-o", str(out), "-q"]) == 0
    assert "role: profile" in out.read_text()
    assert main(["check", str(out)]) == 0
    doc = json.loads((model_dir / "m.profile.json").read_text())
    doc["op_seconds"] = [None if t is None else 2 * t for t in doc["op_seconds"]]
    (model_dir / "m.profile.json").write_text(json.dumps(doc))
    assert main(["check", str(out)]) == 2  # re-profiled: the plan is stale


def test_profile_of_another_model_is_refused(model_dir, tmp_path):
    from planmap.errors import InputError
    from planmap.frontend import coarsen, load_model
    from planmap.profile import apply_profile, load_profile

    g = load_model(model_dir / "m.mlir")
    with pytest.raises(InputError, match="profiled another model"):
        apply_profile(coarsen(g, "fuse"), g, load_profile(model_dir / "m.profile.json"), "0" * 64)
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(InputError, match="not a planmap profile"):
        load_profile(tmp_path / "bad.json")

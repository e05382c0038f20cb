"""Loading plans safely: stale artifacts refused, apply() checks the function is the planned artifact,
clear errors for too few devices and wrong arguments; plus the pure parts (schedule, input ranges)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import planmap.runtime as rt
from planmap.errors import InputError, PlanmapError, StalePlanError
from planmap.examples.models import mlp
from planmap.runtime.artifact import Artifact, canonical_text
from planmap.runtime.inputs import index_bound, random_inputs
from planmap.runtime.schedule import dispatch_order
from tests.runtime.conftest import leaves, mlp_batch, single_device
from tests.runtime.plans import MODELS, devs, stage, write_plan

MLP_OPS, MLP_X = 19, 8


def _two_stage(plan_dir, name="load"):
    return write_plan(plan_dir / name, "mlp", [stage(devs(2), [(0, 9)]), stage(devs(2, 2), [(9, MLP_OPS)])],
                      data_args=[MLP_X], name=name)


def test_a_changed_artifact_makes_the_plan_stale(tmp_path):
    path = _two_stage(tmp_path)
    artifact = path.parent / "mlp.mlir"
    artifact.write_text(artifact.read_text().replace("stablehlo.add", "stablehlo.subtract", 1))
    with pytest.raises(StalePlanError, match="stale") as e:
        rt.load(path, unchecked=True)
    assert "mlp.mlir" in str(e.value) and "regenerate" in str(e.value)


def test_apply_runs_the_planned_function_with_its_pytrees(plan_dir, mlp_params):
    path = _two_stage(plan_dir, "apply")
    x = mlp_batch(32)
    exe = rt.apply(path, mlp.forward, mlp_params, x, unchecked=True)
    y = exe(mlp_params, x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)
    shardings = exe.input_shardings
    assert set(shardings[0]) == {"layer0", "layer1", "layer2", "layer3"} and shardings[1] is not None


def test_apply_refuses_a_different_function(plan_dir, mlp_params):
    path = _two_stage(plan_dir, "apply")

    def tweaked(params, x):
        return mlp.forward(params, x) * 2.0

    with pytest.raises(PlanmapError, match="does not export to the planned artifact"):
        rt.apply(path, tweaked, mlp_params, mlp_batch(32), unchecked=True)


def test_canonical_text_ignores_names_and_locations():
    a = jax.export.export(jax.jit(lambda x: x * 2))(jax.ShapeDtypeStruct((3,), np.float32)).mlir_module()

    def double(y):
        return y * 2

    b = jax.export.export(jax.jit(double))(jax.ShapeDtypeStruct((3,), np.float32)).mlir_module()
    assert a != b and canonical_text(a) == canonical_text(b)


def test_too_few_devices_is_a_clear_error(plan_dir):
    path = write_plan(plan_dir, "mlp", [stage(devs(8), [(0, MLP_OPS)])], data_args=[MLP_X], mesh={"data": 8},
                      args={MLP_X: ["data", None]}, name="dp")
    with pytest.raises(PlanmapError, match="requires 8 devices"):
        rt.load(path, devices=jax.devices()[:3], unchecked=True)


def test_wrong_global_batch_names_the_microbatches(plan_dir, mlp_params):
    path = write_plan(plan_dir, "mlp", [stage(devs(1), [(0, MLP_OPS)])], data_args=[MLP_X], microbatches=4,
                      name="mb4")
    exe = rt.load(path, unchecked=True)
    with pytest.raises(InputError, match=r"requires shape \(128, 256\) \(4 microbatches x 32"):
        exe(*leaves(mlp.init(jax.random.PRNGKey(0))), mlp_batch(32))


def test_plan_for_another_artifact_is_refused(plan_dir):
    path = write_plan(plan_dir, "mlp", [stage(devs(1), [(0, 500)])], data_args=[MLP_X], name="toolong")
    with pytest.raises(InputError, match="has 19 ops"):
        rt.load(path, unchecked=True)


def test_random_inputs_index_within_the_vocabulary(plan_dir):
    art = Artifact.from_file(MODELS / "gpt_train.mlir")
    assert index_bound(art, art.arg_names.index("tokens")) == 512
    assert index_bound(art, art.arg_names.index("targets")) == 512
    assert index_bound(Artifact.from_file(MODELS / "cnn_train.mlir"), 30) == 10
    assert index_bound(Artifact.from_file(MODELS / "mlp.mlir"), MLP_X) is None
    exe = rt.load(_two_stage(plan_dir, "inputs"), unchecked=True)
    a = random_inputs(exe, seed=3)
    assert [x.shape for x in a] == [t.shape for t in exe.artifact.in_types]
    assert all(np.array_equal(x, y) for x, y in zip(a, random_inputs(exe, seed=3), strict=True))


def test_index_bound_follows_an_index_out_of_a_called_function():
    """torchax lowers an embedding lookup to jnp.take: the index passes through a private @_where call and comes
    back as the call's result before it reaches the gather (HF BERT's 2-row token-type table: values 0 and 1)."""
    art = Artifact.from_file(Path(__file__).resolve().parents[1] / "fixtures" / "thirdparty" / "hf_bert.mlir")
    bounds = {art.arg_names[i]: index_bound(art, i) for i in (37, 38, 39)}
    assert bounds == {"states[37]": 64, "states[38]": 2, "inputs[0][0]": 1024}


def test_gpipe_order_fills_the_pipeline_before_draining():
    order = dispatch_order("gpipe", 3, [0, 1, 2], [[], [0], [1]], [frozenset({0}), frozenset({1}), frozenset({2})])
    assert order == [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2), (2, 1), (1, 2), (2, 2)]


def test_1f1b_bounds_microbatches_in_flight():
    # 2 stages; stage 0 = forward (segment 0) + backward (segment 2), stage 1 = forward+backward (segment 1)
    seg_stage, deps = [0, 1, 0], [[], [0], [1]]
    for kind, bound in (("1f1b", 2), ("gpipe", 8)):
        order = dispatch_order(kind, 8, seg_stage, deps, [frozenset({0}), frozenset({1})])
        assert sorted(order) == [(m, g) for m in range(8) for g in range(3)]
        started = finished = peak = 0
        for m, g in order:
            started += g == 0
            finished += g == 2
            peak = max(peak, started - finished)
            assert all(order.index((m, d)) < order.index((m, g)) for d in deps[g])
        assert peak == bound

"""Pipeline plans: @main cut into stage modules on sub-meshes, microbatches streamed through.

Inference pipelines are compared with the full global batch through the model's JAX function on one
device; the training pipeline's averaged loss and gradients with the full-batch value-and-grad.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import planmap.runtime as rt
from planmap.errors import PlanmapError
from planmap.examples.models import gpt, mlp
from planmap.frontend.stablehlo import top_level_ops
from planmap.plan.build import op_ranges
from planmap.runtime.artifact import Artifact, entry_function, make_context
from tests.runtime.conftest import gpt_tokens, leaves, mlp_batch, single_device
from tests.runtime.plans import MODELS, devs, stage, write_plan

MLP_OPS, MLP_X = 19, 8


def test_two_stage_pipeline_matches_full_batch(plan_dir, mlp_params):
    path = write_plan(plan_dir, "mlp", [stage(devs(4), [(0, 9)]), stage(devs(4, 4), [(9, MLP_OPS)])],
                      data_args=[MLP_X], schedule="gpipe", microbatches=4, name="pp2")
    exe = rt.load(path, unchecked=True)
    x = mlp_batch(4 * 32)
    (y,) = exe(*leaves(mlp_params), x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)
    assert [s.device_ids for s in exe.segments] == [frozenset(range(4)), frozenset(range(4, 8))]
    # replicated stages: the microbatch is split over each stage's 'data' axis
    assert all(s.mesh.axes == (("data", 4),) for s in exe.segments)
    assert exe.segments[1].cut.inputs[-1] == (8, 0)  # the activation crossing the cut
    assert exe.combine == ("concat",)
    with pytest.raises(PlanmapError, match="profile"):
        exe.stage_times()
    exe.profile = True
    (y2,) = exe(*leaves(mlp_params), x)
    np.testing.assert_array_equal(np.asarray(y2), np.asarray(y))
    times = exe.stage_times()
    assert set(times) == {0, 1} and all(t > 0 for t in times.values())


def test_cheap_values_are_recomputed_not_sent(plan_dir, mlp_params):
    # cut between the bias broadcasts (ops 1, 2) and the add (op 3): the consumer re-broadcasts the bias
    path = write_plan(plan_dir, "mlp", [stage(devs(1), [(0, 3)]), stage(devs(1, 1), [(3, MLP_OPS)])],
                      data_args=[MLP_X], name="recompute")
    exe = rt.load(path, unchecked=True)
    producer, consumer = exe.segments
    assert consumer.cut.recompute == (1, 2)
    assert (2, 0) not in consumer.cut.inputs and (-1, 0) in consumer.cut.inputs
    assert producer.cut.outputs == ((0, 0),)  # only the matmul result crosses
    x = mlp_batch(32)
    (y,) = exe(*leaves(mlp_params), x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)


def test_four_stage_pipeline_with_a_sharded_stage(plan_dir, gpt_params):
    art = Artifact.from_file(MODELS / "gpt.mlir")
    n, tokens = art.n_ops, art.arg_names.index("tokens")
    cuts = [0, n // 4, n // 2, 3 * n // 4, n]
    tp = {i: ([None, "model"] if name.endswith(("['wqkv']", "['w1']")) else ["model", None])
          for i, name in enumerate(art.arg_names) if name.endswith(("['wqkv']", "['w1']", "['wo']", "['w2']"))}
    stages = [stage(devs(2, 2 * k), [(cuts[k], cuts[k + 1])], mesh={"model": 2} if k == 1 else None)
              for k in range(4)]
    path = write_plan(plan_dir, "gpt", stages, data_args=[tokens], schedule="gpipe", microbatches=4, args=tp,
                      name="pp4")
    exe = rt.load(path, unchecked=True)
    tok = gpt_tokens(4 * 8)
    (y,) = exe(*leaves(gpt_params), tok)
    np.testing.assert_allclose(np.asarray(y), single_device(gpt.forward, gpt_params, tok), rtol=1e-4, atol=1e-4)
    assert [s.mesh.axes for s in exe.segments] == [(("data", 2),), (("model", 2),), (("data", 2),), (("data", 2),)]
    # stage 1 holds tensor-parallel weights; stage 0 (replicated) ignores the 'model' axis of the plan
    wqkv1 = art.arg_names.index("params['blocks']['layer1']['attn']['wqkv']")
    sharded = [s for s in exe.segments if (-1, wqkv1) in s.cut.inputs]
    assert any(s.in_specs[s.cut.inputs.index((-1, wqkv1))] == (None, "model") for s in sharded)
    # GPipe: every microbatch enters stage 0 before any microbatch leaves the last stage
    order = exe._order
    assert order.index((3, 0)) < order.index((0, 3))


def _layer_stages(path) -> tuple[list, list]:
    """Ops of layers 0-1 (forward and backward) vs the rest, from the artifact's op locations."""
    art = Artifact.from_file(path)
    ctx = make_context()
    module = art.parse(ctx)
    with ctx:
        locs = [str(op.location) for op in top_level_ops(entry_function(module))]
    first = [i for i, loc in enumerate(locs) if "(layer0)" in loc or "(layer1)" in loc]
    rest = [i for i in range(len(locs)) if i not in set(first)]
    return op_ranges(np.array(first)), op_ranges(np.array(rest))


@pytest.fixture(scope="module")
def train_exe(plan_dir):
    first, rest = _layer_stages(MODELS / "mlp_train.mlir")
    path = write_plan(plan_dir, "mlp_train", [stage(devs(2), first), stage(devs(2, 2), rest)],
                      data_args=[8, 9], schedule="1f1b", microbatches=4, mode="training", name="train")
    return rt.load(path, unchecked=True)


def _full_batch_grads(params, x, y):
    return single_device(jax.value_and_grad(mlp.loss), params, x, y)


def test_gradient_accumulation_equals_full_batch(train_exe, mlp_params):
    x, y = mlp_batch(4 * 32), mlp_batch(4 * 32, seed=2)[:, :64]
    outs = train_exe(*leaves(mlp_params), x, y)
    loss, grads = _full_batch_grads(mlp_params, x, y)
    np.testing.assert_allclose(np.asarray(outs[0]), loss, rtol=1e-5)
    for got, want in zip(outs[1:], leaves(grads), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-6)
    assert set(train_exe.combine) == {"mean"}
    # the stage with layers 0-1 holds their forward and backward: two segments around the rest
    stage0 = [s for s in train_exe.segments if s.stage == 0]
    assert len(stage0) == 2 and stage0[0].cut.ops[-1] < stage0[1].cut.ops[0]


def test_trainer_applies_sgd_with_parameter_shardings(train_exe, mlp_params):
    x, y = mlp_batch(4 * 32), mlp_batch(4 * 32, seed=2)[:, :64]
    trainer = rt.Trainer(train_exe, rt.sgd(0.1))
    params, state = trainer.init(leaves(mlp_params))
    loss, new_params, _ = trainer.step(params, state, x, y)
    _, grads = _full_batch_grads(mlp_params, x, y)
    for p, g, new, s in zip(leaves(mlp_params), leaves(grads), new_params, trainer.shardings, strict=True):
        np.testing.assert_allclose(np.asarray(new), p - 0.1 * g, rtol=1e-5, atol=1e-7)
        assert new.sharding == s  # updated where the parameter lives
    adam = rt.Trainer(train_exe, rt.adam(1e-3))
    params, state = adam.init(leaves(mlp_params))
    _, after, state = adam.step(params, state, x, y)
    # Adam's first step moves every weight by about the learning rate, against its gradient
    step = np.asarray(after[1]) - leaves(mlp_params)[1]
    g = leaves(grads)[1]
    assert np.all(np.sign(step[np.abs(g) > 1e-6]) == -np.sign(g[np.abs(g) > 1e-6]))
    assert np.abs(step).max() == pytest.approx(1e-3, rel=1e-2)

"""Whole-cluster plans: pipelines of sharded stages, each stage on its own submesh with its own axes.

Plans are written by hand as the shared contract of issue 13 has them: one ``shardings`` dict, each
spec in the axis names of the stage that owns the value (an op result: its producer's stage; an
argument: its first consumer's stage), stages with their own ``mesh``. Every plan's outputs are
judged like ``planmap run --verify``: against the unsharded artifact on one device, microbatch by
microbatch, with the tolerances of :mod:`planmap.runtime.verify` (float32: rtol 1e-4, atol 1e-5).
The compiled programs are inspected too (a runtime that ignored the specs would still compute the
right numbers): each segment's compiled input shardings are the plan's, and a Megatron stage's HLO
has the all-reduces its row-split weights imply.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import planmap.runtime as rt
from planmap.errors import InputError
from planmap.runtime.artifact import Artifact
from planmap.runtime.collectives import hlo_collectives
from planmap.runtime.inputs import random_inputs
from planmap.runtime.ir_graph import ARG
from planmap.runtime.layout import Layouts
from planmap.runtime.segments import op_stages
from planmap.runtime.verify import compare, reference_outputs
from tests.runtime.plans import MODELS, devs, layer_ranges, megatron_specs, stage, two_host_plan, write_plan

pytestmark = pytest.mark.filterwarnings("ignore:.*UNCHECKED plan")

MLP_TRAIN_DATA = [8, 9]  # x, y of specs/models/mlp_train.mlir
MLP_X = 8


def verified(exe, seed: int = 0) -> list:
    """Run one step on seeded random inputs and assert every output is within ``run --verify``'s tolerance."""
    args = random_inputs(exe, seed)
    outs = exe(*args)
    errors = compare(exe, outs, reference_outputs(exe, args))
    bad = [(e.name, e.max_abs, e.scale) for e in errors if not e.ok]
    assert not bad, bad
    return errors


def assert_inputs_laid_out(exe) -> None:
    """Every compiled segment takes its inputs in the layouts the runtime derived from the plan."""
    for seg in exe.segments:
        compiled = seg.fn.input_shardings[0]
        assert [s.spec for s in compiled] == [P(*spec) for spec in seg.in_specs]
        assert all(s.mesh.shape_tuple == seg.mesh.mesh.shape_tuple for s in compiled)


def collectives(seg) -> set[str]:
    return {c.kind for c in hlo_collectives(seg.fn.as_text())}


def _mlp_train_plan(tmp: Path, schedule: str, microbatches: int) -> Path:
    """Layers 0-1 Megatron over (data 2, tensor 2) on d0-d3; layers 2-3 data parallel over (data 4) on d4-d7."""
    names = Artifact.from_file(MODELS / "mlp_train.mlir").arg_names
    first, rest = layer_ranges("mlp_train", [["layer0", "layer1"], ["layer2", "layer3"]])
    args = {**megatron_specs(names, ["layer0", "layer1"]), 8: ["data", None], 9: ["data", None]}
    return write_plan(tmp, "mlp_train", [stage(devs(4), first, {"data": 2, "tensor": 2}),
                                         stage(devs(4, 4), rest, {"data": 4})],
                      data_args=MLP_TRAIN_DATA, args=args, schedule=schedule, microbatches=microbatches,
                      mode="training", name=f"wc-{schedule}{microbatches}")


@pytest.mark.parametrize(("schedule", "microbatches"), [("gpipe", 4), ("1f1b", 1)])  # 1F1B x 4: the Trainer
def test_megatron_stage_then_data_parallel_stage_trains(plan_dir, schedule, microbatches):
    exe = rt.load(_mlp_train_plan(plan_dir, schedule, microbatches), unchecked=True)
    verified(exe)
    assert_inputs_laid_out(exe)
    by_stage = exe.stage_segments()
    assert {s.mesh.axes for s in by_stage[0]} == {(("data", 2), ("tensor", 2))}
    assert {s.mesh.axes for s in by_stage[1]} == {(("data", 4),)}
    assert [sorted(s.device_ids) for s in by_stage[1]] == [[4, 5, 6, 7]]
    # stage 0 (forward, then backward after stage 1) takes layer 0's weight column-split, layer 1's row-split
    fwd = by_stage[0][0]
    specs = dict(zip(fwd.cut.inputs, fwd.fn.input_shardings[0], strict=True))
    assert specs[(ARG, 1)].spec == P(None, "tensor") and specs[(ARG, 3)].spec == P("tensor", None)
    assert specs[(ARG, MLP_X)].spec == P("data", None)
    assert "all-reduce" in collectives(fwd)  # the row-split matmul's partial sums
    # stage 1 replicates its parameters and splits the batch: its weight gradients are all-reduced over data
    (dp,) = by_stage[1]
    params = [s for r, s in zip(dp.cut.inputs, dp.fn.input_shardings[0], strict=True) if r[0] == ARG and r[1] < 8]
    assert params and all(s.spec == P(*(None,) * len(s.spec)) for s in params)
    assert "all-reduce" in collectives(dp)


def test_trainer_updates_parameters_where_each_stage_keeps_them(plan_dir):
    exe = rt.load(_mlp_train_plan(plan_dir, "1f1b", 4), unchecked=True)
    verified(exe)
    trainer = rt.Trainer(exe, rt.sgd(0.1))
    args = random_inputs(exe, 3)
    params, state = trainer.init(args[:8])
    _, new, _ = trainer.step(params, state, *args[8:])
    grads = reference_outputs(exe, args)[1:]
    for p, g, q, s in zip(args[:8], grads, new, trainer.shardings, strict=True):
        np.testing.assert_allclose(np.asarray(q), p - 0.1 * g, rtol=1e-4, atol=1e-6)
        assert q.sharding == s
    assert trainer.shardings[1].spec == P(None, "tensor") and len(trainer.shardings[1].device_set) == 4
    assert {d.id for d in trainer.shardings[7].device_set} == {4, 5, 6, 7}


def test_stages_with_different_axis_sizes_infer(plan_dir):
    """Inference: (data 4) on d0-d3, then Megatron over (tensor 2, data 2) on d4-d7; the activation changes
    layout as it crosses (rows over 4 devices -> rows over 2, replicated over tensor). The plan mesh has no
    axes, as ``make_plan`` writes a plan of several sharded stages (``Shardings.mesh_axes == ()``)."""
    names = Artifact.from_file(MODELS / "mlp.mlir").arg_names
    first, rest = layer_ranges("mlp", [["layer0", "layer1"], ["layer2", "layer3"]])
    args = {MLP_X: ["data", None], **megatron_specs(names, ["layer2", "layer3"])}
    path = write_plan(plan_dir, "mlp", [stage(devs(4), first, {"data": 4}),
                                        stage(devs(4, 4), rest, {"tensor": 2, "data": 2})],
                      data_args=[MLP_X], args=args, schedule="gpipe", microbatches=4, mesh={}, devices=["d0"],
                      name="wc-axes")
    exe = rt.load(path, unchecked=True)
    assert exe.plan.mesh.axis_names == [] and exe.plan.mesh.devices == ["d0"]
    verified(exe)
    assert_inputs_laid_out(exe)
    s0, s1 = exe.segments
    assert s0.mesh.axes == (("data", 4),) and s1.mesh.axes == (("tensor", 2), ("data", 2))
    crossing = [k for k, r in enumerate(s1.cut.inputs) if r[0] != ARG]
    assert crossing and all(s1.in_specs[k][0] == "data" for k in crossing)  # the batch rule on stage 1
    assert "all-reduce" in collectives(s1) and "all-reduce" not in collectives(s0)


def test_four_two_device_stages_with_their_own_axes(plan_dir):
    """mlp_train, one layer per stage: (data 2), (tensor 2), (data 2), (tensor 2), 1F1B over 4 microbatches."""
    names = Artifact.from_file(MODELS / "mlp_train.mlir").arg_names
    ranges = layer_ranges("mlp_train", [["layer0"], ["layer1"], ["layer2"], ["layer3"]])
    meshes = [{"data": 2}, {"tensor": 2}, {"data": 2}, {"tensor": 2}]
    args = {**megatron_specs(names, ["layer1", "layer3"]), 8: ["data", None], 9: ["data", None]}
    path = write_plan(plan_dir, "mlp_train", [stage(devs(2, 2 * k), ranges[k], meshes[k]) for k in range(4)],
                      data_args=MLP_TRAIN_DATA, args=args, schedule="1f1b", microbatches=4, mode="training",
                      name="wc-pp4")
    exe = rt.load(path, unchecked=True)
    verified(exe)
    assert_inputs_laid_out(exe)
    segs = exe.stage_segments()
    assert [sorted({d for s in segs[k] for d in s.device_ids}) for k in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # layer 1's weight is row-split over stage 1's tensor axis; the batch arrives replicated there
    w1 = [s for s in segs[1] if (ARG, 3) in s.cut.inputs]
    assert w1 and all(s.in_specs[s.cut.inputs.index((ARG, 3))] == ("tensor", None) for s in w1)


def test_specs_of_another_stage_are_hints_there(plan_dir):
    """A spec is binding only in the stage that owns the value: elsewhere it is used when it fits the
    stage's mesh and dropped (batch rule) when it does not divide the tensor there."""
    first, rest = layer_ranges("mlp", [["layer0", "layer1"], ["layer2", "layer3"]])
    path = write_plan(plan_dir, "mlp", [stage(devs(2), first, {"data": 2}), stage(devs(2, 2), rest, {"data": 2})],
                      data_args=[MLP_X], args={2: ["data"]}, name="wc-hint")  # layer1's bias, used in stage 0
    exe = rt.load(path, unchecked=True)
    layouts = Layouts(exe.plan, exe.graph, op_stages(exe.plan, exe.graph.n_ops))
    assert layouts.owner((ARG, 2)) == 0 and layouts.owner((ARG, MLP_X)) == 0
    assert layouts.input_spec((ARG, 2), {"data": 2}, stage=1) == ("data",)  # fits: taken as it is
    assert layouts.input_spec((ARG, 2), {"data": 3}, stage=1) == (None,)  # 512 rows do not split in 3
    with pytest.raises(InputError, match="divide into 3 shards"):
        layouts.input_spec((ARG, 2), {"data": 3}, stage=0)


@pytest.mark.slow
def test_two_host_plan_on_sixteen_devices_verifies(tmp_path):
    """specs/gpt-train-2host.yaml's cluster shape, 2 hosts x 8: one gpt_train stage per host, each over
    (data 2, tensor 4) with Megatron weights, all 16 devices used, the tied embedding an argument of
    both stages; ``planmap run --verify`` in a process of its own with 16 fake CPU devices (this one
    has 8). test_multiprocess.py runs the same plan on two processes."""
    path = two_host_plan(tmp_path)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=16"}
    cli = "import sys; from planmap.cli import main; sys.exit(main())"
    run = subprocess.run([sys.executable, "-c", cli, "run", str(path), "--unchecked", "--verify", "--steps", "1"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "max error:" in run.stdout and "16 device(s)" in run.stdout
    assert " NO" not in run.stdout


def _planned(problem, solution) -> dict[int, dict]:
    """Per stage of a sharded whole-cluster plan: ``{runtime ref: (PartitionSpec, stage layout)}`` of every
    value the planner's stage layout holds (arguments, received and produced values), in the stage's names."""
    from planmap.sharding.specs import partition_spec
    from planmap.sharding.stage_layout import stage_layouts

    original, out = problem.original, {}
    for st in stage_layouts(problem, solution):
        m, g, specs = st.map, st.tables.graph, {}
        model_arg = {a.value: int(m.args[a.index]) for a in g.args if int(m.args[a.index]) >= 0}
        for w in range(g.num_values):
            if w in model_arg:
                ref = (ARG, model_arg[w])
            else:
                v = int(m.values[w])
                ref = (int(original.value_node[v]), int(original.value_index[v]))
            specs[ref] = P(*partition_spec(st.layout[w], st.names))
        out[st.index] = specs
    return out


def assert_costed_layout(exe, planned: dict[int, dict]) -> None:
    """Every compiled segment takes its inputs and returns its results in its stage's planned specs."""
    for seg in exe.segments:
        want = planned[seg.stage]
        refs = [*seg.cut.inputs, *seg.cut.outputs]
        got = [*seg.fn.input_shardings[0], *seg.fn.output_shardings]
        for ref, sharding in zip(refs, got, strict=True):
            ndim = len(exe.graph.tensor_type(ref).shape)
            assert sharding.is_equivalent_to(NamedSharding(seg.mesh.mesh, want[ref]), ndim), (seg.stage, ref)


def test_compiled_stages_take_the_costed_layout(root):
    """plans/cnn-tpu.plan.yaml (3 sharded stages, 4 + 2 + 2 devices): every compiled stage program takes its
    inputs and returns its results in the layout evaluate costed — stage 0 data parallel over its 4 devices
    (the images replicated, every convolution on a quarter of the batch), stage 1 receiving stage 0's
    activation whole (its axis is another than stage 0's) and splitting it, stage 2 receiving it split."""
    import re

    from planmap.assemble import build_problem
    from planmap.plan import files
    from planmap.plan.build import to_solution
    from planmap.spec import load_spec

    plan = root / "plans" / "cnn-tpu.plan.yaml"
    problem = build_problem(load_spec(root / "specs" / "cnn-tpu.yaml"))
    planned = _planned(problem, to_solution(problem, files.load(plan).document))
    exe = rt.load(plan, unchecked=True)
    assert_costed_layout(exe, planned)
    s0, s1, s2 = (exe.stage_segments()[k] for k in range(3))
    assert {s.mesh.axes for s in s0} == {(("a0", 4),)}
    convs = {m.group(1) for s in s0 for m in re.finditer(r"= f32\[([0-9,]+)\][^\n]*convolution\(", s.fn.as_text())}
    assert convs == {"2,32,32,16"}  # batch 8 over 4 devices: no device computes the whole batch
    recv = [(r, s) for s in s1 for r, s in zip(s.cut.inputs, s.fn.input_shardings[0], strict=True) if r[0] != ARG]
    assert recv and all(s.shard_shape(exe.graph.tensor_type(r).shape)[0] == 8 for r, s in recv)
    recv = [(r, s) for s in s2 for r, s in zip(s.cut.inputs, s.fn.input_shardings[0], strict=True) if r[0] != ARG]
    assert recv and all(s.shard_shape(exe.graph.tensor_type(r).shape)[0] == 4 for r, s in recv)


@pytest.mark.slow
def test_compiled_megatron_training_stages_take_the_costed_layout(root, tmp_path):
    """A plan written by stages_solution for the GPT training step, two stages each Megatron over (data 2,
    tensor 2): the forward and backward programs of both stages take and return every value as evaluate
    costs it (before plans recorded every op result, half of the activations crossing segments were compiled
    split over ``data`` only where the layout splits them over ``data`` x ``tensor``)."""
    from planmap.api import Plan
    from planmap.evaluate import evaluate
    from planmap.plan import files
    from planmap.plan.build import make_plan, to_solution
    from planmap.spec import load_spec
    from tests.sharding.stages import gpt_train_problem, megatron_stages

    problem = gpt_train_problem()
    solution = megatron_stages(problem)
    path = tmp_path / "wc-megatron.plan.yaml"
    spec = load_spec(root / "specs" / "gpt-train-8dev.yaml")
    Plan(make_plan(problem, solution, evaluate(problem, solution), spec=spec, plan_path=path), tmp_path).save(path)
    exe = rt.load(path, unchecked=True)
    assert_costed_layout(exe, _planned(problem, to_solution(problem, files.load(path).document)))
    assert [s.stage for s in exe.segments] == [0, 1, 0]

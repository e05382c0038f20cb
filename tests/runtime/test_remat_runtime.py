"""Activation checkpointing runs as the cost model charges it (issue 16 item 3): a ``remat`` plan's
stages stash per microbatch only the layer-boundary values, their backward calls run the layers'
forward again, and the step's loss and gradients are those of the plain plan and of one device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planmap.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[2]

SPEC = """apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata:
  name: mlp-train-remat
spec:
  model:
    source: {model}
    mode: training
    optimizer: adam
    microbatches: {microbatches}
  cluster: {cluster}
  objective:
    kind: throughput
  solver:
    name: dp
    timeLimit: 10s
  constraints:
    maxStages: 2
    schedule: 1f1b
    remat: {remat}
"""


def export_residual_mlp(path: Path, layers: int = 4, d: int = 64, hidden: int = 512, batch: int = 16) -> Path:
    """A value-and-grad step of a residual MLP whose layers are wide inside (``hidden`` = 8 d): what a
    layer's backward reads of its forward is far larger than what leaves the layer."""
    import jax
    import jax.numpy as jnp

    from planmap import export

    def loss(params, x, y):
        for i, p in enumerate(params):
            with jax.named_scope(f"layer{i}"):
                x = x + jnp.tanh(x @ p["w1"]) @ p["w2"]
        return jnp.mean((x - y) ** 2)

    f32 = jnp.float32
    params = [{"w1": jax.ShapeDtypeStruct((d, hidden), f32), "w2": jax.ShapeDtypeStruct((hidden, d), f32)}
              for _ in range(layers)]
    data = jax.ShapeDtypeStruct((batch, d), f32)
    return export.jax(jax.value_and_grad(loss), params, data, data, path=path)


def small_cluster_spec(model: Path, memory: str, remat: str, microbatches: int = 4) -> Path:
    """A spec of ``model`` on 8 H100s cut down to ``memory`` each (next to the model)."""
    cluster = model.parent / f"h100-{memory}.yaml"
    cluster.write_text((ROOT / "specs" / "clusters" / "h100-1x8.yaml").read_text().replace("memory: 80GiB",
                                                                                             f"memory: {memory}"))
    path = model.parent / f"remat-{remat}-{memory}.yaml"
    path.write_text(SPEC.format(model=model, cluster=cluster, remat=remat, microbatches=microbatches))
    return path


def _problem(tmp: Path, model: Path, remat: bool):
    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    path = tmp / f"mlp-remat-{remat}.yaml"
    path.write_text(SPEC.format(model=model, cluster=ROOT / "specs" / "clusters" / "h100-1x8.yaml",
                                remat=str(remat).lower(), microbatches=2))
    spec = load_spec(path)
    return build_problem(spec), spec


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both plans of one two-stage solution (plain and checkpointed), compiled, and one step of each."""
    from planmap.plan.build import make_plan
    from planmap.problem import SolveOptions
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.executable import Executable
    from planmap.runtime.inputs import random_inputs
    from planmap.solve import solve

    tmp = tmp_path_factory.mktemp("remat-run")
    model = export_residual_mlp(tmp / "resmlp_train.mlir")
    plain, spec = _problem(tmp, model, False)
    remat, rspec = _problem(tmp, model, True)
    solution = solve(plain, "dp", SolveOptions(time_limit=10)).solution
    out = {}
    for problem, sp in ((plain, spec), (remat, rspec)):
        ev = evaluate(problem, solution)
        doc = make_plan(problem, solution, ev, spec=sp, plan_path=tmp / "p.plan.yaml")
        exe = Executable(doc, Artifact.from_file(sp.model_path))
        args = random_inputs(exe, 0)
        out[problem.cost.remat] = (problem, solution, ev, doc, exe, args, exe(*args))
    return out


def test_remat_plan_records_the_recomputed_ops(runs):
    from planmap.runtime.split import recomputable

    _, solution, _, plain_doc, *_ = runs[False]
    problem, _, _, doc, *_ = runs[True]
    assert solution.num_stages == 2
    assert not any(st.remat for st in plain_doc.stages)
    assert all(st.remat for st in doc.stages)
    g = problem.original
    for st in doc.stages:
        ids = np.concatenate([np.arange(a, b) for a, b in st.remat])
        assert set(ids) <= set(np.concatenate([np.arange(a, b) for a, b in st.ops]))
        assert not g.backward[ids].any()  # forward ops only
    exe = runs[True][4]
    again = {int(i) for st in doc.stages for a, b in st.remat for i in range(a, b)}
    cheap = recomputable(exe.graph)  # constants and broadcasts: every segment rebuilds them anyway
    copies = [{i for i in seg.cut.recompute if i in again and not cheap[i]} for seg in exe.segments]
    assert sum(map(bool, copies)) == len(doc.stages)  # one backward call per stage runs its layers again


def test_remat_step_equals_the_plain_step_and_one_device(runs):
    from planmap.runtime.verify import compare, reference_outputs

    *_, exe, args, outs = runs[True]
    *_, plain_outs = runs[False]
    errs = compare(exe, outs, reference_outputs(exe, args))
    assert all(e.ok for e in errs), errs
    for a, b in zip(outs, plain_outs, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_runtime_stash_is_the_cost_models(runs):
    """Per stage, the bytes the runtime keeps per microbatch between calls are the cost model's remat stash
    (the last stage's forward ops after its last checkpointed op run in the same call as its backward:
    their stash is that call's temporaries), and less than the plain plan keeps."""
    problem, solution, ev, doc, exe, *_ = runs[True]
    order = list(ev.stage_order)
    for pos, k in enumerate(order):
        nodes = np.flatnonzero(solution.assignment == k)
        predicted = problem.cost.stash_bytes[nodes]
        if pos == len(order) - 1:
            last = max(b for _, b in doc.stages[pos].remat)
            same_call = np.array([problem.graph.members_of(int(i)).min() >= last for i in nodes])
            predicted = predicted[~same_call]
        assert exe.stash_bytes[pos] == int(predicted.sum()) > 0, pos
    assert sum(exe.stash_bytes.values()) < sum(runs[False][4].stash_bytes.values())


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """``remat: auto`` on 7 MiB devices: the first stage (two microbatches in flight) recomputes, the last
    does not; the plan compiled for 8 fake CPU devices and one step run."""
    from planmap.api import plan
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.executable import Executable
    from planmap.runtime.inputs import random_inputs

    model = export_residual_mlp(tmp_path_factory.mktemp("remat-mixed") / "resmlp.mlir", batch=256)
    p = plan(small_cluster_spec(model, "7MiB", "auto"))
    exe = Executable(p.document, Artifact.from_file(model))
    args = random_inputs(exe, 0)
    return p, exe, args, exe(*args)


def test_mixed_plan_runs_as_one_device(mixed):
    from planmap.runtime.verify import compare, reference_outputs

    p, exe, args, outs = mixed
    assert [bool(st.remat) for st in p.document.stages] == [True, False]
    devices = {s.stage: frozenset(map(str, s.mesh.mesh.devices.flat)) for s in exe.segments}
    assert len(devices) == 2 and not devices[0] & devices[1]  # two stages on two of the 8 fake CPU devices
    errs = compare(exe, outs, reference_outputs(exe, args))
    assert all(e.ok for e in errs), errs


def test_mixed_plan_stash_is_the_cost_models(mixed):
    """The checkpointed first stage keeps per microbatch the cost model's stash for its choice (the layer-boundary
    values), less than it would keep without. The model charges a value to its producer; the activation the
    first stage sends on is kept by the plain last stage, which runs its forward, loss and backward as one call:
    there it is that call's input, so the runtime keeps nothing between calls of the last stage."""
    from planmap.remat_stages import for_solution

    p, exe, *_ = mixed
    res = p.result
    problem, solution = for_solution(res.problem, res.solution), res.solution
    g = problem.graph
    first = np.asarray(solution.assignment) == list(res.evaluation.stage_order)[0]
    src = np.maximum(g.edge_src, 0)
    sent = np.unique(g.edge_value[(g.edge_src >= 0) & first[src] & ~g.backward[src] & ~first[g.edge_dst]])
    stash = problem.cost.stash_bytes
    assert stash[g.value_node[sent]].sum() == g.value_bytes[sent].sum() > 0  # charged to the first stage
    assert exe.stash_bytes[0] == int(stash[first].sum() - g.value_bytes[sent].sum()) > 0
    assert stash[first].sum() < problem.cost.with_remat(False).stash_bytes[first].sum()
    assert exe.stash_bytes[1] == 0 and len([s for s in exe.segments if s.stage == 1]) == 1

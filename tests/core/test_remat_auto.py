"""``constraints.remat: auto`` (issue 16 item 3): activation checkpointing is a per-stage planner decision.

For a fixed split a stage's memory depends on its own choice only and recomputation never makes it faster,
so each stage recomputes exactly where it does not fit without; the throughput DP makes that choice inside
its stage cost (exact over splits x per-stage choices), other solvers by a post-pass on their split. The
plan states the choice in each stage's ``remat`` ranges; ``evaluate``, ``check`` and ``explain`` read it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planmap.errors import InfeasibleError, InputError
from tests.runtime.test_remat_runtime import export_residual_mlp, small_cluster_spec


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A residual MLP whose activations (batch 256) outweigh its parameters: on 7 MiB devices the first of two
    stages (two microbatches in flight under 1F1B) fits only with checkpointing, the last without."""
    return export_residual_mlp(tmp_path_factory.mktemp("remat-auto") / "resmlp.mlir", batch=256)


def _plan(spec: Path, solver: str | None = None):
    from planmap.api import plan

    p = plan(spec, solver=solver)
    p.save(spec.with_suffix(f".{solver or 'dp'}.plan.yaml"))
    return p


def _with_stages(solution, choices):
    return replace(solution, stages=tuple(replace(st, remat=c) for st, c in zip(solution.stages, choices, strict=True)))


def test_mixed_plan_beats_all_and_no_checkpointing(model, capsys):
    from planmap.cli import main
    from planmap.evaluate import evaluate
    from planmap.plan.integrity import check

    p = _plan(small_cluster_spec(model, "7MiB", "auto"))
    doc, res = p.document, p.result
    assert doc.solver.options["remat"] == "per-stage"
    assert [bool(st.remat) for st in doc.stages] == [True, False]
    assert "activation checkpointing per stage" in doc.solver.remarks
    problem, solution = res.problem, res.solution
    mixed = evaluate(problem, solution)
    assert mixed.feasible and mixed.objective == pytest.approx(res.evaluation.objective)
    every = evaluate(problem, _with_stages(solution, [True, True]))
    none = evaluate(problem, _with_stages(solution, [False, False]))
    assert every.feasible and mixed.objective < every.objective  # the last stage does not recompute for nothing
    assert not none.feasible and any("memory" in v for v in none.violations)
    forced = _plan(small_cluster_spec(model, "7MiB", "true"))  # the best plan that recomputes everywhere
    assert mixed.objective < forced.result.evaluation.objective
    with pytest.raises(InfeasibleError, match="memory"):
        _plan(small_cluster_spec(model, "7MiB", "false"))
    report = check(p.path, resolve=True)
    assert report.ok and any("identical plan" in n for n in report.notes), report.messages
    assert main(["explain", str(p.path)]) == 0
    assert "activation checkpointing: stage(s) 0 of 2 (chosen per stage by the planner" in capsys.readouterr().out


def test_tight_memory_checkpoints_every_stage(model, capsys):
    from planmap.cli import main
    from planmap.plan.integrity import check

    with pytest.raises(InfeasibleError, match="memory"):
        _plan(small_cluster_spec(model, "6MiB", "false"))
    p = _plan(small_cluster_spec(model, "6MiB", "auto"))
    doc = p.document
    assert all(st.remat for st in doc.stages)
    forced = _plan(small_cluster_spec(model, "6MiB", "true")).document
    assert forced.stages == doc.stages and forced.predicted == doc.predicted  # the same plan as remat: true
    assert check(p.path).ok
    assert main(["explain", str(p.path)]) == 0
    assert "activation checkpointing: on (chosen per stage by the planner (remat: auto))" in capsys.readouterr().out


def test_ample_memory_checkpoints_nothing(model):
    from planmap.plan.integrity import check

    p = _plan(small_cluster_spec(model, "80GiB", "auto"))
    doc = p.document
    assert not any(st.remat for st in doc.stages)
    plain = _plan(small_cluster_spec(model, "80GiB", "false")).document
    assert doc.stages == plain.stages and doc.predicted == plain.predicted
    assert check(p.path).ok


def test_a_solver_without_the_choice_gets_the_post_pass(model):
    """PipeDream's planner does not choose per stage: it is run with and without recomputation everywhere,
    and recomputation is turned off where a stage fits without it."""
    from planmap.plan.integrity import check

    spec = small_cluster_spec(model, "7MiB", "auto")
    other = spec.with_name("pipedream-" + spec.name)
    other.write_text(spec.read_text().replace("name: dp", "name: pipedream"))
    p = _plan(other)
    doc = p.document
    assert doc.solver.options["remat"] == "per-stage" and "turned off on 1 stage(s)" in doc.solver.remarks
    assert [bool(st.remat) for st in doc.stages] == [True, False]
    assert doc.solver.status == "heuristic"
    assert check(p.path).ok


def test_check_reads_old_and_rejects_disallowed_choices(model):
    from planmap.assemble import plan_remat
    from planmap.spec import load_spec

    auto = load_spec(small_cluster_spec(model, "7MiB", "auto"))
    doc = _plan(small_cluster_spec(model, "7MiB", "auto")).document
    assert plan_remat(auto, doc) is None  # the stages say
    with pytest.raises(InputError, match="allows false"):
        plan_remat(load_spec(small_cluster_spec(model, "7MiB", "false")), doc)
    old = doc.model_copy(update={"solver": doc.solver.model_copy(update={"options": {"remat": True}})})
    assert plan_remat(auto, old) is True  # a plan written when remat: auto was one choice per plan


def test_cost_model_per_node_mask(model):
    """Masked layer-forward nodes cost twice; a value's stash follows its producer's choice; switching the
    mask back and forth is exact."""
    from planmap.assemble import build_problem
    from planmap.remat import layer_forward

    problem = build_problem(__import__("planmap.spec", fromlist=["load_spec"]).load_spec(
        small_cluster_spec(model, "7MiB", "auto")))
    cost, g = problem.cost, problem.graph
    assert not cost.remat and problem.remat_choice
    every = cost.with_remat(True)
    mask = np.zeros(g.num_nodes, bool)
    mask[: g.num_nodes // 2] = True
    half = cost.with_remat(mask)
    fwd = layer_forward(g)
    assert (fwd & mask).any()
    np.testing.assert_array_equal(half.compute, np.where((fwd & mask)[:, None], 2 * cost.compute, cost.compute))
    np.testing.assert_array_equal(half.stash_bytes, np.where(mask, every.stash_bytes, cost.stash_bytes))
    np.testing.assert_array_equal(every.with_remat(False).compute, cost.compute)
    assert every.with_remat(True) is every

"""Microbatches and schedule as planner decisions (issue 13): ``microbatches: auto`` without globalBatch (or a list)
and ``schedule: auto`` are chosen by the planner, recorded in the plan, accepted by ``check`` within the spec's sets,
and an edit to another allowed value is caught because the predictions no longer follow."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from planmap import plan as plan_mod
from planmap.api import solve_spec
from planmap.assemble import build_problem
from planmap.microbatching import AUTO_MICROBATCHES, TIE_TOLERANCE, pick
from planmap.plan.document import body_digest, parse
from planmap.spec import SpecError, load_spec

SPEC = """\
apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata:
  name: mlp-choose
spec:
  model:
    source: models/mlp_train.mlir
    mode: training
    microbatches: {mb}
  cluster: clusters/cpu-4acc-pcie.yaml
  objective:
    kind: throughput
  solver:
    name: dp
    timeLimit: 30s
  constraints:
    schedule: {schedule}
"""


def _spec(root: Path, tmp_path: Path, mb: str = "auto", schedule: str = "auto") -> Path:
    for sub in ("models/mlp_train.mlir", "clusters/cpu-4acc-pcie.yaml"):
        (tmp_path / Path(sub).parent).mkdir(exist_ok=True)
        shutil.copy(root / "specs" / sub, tmp_path / sub)
    path = tmp_path / "mlp-choose.yaml"
    path.write_text(SPEC.format(mb=mb, schedule=schedule))
    return path


def _solve(spec: Path) -> tuple[Path, str]:
    loaded = load_spec(spec)
    problem, result = solve_spec(loaded)
    out = spec.with_suffix(".plan.yaml")
    doc = plan_mod.make_plan(problem, result.solution, result.evaluation, spec=loaded, plan_path=out)
    plan_mod.save(doc, out)
    return out, out.read_text()


def _forge(path: Path, text: str) -> None:
    """Write ``text`` with its digest recomputed, as someone who knows the format would."""
    digest = body_digest(parse(text, "forged"))
    path.write_text(re.sub(r"^digest: .*$", f"digest: {digest}", text, flags=re.M))


def test_pick_takes_the_smallest_microbatches_within_the_tolerance():
    # (infeasible, time per microbatch, M): an SPMD plan's time per sample does not depend on M
    assert pick([(False, 1.0, 1), (False, 1.0, 8), (False, 1.0, 32)], key=lambda k: k) == (False, 1.0, 1)
    near = 0.9 * (1 + TIE_TOLERANCE / 2)
    assert pick([(False, 1.2, 4), (False, near, 8), (False, 0.9, 16), (True, 0.1, 32)], key=lambda k: k)[2] == 8
    assert pick([(False, 1.2, 4), (False, 0.95, 8), (False, 0.9, 16)], key=lambda k: k)[2] == 16
    assert pick([(True, 2.0, 1), (True, 1.0, 2)], key=lambda k: k)[2] == 2  # none fits: the best time


def test_auto_without_global_batch_is_a_choice_and_a_list_too(root, tmp_path):
    p = build_problem(load_spec(_spec(root, tmp_path)))
    assert p.microbatch_candidates == AUTO_MICROBATCHES and p.microbatches == max(AUTO_MICROBATCHES)
    assert [str(s) for s in p.schedule_candidates] == ["gpipe", "1f1b"] and p.schedule == "1f1b"
    p = build_problem(load_spec(_spec(root, tmp_path, mb="[4, 1, 2]", schedule="gpipe")))
    assert p.microbatch_candidates == (1, 2, 4) and [str(s) for s in p.schedule_candidates] == ["gpipe"]
    assert build_problem(load_spec(_spec(root, tmp_path, mb="4"))).microbatch_candidates == (4,)


@pytest.mark.parametrize("mb, extra", [("[]", ""), ("[2, 0]", ""), ("[2, 4]", "\n    globalBatch: 64")])
def test_invalid_microbatch_lists_are_spec_errors(root, tmp_path, mb, extra):
    path = _spec(root, tmp_path, mb=mb + extra)
    with pytest.raises(SpecError, match="microbatches"):
        load_spec(path)


def test_planner_chooses_microbatches_and_check_holds_it_to_the_spec(root, tmp_path):
    plan, text = _solve(_spec(root, tmp_path))
    doc = plan_mod.load(plan).document
    assert doc.schedule.kind == "1f1b" and doc.schedule.microbatches > 1  # a pipeline amortises its bubble
    message = doc.solver.remarks
    assert "microbatches chosen from {1, 2, 4, 8, 16, 32}" in message
    assert f"M={doc.schedule.microbatches} (" in message and "1f1b dominates gpipe in training" in message
    assert plan_mod.check(plan).ok
    from planmap import runtime as rt

    exe = rt.load(plan)  # the runtime streams the recorded microbatches
    data = exe.data_args[0]
    assert exe.microbatches == doc.schedule.microbatches
    assert exe.expected_shape(data)[0] == doc.schedule.microbatches * exe.artifact.in_types[data].shape[0]
    # another allowed M, digest forged: the predictions (step time) no longer follow
    other = 1 if doc.schedule.microbatches != 1 else 2
    _forge(plan, text.replace(f"microbatches: {doc.schedule.microbatches}}}", f"microbatches: {other}}}"))
    report = plan_mod.check(plan)
    assert not report.ok and any("'predicted'" in m for m in report.problems), report.messages
    # an M outside the spec's set
    _forge(plan, text.replace(f"microbatches: {doc.schedule.microbatches}}}", "microbatches: 3}"))
    report = plan_mod.check(plan)
    assert any("microbatches 3 is not one the spec allows" in m for m in report.problems), report.messages
    # the other schedule: allowed, but gpipe holds all M microbatches in flight, so the predicted memory differs
    _forge(plan, text.replace('kind: "1f1b"', "kind: gpipe"))
    report = plan_mod.check(plan)
    assert not report.ok and any("'predicted'" in m for m in report.problems), report.messages


def test_a_fixed_schedule_is_not_a_choice(root, tmp_path):
    plan, text = _solve(_spec(root, tmp_path, mb="[1, 2, 4]", schedule="gpipe"))
    doc = plan_mod.load(plan).document
    assert doc.schedule.kind == "gpipe" and doc.schedule.microbatches in (1, 2, 4)
    assert "microbatches chosen from {1, 2, 4}" in doc.solver.remarks and "dominates" not in doc.solver.remarks
    assert plan_mod.check(plan).ok
    _forge(plan, text.replace("kind: gpipe", 'kind: "1f1b"'))
    assert any("schedule 1f1b is not one the spec allows" in m for m in plan_mod.check(plan).problems)

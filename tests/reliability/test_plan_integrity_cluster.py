"""Tampering with the fields of a whole-cluster plan (issue 18): per-stage submeshes and mesh axes,
shardings, ``zero:``, the cluster solver's certificate and options — each edit, with the digest
recomputed by a forger, makes `check` exit 1 and the runtime refuse the plan.

What plain `check` cannot re-derive without solving again (the solver's name, version, backend and
message, a time limit or gap the CLI may override) is `check --resolve`'s job."""

from __future__ import annotations

import re
import shutil

import pytest

from planmap.cli import main
from tests.reliability.test_plan_integrity import _forge

SHARDING = ('{op: 7, result: 0, name: "jit(_cnn_forward)/stage0_block0/broadcast_in_dim", '
            'spec: [null, null, null, null]}')
STAGE1_MESH = "mesh: {axis_names: [data], axis_sizes: [2]}, layers: [stage1"

EDITS = {
    "stage mesh axis renamed": lambda t: t.replace(STAGE1_MESH, "mesh: {axis_names: [model], axis_sizes: [2]}, "
                                                                 "layers: [stage1"),
    "stage mesh removed": lambda t: t.replace(", " + STAGE1_MESH, ", layers: [stage1"),
    "submesh devices swapped": lambda t: t.replace("[host0/tpu0, host0/tpu1, host0/tpu2, host0/tpu3]",
                                                   "[host0/tpu4, host0/tpu1, host0/tpu2, host0/tpu3]")
    .replace("[host0/tpu4, host0/tpu5]", "[host0/tpu0, host0/tpu5]"),
    "stage layers": lambda t: t.replace("layers: [stage0_block0, stage0_block1]", "layers: [stage0_block0]"),
    "sharding spec": lambda t: t.replace(SHARDING, SHARDING.replace("spec: [null,", "spec: [a0,")),
    "sharding removed": lambda t: t.replace(f"    - {SHARDING}\n", ""),
    "sharding moved to another op": lambda t: t.replace(SHARDING, SHARDING.replace("op: 7", "op: 8")),
    "sharding name": lambda t: t.replace(SHARDING, SHARDING.replace('name: "jit', 'name: "x')),
    "argument sharding added": lambda t: t.replace("shardings:\n  args:\n", 'shardings:\n  args:\n    - {arg: 0, '
                                                                 'name: "x", spec: [data, null, null, null]}\n'),
    "zero on an inference plan": lambda t: t.replace("shardings:\n  args:", "shardings:\n  zero: 1\n  args:"),
    "zero 3": lambda t: t.replace("shardings:\n  args:", "shardings:\n  zero: 3\n  args:"),
    "plan name": lambda t: t.replace("name: cnn-tpu", "name: cnn-tpu2", 1),
    "global mesh axis": lambda t: t.replace("axis_names: [device]", "axis_names: [dev]"),
    "microbatches": lambda t: t.replace("microbatches: 8}", "microbatches: 4}"),
    "objective variant": lambda t: t.replace("variant: max-load", "variant: max-fw-plus-max-bw"),
    "predicted bytes moved": lambda t: t.replace("bytes_moved: 1310720", "bytes_moved: 1310721"),
    "predicted capacity": lambda t: t.replace("capacity: 15461882265,", "capacity: 15461882264,", 1),
    "certificate status": lambda t: re.sub(r"status: (time_limit|bounded|gap_reached|optimal)", "status: heuristic", t),
    "certificate bound": lambda t: re.sub(r"bound_ns: \d+", "bound_ns: 99999999", t),  # above the objective
    "certificate bound removed": lambda t: re.sub(r"bound_ns: \d+", "bound_ns: null", t),
    "certificate gap": lambda t: re.sub(r"gap: 0\.\d+", "gap: 0.0", t),
    "certificate objective": lambda t: t.replace("  objective_ns: 26440\n  bound", "  objective_ns: 26000\n  bound"),
    "solver seed": lambda t: t.replace("seed: 0,", "seed: 1,"),
    "solver time limit": lambda t: t.replace("time_limit: 60.0}", "time_limit: -1.0}"),
    "solver threads": lambda t: t.replace("threads: 1,", "threads: 0,"),
}


@pytest.fixture
def plans(root, tmp_path):
    shutil.copytree(root / "specs", tmp_path / "specs")
    (tmp_path / "plans").mkdir()
    for name in ("cnn-tpu", "gpt-train-8dev"):
        shutil.copy(root / "plans" / f"{name}.plan.yaml", tmp_path / "plans")
    return tmp_path / "plans"


def _write_forged(path, edit) -> None:
    text = path.read_text()
    edited = edit(text)
    assert edited != text, "the edit changed nothing"
    path.write_text(_forge(edited))


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_every_edit_of_a_cluster_plan_fails_check(plans, edit):
    path = plans / "cnn-tpu.plan.yaml"
    _write_forged(path, EDITS[edit])
    assert main(["check", str(path)]) == 1


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_on_a_training_plan_that_records_none_fails_check(plans, zero):
    path = plans / "gpt-train-8dev.plan.yaml"
    _write_forged(path, lambda t: t.replace("shardings:\n  args: []", f"shardings:\n  zero: {zero}\n  args: []"))
    assert main(["check", str(path)]) == 1


@pytest.mark.parametrize("edit", ["sharding spec", "zero on an inference plan", "solver seed"])
def test_the_runtime_refuses_an_edited_cluster_plan(plans, edit, capsys):
    import planmap.runtime as rt
    from planmap.plan.integrity import IntegrityError

    path = plans / "cnn-tpu.plan.yaml"
    _write_forged(path, EDITS[edit])
    with pytest.raises(IntegrityError, match="fails `planmap check`"):
        rt.load(path)


def _lower_bound(text: str) -> str:
    """The cluster certificate's bound lowered by 1 µs with gap and message consistent: a forger's edit."""
    from planmap.plan.certificate import certificate_message
    from planmap.problem import relative_gap

    obj = int(re.search(r"^  objective_ns: (\d+)$", text, re.M).group(1))
    bound = int(re.search(r"^  bound_ns: (\d+)$", text, re.M).group(1)) - 1000
    gap = round(relative_gap(obj, bound), 6)
    status = re.search(r"^  status: (\w+)$", text, re.M).group(1)
    message = certificate_message(status, obj, bound, gap, {"rel_gap": 0.01, "time_limit": 60.0})
    text = re.sub(r"^  bound_ns: \d+$", f"  bound_ns: {bound}", text, flags=re.M)
    text = re.sub(r"^  gap: [\d.e-]+$", f"  gap: {gap}", text, flags=re.M)
    return re.sub(r'^  message: ".*"$', f'  message: "{message}"', text, flags=re.M)


@pytest.mark.slow
def test_a_consistent_edit_of_the_cluster_bound_passes_check_and_fails_check_resolve(plans):
    """The cluster solver's bound over its space (solvers/cluster/bound.py) is not re-derivable without solving:
    plain check holds it to bound ≤ objective and a consistent gap; `check --resolve` reproduces it."""
    from planmap import plan as plan_mod

    path = plans / "cnn-tpu.plan.yaml"
    assert plan_mod.check(path, resolve=True).ok  # the committed bound reproduces
    _write_forged(path, _lower_bound)
    assert plan_mod.check(path).ok
    report = plan_mod.check(path, resolve=True)
    assert not report.ok and any("not reproducible" in m for m in report.stale), report.stale

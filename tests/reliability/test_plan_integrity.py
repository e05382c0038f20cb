"""Tampering: every edit of a solved plan's fields makes `check` fail and the runtime refuse it — with
the digest left stale and with the digest recomputed (a forger who knows the format), including the
model swap with a correct hash (issue 18, items 1 and 7)."""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pytest

from planmap import plan as plan_mod
from planmap.cli import main
from planmap.plan.document import body_digest, parse

PLAN = "gpt-8dev"


@pytest.fixture
def plan_dir(root, tmp_path):
    shutil.copytree(root / "specs", tmp_path / "specs")
    (tmp_path / "plans").mkdir()
    shutil.copy(root / "plans" / f"{PLAN}.plan.yaml", tmp_path / "plans")
    return tmp_path / "plans"


def _forge(text: str) -> str:
    """Recompute the digest line of an edited plan, as someone who knows the format would."""
    digest = body_digest(parse(text, "forged"))
    return re.sub(r"^digest: .*$", f"digest: {digest}", text, flags=re.M)


def _swap_model(plan_dir: Path, text: str) -> str:
    """Point the model input at an artifact of the same shapes with one add changed to a subtract, with
    that file's correct hash."""
    evil = plan_dir.parent / "specs" / "models" / "gpt_evil.mlir"
    evil.write_text((plan_dir.parent / "specs" / "models" / "gpt.mlir").read_text()
                    .replace("stablehlo.add", "stablehlo.subtract", 1))
    from planmap.io import sha256_file

    return re.sub(r'\{role: model, path: "\.\./specs/models/gpt\.mlir", sha256: "[0-9a-f]+"\}',
                  f'{{role: model, path: "../specs/models/gpt_evil.mlir", sha256: "{sha256_file(evil)}"}}', text)


def _swap_stage_devices(text: str) -> str:
    return (text.replace("{id: 0, devices: [node0/gpu0]", "{id: 0, devices: [TMP]")
            .replace("{id: 1, devices: [node0/gpu1]", "{id: 1, devices: [node0/gpu0]")
            .replace("{id: 0, devices: [TMP]", "{id: 0, devices: [node0/gpu1]"))


def _reverse_lines(text: str, prefix: str) -> str:
    """Reverse the order of the lines that start with ``prefix`` (stages, mesh devices)."""
    lines = text.splitlines(keepends=True)
    idx = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    for i, line in zip(idx, reversed([lines[i] for i in idx]), strict=True):
        lines[i] = line
    return "".join(lines)


EDITS = {
    "data_args": lambda t, d: t.replace("data_args: [44]", "data_args: [43]"),
    "microbatches": lambda t, d: t.replace("microbatches: 4}", "microbatches: 1000000000}"),
    "schedule": lambda t, d: t.replace("kind: gpipe", "kind: 1f1b"),
    "mode": lambda t, d: t.replace("mode: inference", "mode: training"),
    "mesh devices reversed": lambda t, d: _reverse_lines(t, "    - node0/"),
    "mesh resized": lambda t, d: t.replace("axis_sizes: [8]", "axis_sizes: [4]"),
    "duplicated stage id": lambda t, d: t.replace("{id: 1, devices", "{id: 0, devices"),
    "reversed stages": lambda t, d: _reverse_lines(t, "  - {id: "),
    "two stages swap devices": lambda t, d: _swap_stage_devices(t),
    "duplicate stage device": lambda t, d: t.replace("devices: [node0/gpu2]", "devices: [node0/gpu2, node0/gpu2]"),
    "unknown device": lambda t, d: t.replace("devices: [node0/gpu2]", "devices: [host9/gpu99]"),
    "overlapping ops": lambda t, d: t.replace("ops: [[221, 270]]", "ops: [[221, 271]]"),
    "ops out of bounds": lambda t, d: t.replace("[377, 445]", "[377, 1000000000000]"),
    "predicted load": lambda t, d: t.replace("load_ns: 42832}", "load_ns: 42831}"),
    "predicted objective": lambda t, d: t.replace("  objective_ns: 50806\n  step", "  objective_ns: 50805\n  step"),
    "certificate bound": lambda t, d: re.sub(r"bound_ns: \d+", "bound_ns: 70000", t),  # above the objective
    "certificate gap": lambda t, d: re.sub(r"(?m)^  gap: [\d.]+$", "  gap: -9.0", t),
    "certificate status": lambda t, d: re.sub(r"(?m)^  status: \w+$", "  status: heuristic", t),  # with a bound
    "certificate objective": lambda t, d: t.replace("  objective_ns: 50806\n  bound", "  objective_ns: 1\n  bound"),
    "model swap with a correct hash": lambda t, d: _swap_model(d, t),
    "spec input renamed": lambda t, d: t.replace('path: "../specs/gpt-8dev.yaml"', 'path: "../specs/gpt-8dev.yml"'),
}


def test_the_golden_plan_passes(plan_dir):
    report = plan_mod.check(plan_dir / f"{PLAN}.plan.yaml")
    assert report.ok, report.problems


@pytest.mark.parametrize("forged", [False, True], ids=["stale-digest", "forged-digest"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_every_edit_fails_check(plan_dir, edit, forged):
    path = plan_dir / f"{PLAN}.plan.yaml"
    text = path.read_text()
    edited = EDITS[edit](text, plan_dir)
    assert edited != text, f"the edit {edit!r} changed nothing"
    if forged:
        with contextlib.suppress(Exception):  # an edit the schema refuses cannot be forged: the digest stays
            edited = _forge(edited)
    path.write_text(edited)
    assert main(["check", str(path)]) == 1


def test_a_status_edit_is_caught_by_the_digest(plan_dir, capsys):
    path = plan_dir / f"{PLAN}.plan.yaml"
    path.write_text(re.sub(r"(?m)^  status: \w+$", "  status: interrupted", path.read_text()))
    assert main(["check", str(path)]) == 1
    assert "the digest does not match" in capsys.readouterr().err


def test_a_plan_without_digest_fails_check(plan_dir, capsys):
    path = plan_dir / f"{PLAN}.plan.yaml"
    path.write_text(re.sub(r"^digest: .*\n", "", path.read_text(), flags=re.M))
    assert main(["check", str(path)]) == 1
    assert "no digest line" in capsys.readouterr().err


@pytest.mark.parametrize("edit", ["model swap with a correct hash", "two stages swap devices", "microbatches",
                                  "certificate gap"])
def test_the_runtime_refuses_what_check_rejects(plan_dir, edit, capsys):
    import planmap.runtime as rt
    from planmap.plan.integrity import IntegrityError

    path = plan_dir / f"{PLAN}.plan.yaml"
    path.write_text(_forge(EDITS[edit](path.read_text(), plan_dir)))
    with pytest.raises(IntegrityError, match="fails `planmap check`"):
        rt.load(path)
    assert main(["run", str(path), "--steps", "1"]) == 1
    assert "refusing a plan that fails `planmap check`" in capsys.readouterr().err


@pytest.mark.slow
def test_resolve_uses_the_specs_solver(root, tmp_path):
    """cnn-train-mixed is solved by `auto` (the recorded solver is `ip`, warm-started by auto's chain):
    re-solving with the recorded solver gave another plan; with the spec's it reproduces the bytes."""
    shutil.copytree(root / "specs", tmp_path / "specs")
    (tmp_path / "plans").mkdir()
    path = tmp_path / "plans" / "cnn-train-mixed.plan.yaml"
    shutil.copy(root / "plans" / path.name, path)
    report = plan_mod.check(path, resolve=True)
    assert report.ok, report.problems
    assert "re-solved with auto: identical plan" in report.notes

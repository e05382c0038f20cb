"""Spec and cluster inputs are hashed by meaning (format 1.2), model artifacts by bytes; 1.1 plans, which
recorded byte hashes only, are still checked correctly (by bytes)."""

from __future__ import annotations

import pytest

from planmap import plan as plan_mod
from planmap.cli import main
from planmap.plan.canonical import canonical_text
from planmap.plan.document import FORMAT_VERSION
from tests.gitops.conftest import PLAN, SPEC

BASE = "a: 1\nb:\n  c: [1, 2]\n  d: 80GiB\n"


@pytest.mark.parametrize("same", [
    "# a comment\na: 1   # another\nb:\n  c: [1, 2]\n  d: 80GiB\n",
    "b:\n    d: 80GiB\n    c:\n      - 1\n      - 2\na: 1\n",
    "{a: 1, b: {c: [1, 2], d: \"80GiB\"}}\n",
])
def test_comments_whitespace_and_key_order_keep_the_canonical_form(same):
    assert canonical_text(same) == canonical_text(BASE)


@pytest.mark.parametrize("other", [
    BASE.replace("80GiB", "40GiB"), BASE.replace("[1, 2]", "[2, 1]"), BASE.replace("a: 1", "a: 2"),
    BASE + "e: null\n", BASE.replace("a: 1", "a: '1'"),
])
def test_any_change_of_meaning_changes_the_canonical_form(other):
    assert canonical_text(other) != canonical_text(BASE)


def test_unparseable_yaml_has_no_canonical_form():
    assert canonical_text("a: [1,\n") is None
    assert canonical_text("a: 1\na: 2\n") is None  # duplicate keys are an error, not a last-one-wins


def _as_format_1_1(path):
    """Rewrite a plan as the previous format wrote it: byte hashes only, format 1.1, digest recomputed."""
    loaded = plan_mod.load(path, verify_inputs=False)
    doc = loaded.document
    inputs = [i.model_copy(update={"canonical_sha256": None}) for i in doc.inputs]
    old = doc.model_copy(update={"inputs": inputs, "format_version": "1.1"})
    text = path.read_text()
    header = [line[2:] if line.startswith("# ") else "" for line in text.splitlines() if line.startswith("#")]
    path.write_text(plan_mod.render(old, header))


@pytest.mark.slow
def test_plans_of_the_previous_format_are_checked_by_bytes(sample_repo, capsys):
    assert f'format_version: "{FORMAT_VERSION}"' in (sample_repo / PLAN).read_text()
    _as_format_1_1(sample_repo / PLAN)
    text = (sample_repo / PLAN).read_text()
    assert 'format_version: "1.1"' in text and "canonical_sha256" not in text
    assert main(["check", PLAN]) == 0, capsys.readouterr().err
    spec = sample_repo / "specs" / f"{SPEC}.yaml"
    spec.write_text(spec.read_text() + "# a comment\n")
    capsys.readouterr()
    assert main(["check", PLAN]) == 2  # 1.1 recorded the bytes: a comment stales it, as it always did
    assert "stale: spec input" in capsys.readouterr().err


@pytest.mark.slow
def test_model_artifacts_stay_hashed_by_bytes(sample_repo, capsys):
    model = sample_repo / "specs" / "models" / "gpt.mlir"
    model.write_text(model.read_text() + "\n")
    assert main(["check", PLAN]) == 2
    assert "stale: model input" in capsys.readouterr().err


def test_alias_bombs_are_refused_not_expanded_when_hashed():
    """The spec loader's alias and depth limits hold for the canonical hash too (``check`` hashes the spec
    in the repository before anything validates it)."""
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 8)]
    assert canonical_text("\n".join(levels) + "\n") is None

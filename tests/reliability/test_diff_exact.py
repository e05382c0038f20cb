"""`planmap diff` compares exact values: display may round, equality may not (issue 18, item 8)."""

from __future__ import annotations

import shutil

import pytest

from planmap.cli import main

EDITS = {
    "objective +1 ns": ("  objective_ns: 50806\n  step", "  objective_ns: 50807\n  step"),
    "step time +1 ns": ("step_time_ns: 558866", "step_time_ns: 558867"),
    "bytes moved +1": ("bytes_moved: 5507072", "bytes_moved: 5507073"),
    "memory +1 byte": ("memory: 4787712,", "memory: 4787713,"),
    "load +1 ns": ("load_ns: 42832}", "load_ns: 42833}"),
    "data_args": ("data_args: [44]", "data_args: [43]"),
    "certificate bound": ("bound_ns: 50806", "bound_ns: 50805"),
    "certificate gap": ("  gap: 0.0\n", "  gap: 0.01\n"),
    "generator": ('generator: "planmap 0.1.0"', 'generator: "planmap 0.1.1"'),
}


@pytest.fixture
def plans(root, tmp_path):
    a = tmp_path / "a.plan.yaml"
    shutil.copy(root / "plans" / "gpt-8dev.plan.yaml", a)
    return a, tmp_path / "b.plan.yaml"


def test_identical_plans_have_no_differences(plans, capsys):
    a, b = plans
    shutil.copy(a, b)
    assert main(["diff", str(a), str(b)]) == 0
    assert "no differences" in capsys.readouterr().out


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_one_unit_change_is_a_difference(plans, edit, capsys):
    a, b = plans
    old, new = EDITS[edit]
    text = a.read_text()
    assert old in text
    b.write_text(text.replace(old, new, 1))
    assert main(["diff", str(a), str(b)]) == 2
    assert "no differences" not in capsys.readouterr().out


def test_hidden_rounding_shows_exact_values(plans, capsys):
    a, b = plans
    b.write_text(a.read_text().replace("step_time_ns: 558866", "step_time_ns: 558867"))
    assert main(["diff", str(a), str(b)]) == 2
    out = capsys.readouterr().out
    assert "558866 ns" in out and "558867 ns" in out

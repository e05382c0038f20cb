"""Piped or redirected, the solve and explain summaries are never cut to the (narrow) $COLUMNS."""

from __future__ import annotations

import pytest

from planmap.cli import main


@pytest.mark.parametrize("columns", ["20"])
def test_summaries_are_not_cut_when_piped(workdir, capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["solve", "specs/gpt-8dev.yaml", "--solver", "data-parallel"]) == 0
    solved = capsys.readouterr().out
    assert main(["explain", "plans/gpt-8dev.plan.yaml"]) == 0
    explained = capsys.readouterr().out
    for text in (solved, explained):
        assert "…" not in text
        lines = text.splitlines()
        header = next(line for line in lines if "stage" in line and "devices" in line)
        assert all(col in header for col in ("nodes", "ops", "load", "memory / usable"))
        # the certificate and prediction are one line each, whatever the width
        assert any(line.startswith("certificate: ") and "solve time" in line for line in lines)
        assert any(line.startswith("predicted time per microbatch") and "microbatch(es) (" in line for line in lines)
    assert "node0/gpu0-7" in explained
    assert max(map(len, explained.splitlines())) > int(columns)

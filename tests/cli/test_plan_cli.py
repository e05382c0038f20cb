"""`planmap solve / check / diff / explain` end to end on the example specs."""

from __future__ import annotations

import os
import subprocess

import pytest

from planmap.cli import main

SPEC = "mlp-latency-cpu4acc"


@pytest.mark.slow
def test_plans_are_byte_identical_across_hash_seeds_and_check_passes(workdir, planmap_exe):
    """Two processes with different string hashing (set/dict order) solve the same spec to the same
    bytes; both plans then pass `check` and `diff` finds nothing."""
    for seed in ("1", "2"):
        (workdir / seed).mkdir()
        r = subprocess.run([planmap_exe, "solve", f"../specs/{SPEC}.yaml", "-o", "p.plan.yaml"], cwd=workdir / seed,
                           env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "certificate:" in r.stdout and "wrote p.plan.yaml" in r.stdout
    a, b = (workdir / "1" / "p.plan.yaml").read_bytes(), (workdir / "2" / "p.plan.yaml").read_bytes()
    assert a == b, "same inputs must give the same plan whatever PYTHONHASHSEED is"
    assert main(["check", "1/p.plan.yaml"]) == 0
    assert main(["diff", "1/p.plan.yaml", "2/p.plan.yaml"]) == 0


@pytest.mark.slow
def test_hand_edited_plan_fails_check(workdir, capsys):
    assert main(["solve", f"specs/{SPEC}.yaml", "-o", "p.plan.yaml", "-q"]) == 0
    p = workdir / "p.plan.yaml"
    text = p.read_text()
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip().startswith("objective_ns:"))
    lines[i] = lines[i].split(":")[0] + ": 1"
    p.write_text("\n".join(lines) + "\n")
    assert main(["check", str(p)]) == 1
    assert "not reproducible" in capsys.readouterr().err


@pytest.mark.slow
def test_stale_plan_fails_check(workdir, capsys):
    assert main(["solve", f"specs/{SPEC}.yaml", "-o", "p.plan.yaml", "-q"]) == 0
    model = workdir / "specs" / "models" / "mlp.mlir"
    model.write_text(model.read_text() + "\n")
    assert main(["check", "p.plan.yaml"]) == 2  # stale: regenerate (Terraform's "changes present")
    assert "stale: model input" in capsys.readouterr().err


@pytest.mark.slow
def test_infeasible_spec_writes_nothing(workdir, capsys):
    spec = workdir / "specs" / "tiny.yaml"
    spec.write_text((workdir / "specs" / f"{SPEC}.yaml").read_text().replace(
        "cluster: clusters/cpu-4acc-pcie.yaml", "cluster: clusters/tiny.yaml"))
    (workdir / "specs" / "clusters" / "tiny.yaml").write_text(
        (workdir / "specs" / "clusters" / "cpu-4acc-pcie.yaml").read_text()
        .replace("memory: 16GiB", "memory: 1KiB").replace("        - {name: cpu, type: cpu, count: 1}\n", ""))
    assert main(["solve", str(spec), "-o", "tiny.plan.yaml"]) == 1
    err = capsys.readouterr().err
    assert "cannot fit" in err or "needs" in err
    assert "usable" in err
    assert not (workdir / "tiny.plan.yaml").exists()


@pytest.mark.slow
def test_explain_png(workdir, capsys):
    assert main(["solve", f"specs/{SPEC}.yaml", "-o", "p.plan.yaml", "-q"]) == 0
    assert main(["explain", "p.plan.yaml", "--png", "p.png"]) == 0
    data = (workdir / "p.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    from PIL import Image

    with Image.open(workdir / "p.png") as im:
        im.verify()
        assert im.size[0] > 500 and im.size[1] > 300


@pytest.mark.slow
def test_explain_spmd_plan_per_axis(workdir, capsys):
    assert main(["solve", "specs/gpt-train-8dev.yaml", "--solver", "data-parallel", "-o", "dp.plan.yaml", "-q"]) == 0
    capsys.readouterr()
    assert main(["explain", "dp.plan.yaml"]) == 0
    text = capsys.readouterr().out
    assert "mesh: data=8 inside a host" in text
    assert "collective(s)" in text and "compute" in text and "communication" in text
    assert "memory per device" in text and "params" in text

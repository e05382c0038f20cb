"""Plans written by ``planmap solve`` for the example specs run and match the unsharded artifact.

This is the integration of solver and runtime: the latency IP's placement (CPU + 4 accelerators),
the throughput DP's inference pipeline, and its training pipeline with replicated stages whose
forward and backward ops share devices. ``planmap run --verify`` judges each output with the
tolerances of planmap.runtime.verify (float32: rtol 1e-4, atol 1e-5) and exits 1 beyond them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from planmap.cli import main
from tests.runtime.plans import MODELS

SPECS = MODELS.parent


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["mlp-latency-cpu4acc", "gpt-8dev", "gpt-train-8dev"])
def test_solved_example_plan_runs_and_verifies(spec, tmp_path, capsys):
    plan = tmp_path / f"{spec}.plan.yaml"
    # solve in its own process, as a user would (and so that one solve's imports cannot affect another's)
    cli = "import sys; from planmap.cli import main; sys.exit(main())"
    solve = subprocess.run([sys.executable, "-c", cli, "solve", str(SPECS / f"{spec}.yaml"), "-o", str(plan), "-q"],
                           capture_output=True, text=True, timeout=600)
    assert solve.returncode == 0, solve.stdout + solve.stderr
    assert main(["run", str(plan), "--steps", "1", "--verify"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "max error:" in out and "NO" not in out


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["cnn-tpu", "cnn-train-mixed", "gpt-train-2host"])
def test_committed_example_plan_runs_and_verifies(spec, root):
    """The committed plans not re-solved above (sharded stages on submeshes, a mixed A100 + H100 cluster, two
    hosts) run and verify on fake CPU devices, 16 of them in their own process (issue 13's last check)."""
    import os

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=16")
    cli = "import sys; from planmap.cli import main; sys.exit(main())"
    run = subprocess.run([sys.executable, "-c", cli, "run", str(root / "plans" / f"{spec}.plan.yaml"), "--steps", "1",
                          "--verify"], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "max error:" in run.stdout and "NO" not in run.stdout

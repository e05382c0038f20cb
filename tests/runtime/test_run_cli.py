"""``planmap run PLAN --verify``: times the plan and compares it with the unsharded artifact."""

from __future__ import annotations

import numpy as np

from planmap.cli import main
from tests.runtime.conftest import leaves, mlp_batch
from tests.runtime.plans import devs, stage, write_plan


def _plan(plan_dir):
    return write_plan(plan_dir, "mlp", [stage(devs(4), [(0, 9)]), stage(devs(4, 4), [(9, 19)])],
                      data_args=[8], schedule="gpipe", microbatches=2, name="cli")


def test_run_verify_reports_stage_times_and_max_error(plan_dir, capsys):
    assert main(["run", str(_plan(plan_dir)), "--unchecked", "--steps", "2", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "busy ms/step" in out and "step time (median of 2)" in out
    assert "max error:" in out and "NO" not in out
    err = float(out.split("max error:")[1].split()[0])
    assert err < 1e-4


def test_run_with_inputs_from_npz(plan_dir, mlp_params, tmp_path, capsys):
    path = tmp_path / "in.npz"
    args = leaves(mlp_params) + [mlp_batch(64)]
    np.savez(path, **{f"arg{i}": a for i, a in enumerate(args)})
    assert main(["run", str(_plan(plan_dir)), "--unchecked", "--steps", "1", "--inputs", str(path), "--verify"]) == 0
    assert "max error:" in capsys.readouterr().out


def test_run_names_a_missing_input(plan_dir, tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, x=np.zeros((64, 256), np.float32))
    assert main(["run", str(_plan(plan_dir)), "--unchecked", "--inputs", str(path)]) == 1
    assert "no array for argument 0" in capsys.readouterr().err

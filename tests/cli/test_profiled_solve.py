"""`planmap solve` on a profiled op graph never loads jax or the MLIR bindings.

Only a StableHLO artifact needs them; a profiled graph (``planmap.opgraph/v1`` or the Tarnawski
format) is plain JSON, and importing jax would cost most of a short solve's whole-process time. The
check runs the CLI in a fresh interpreter, so modules other tests imported cannot hide an import.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from planmap.frontend import profiled
from planmap.workloads.graphs import random_dag

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, sys
from typer.testing import CliRunner
from planmap.cli import app
r = CliRunner().invoke(app, sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"jax", "jaxlib", "mlir", "torch", "pyomo"})
print(json.dumps({"code": r.exit_code, "output": r.output, "heavy": heavy}))
"""


def test_solving_a_profiled_graph_imports_no_jax_or_mlir(tmp_path):
    (tmp_path / "g32.json").write_text(profiled.dumps(random_dag(32, seed=1), time_unit="ms"))
    shutil.copy(ROOT / "specs" / "clusters" / "cpu-4acc-pcie.yaml", tmp_path / "cluster.yaml")
    (tmp_path / "g32.yaml").write_text(
        "apiVersion: planmap.dev/v1alpha1\nkind: PlanSpec\nmetadata: {name: g32}\nspec:\n"
        "  model: {source: g32.json}\n  cluster: cluster.yaml\n  objective: {kind: throughput}\n"
        "  solver: {name: dp}\n")
    r = subprocess.run([sys.executable, "-c", SCRIPT, "solve", "g32.yaml", "-o", "g32.plan.yaml", "-q"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, result["output"]
    assert (tmp_path / "g32.plan.yaml").exists()
    assert result["heavy"] == [], f"solving a profiled graph imported {result['heavy']}"

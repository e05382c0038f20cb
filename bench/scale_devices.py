"""Time limits on large clusters: ``planmap solve`` wall time against ``timeLimit`` for 64 … 4,096 devices.

Issue 18 asks that every solver honour its time limit within about 10 % (plus a fixed start-up) on
clusters of thousands of devices, and return its best answer so far with a certificate that says so.
Each row solves the example GPT (inference) on ``hosts × 8`` H100 for one objective and solver, with
``timeLimit`` set, in a fresh ``planmap solve`` process. Columns: devices, objective, solver, the
limit, wall and CPU seconds (the machine may be shared: CPU time is the steadier number), the
start-up (the same ``planmap solve`` with solver ``even``, one evaluation: parsing, topology, model,
costs, writing the plan), whether wall <= 1.1 x limit + start-up, and the plan's solver and status.

    .venv/bin/python bench/scale_devices.py                       # 64, 512, 4096 devices, auto, 10 s
    .venv/bin/python bench/scale_devices.py --devices 4096 --limit 5 --solvers auto greedy dp ip
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _stamp import header
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "specs" / "models" / "gpt.mlir"


def cluster_doc(devices: int) -> dict:
    """``devices / 8`` hosts of 8 H100 (NVLink inside a host, 400Gb/s between)."""
    return {"apiVersion": "planmap.dev/v1alpha1", "kind": "Cluster", "metadata": {"name": f"h100-{devices}"},
            "spec": {"deviceTypes": [{"name": "h100", "kind": "gpu", "memory": "80GiB",
                                      "memoryBandwidth": "3350GB/s",
                                      "peakFlops": [{"dtype": "f32", "rate": "67TFLOP/s"}]}],
                     "hosts": [{"name": "node", "count": devices // 8,
                                "devices": [{"name": "gpu", "type": "h100", "count": 8}]}],
                     "links": {"intraHost": {"bandwidth": "450GB/s", "latency": "2us"},
                               "interHost": {"bandwidth": "400Gb/s", "latency": "5us"},
                               "hostDevice": {"bandwidth": "64GB/s", "latency": "5us"}}}}


def spec_doc(objective: str, solver: str, limit: float) -> dict:
    model = {"source": str(MODEL), "mode": "inference", "arguments": {"data": ["tokens"], "parameters": ["params*"]}}
    if objective == "throughput":
        model |= {"globalBatch": 32, "microbatches": 4}
    return {"apiVersion": "planmap.dev/v1alpha1", "kind": "PlanSpec", "metadata": {"name": "scale"},
            "spec": {"model": model, "cluster": "cluster.yaml", "objective": {"kind": objective},
                     "solver": {"name": solver, "timeLimit": f"{limit:g}s"}}}


def run(tmp: Path, devices: int, objective: str, solver: str, limit: float,
        timeout: float) -> tuple[float, float, float, str]:
    """(wall s, CPU s, start-up wall s, solver: certificate status) of one solve."""
    (tmp / "cluster.yaml").write_text(json.dumps(cluster_doc(devices)), encoding="utf-8")  # JSON is YAML
    spec = tmp / "spec.yaml"
    spec.write_text(json.dumps(spec_doc(objective, solver, limit)), encoding="utf-8")
    planmap = str(Path(sys.executable).with_name("planmap"))
    out = tmp / "plan.yaml"
    t = time.perf_counter()  # start-up: the same solve with the one-evaluation 'even' split
    subprocess.run([planmap, "solve", str(spec), "--solver", "even", "-o", str(out)], capture_output=True,
                   timeout=timeout)
    startup = time.perf_counter() - t
    out.unlink(missing_ok=True)
    t, before = time.perf_counter(), os.times()
    try:
        proc = subprocess.run([planmap, "solve", str(spec), "-o", str(out)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t, math.nan, startup, "no answer"
    wall, after = time.perf_counter() - t, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if proc.returncode != 0 or not out.exists():
        return wall, cpu, startup, f"rc {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"
    cert = YAML(typ="safe").load(out.read_text(encoding="utf-8")).get("solver") or {}
    return wall, cpu, startup, f"{cert.get('name', '?')}: {cert.get('status', '?')}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, nargs="+", default=[64, 512, 4096])
    ap.add_argument("--objectives", nargs="+", default=["throughput", "latency"])
    ap.add_argument("--solvers", nargs="+", default=["auto"])
    ap.add_argument("--limit", type=float, default=10.0)
    args = ap.parse_args()
    print(header())
    print(f"{'devices':>7} {'objective':>10} {'solver':>12} {'limit':>6} {'wall s':>7} {'cpu s':>7} {'start s':>7} "
          f"{'ok':>3}  status")
    with tempfile.TemporaryDirectory() as d:
        for devices in args.devices:
            for objective in args.objectives:
                for solver in args.solvers:
                    wall, cpu, startup, status = run(Path(d), devices, objective, solver, args.limit,
                                                     timeout=3 * args.limit + 120)
                    ok = "yes" if wall <= 1.1 * args.limit + startup else "NO"
                    print(f"{devices:>7} {objective:>10} {solver:>12} {args.limit:>6g} {wall:>7.1f} {cpu:>7.1f} "
                          f"{startup:>7.1f} {ok:>3}  {status}", flush=True)


if __name__ == "__main__":
    main()

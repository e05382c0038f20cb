"""The throughput DP with and without its lossless reductions, on the paper-style workloads.

Tarnawski et al.'s C++ DP and their published input files are not available here (no network), so
the comparison is planmap's DP against itself without the free-leaf merging (``reduce: false``),
on the synthetic paper-style graphs of :mod:`planmap.workloads.pipelines` — including
``gnmt-sinks-layers``, GNMT with 17 zero-cost sinks hanging off one node each, the shape that made
the unreduced DP enumerate millions of ideals. Paper cluster: 1 CPU + k accelerators through host
memory, tight memory, training with 1F1B and 4 microbatches. Each DP runs in a fresh process, so
its peak memory (VmHWM) is its own; one run each.

Run: ``nice -n 10 .venv/bin/python bench/paper.py`` (``--quick``: GNMT and ResNet only, the unreduced
DP stopped after 30 s; a few minutes).
"""

from __future__ import annotations

import argparse
import math
import time

from _stamp import header

from planmap import solvers
from planmap.errors import PlanmapError
from planmap.problem import Problem, SolveOptions
from planmap.workloads.graphs import paper_topology
from planmap.workloads.pipelines import tight_memory, workload

WORKLOADS = ("gnmt-sinks-layers", "gnmt-layers", "resnet50-layers", "bert12-ops", "inception-layers")


def problem_for(name: str, training: bool, k: int) -> Problem:
    g = workload(name, training=training)
    kw = dict(mode="training", schedule="1f1b", microbatches=4) if training else {}
    return Problem.from_graph(g, paper_topology(k, memory=tight_memory(g, k, **kw)), **kw)


def _child(conn, name: str, training: bool, k: int, reduce: bool, max_ideals: int, time_limit: float) -> None:
    """Prepare and solve one case in a fresh interpreter; send (units, ideals, merged, s, peak MB, obj)."""
    from planmap.solvers.pipeline.dp import prepare

    def high_water_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024

    p = problem_for(name, training, k)
    t0 = time.perf_counter()
    try:
        prep = prepare(p, max_ideals, reduce=reduce)
        sol = solvers.get("dp").solve(p, SolveOptions(time_limit=time_limit, passthrough={
            "reduce": reduce, "max_ideals": max_ideals}))
        out = (prep.num_units, f"{prep.num_ideals:,}", prep.merged, time.perf_counter() - t0, high_water_mb(),
               sol.certificate.objective, str(sol.certificate.status))
    except PlanmapError as e:
        out = ("?", f"> {max_ideals:,}" if "ideals" in str(e) else "?", "?", time.perf_counter() - t0,
               high_water_mb(), math.nan, "refused")
    conn.send(out)
    conn.close()


def measure(name: str, training: bool, k: int, reduce: bool, max_ideals: int, time_limit: float) -> tuple:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, name, training, k, reduce, max_ideals, time_limit))
    child.start()
    out = recv.recv()
    child.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accelerators", type=int, default=4)
    ap.add_argument("--max-ideals", type=int, default=2_000_000, help="cap for the unreduced enumeration")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(header() + "\n", flush=True)
    names = WORKLOADS[:3] if args.quick else WORKLOADS
    if args.quick:  # the unreduced GNMT with sinks is what takes long: stop it early
        args.time_limit, args.max_ideals = min(args.time_limit, 30.0), min(args.max_ideals, 1_000_000)
    cli_time()
    print(f"\n# Throughput DP with / without the lossless reductions: paper cluster, 1 CPU + {args.accelerators} "
          "accelerators, tight memory; training 1F1B x 4 microbatches\n")
    print("| workload | nodes | units (reduced / not) | merged | ideals reduced | ideals not reduced | "
          "time s (reduced / not) | peak MB (reduced / not) | optimum ms | status (reduced / not) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for training in (False, True):
            n = workload(name, training=training).num_nodes
            r = measure(name, training, args.accelerators, True, args.max_ideals, args.time_limit)
            u = measure(name, training, args.accelerators, False, args.max_ideals, args.time_limit)
            label = f"{name} {'train' if training else 'infer'}"
            same = "" if u[6] != "optimal" or abs(r[5] - u[5]) <= 1e-9 * r[5] else " (DIFFERS)"
            print(f"| {label} | {n} | {r[0]} / {u[0]} | {r[2]} | {r[1]} | {u[1]} | {r[3]:.2f} / {u[3]:.2f} | "
                  f"{r[4]:.0f} / {u[4]:.0f} | {r[5] * 1e3:.4f}{same} | {r[6]} / {u[6]} |", flush=True)


def cli_time(nodes: int = 32, runs: int = 3) -> None:
    """Whole-process ``planmap solve`` (dp) on a profiled graph of ``nodes`` nodes: wall and CPU seconds
    of the child process (median of ``runs``), next to a bare ``python -c 'import numpy'``."""
    import resource
    import shutil
    import statistics
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from planmap.frontend import profiled
    from planmap.workloads.graphs import random_dag

    def timed(cmd: list[str], cwd: str) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.perf_counter() - t0, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    root = Path(__file__).resolve().parents[1]
    exe = shutil.which("planmap", path=str(Path(sys.executable).parent)) or "planmap"
    with tempfile.TemporaryDirectory() as d:
        Path(d, "g.json").write_text(profiled.dumps(random_dag(nodes, seed=1), time_unit="ms"))
        shutil.copy(root / "specs" / "clusters" / "cpu-4acc-pcie.yaml", Path(d, "cluster.yaml"))
        Path(d, "g.yaml").write_text("apiVersion: planmap.dev/v1alpha1\nkind: PlanSpec\nmetadata: {name: g}\n"
                                     "spec:\n  model: {source: g.json}\n  cluster: cluster.yaml\n"
                                     "  objective: {kind: throughput}\n  solver: {name: dp}\n")
        print(f"\n### Whole process: `planmap solve` (dp) on a profiled {nodes}-node graph, median of {runs}\n")
        print("| command | wall s | CPU s |")
        print("|---|---|---|")
        for label, cmd in ((f"planmap solve ({nodes} nodes)", [exe, "solve", "g.yaml", "-o", "g.plan.yaml", "-q"]),
                           ("python -c 'import numpy'", [sys.executable, "-c", "import numpy"])):
            times = [timed(cmd, d) for _ in range(runs)]
            print(f"| {label} | {statistics.median(t for t, _ in times):.2f} | "
                  f"{statistics.median(c for _, c in times):.2f} |", flush=True)


if __name__ == "__main__":
    main()

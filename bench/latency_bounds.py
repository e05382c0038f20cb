"""Latency IP bounds with and without the probing lower bound, at equal time limits.

For each of ``bench/latency.py``'s quick layer graphs (q = 2, memory 70% full, 1 CPU + k
accelerators) the latency IP runs twice, HiGHS with one thread: once as shipped (probing gets
``PROBE_SHARE`` of the time limit) and once with probing off; the table gives the sweep bound, the
bound and incumbent at the limit, and the gap. One run each (the machine's load shows in the times).

    nice -n 10 .venv/bin/python bench/latency_bounds.py --time-limit 120
"""

from __future__ import annotations

import argparse

from _stamp import header

from planmap.problem import Problem, SolveOptions
from planmap.solvers.latency import ip as lip
from planmap.workloads.nets import bert, gnmt, net_topology, resnet50

INSTANCES = {"gnmt-layer": (lambda: gnmt(), 4), "resnet50-layer": (lambda: resnet50(granularity="layer"), 4),
             "bert24-layer": (lambda: bert(24, granularity="layer"), 8)}


def run(name: str, time_limit: float, probe: bool) -> tuple[float, float, float, str]:
    build, k = INSTANCES[name]
    g = build()
    p = Problem.from_graph(g, net_topology(g, k, fill=0.7), objective="latency", max_subgraphs=2, contiguous=False)
    share = lip.PROBE_SHARE
    lip.PROBE_SHARE = share if probe else 0.0
    try:
        c = lip.LatencyIP().solve(p, SolveOptions(time_limit=time_limit, threads=1)).certificate
    finally:
        lip.PROBE_SHARE = share
    return c.objective, c.bound, c.gap, str(c.status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--only", default=None, help="substring of the instance names to run")
    args = ap.parse_args()
    print(header() + "\n", flush=True)
    print(f"time limit {args.time_limit:g}s, HiGHS 1 thread; ms")
    print(f"{'instance':16} {'probing':8} {'incumbent':>10} {'bound':>8} {'gap':>7}  status")
    for name in INSTANCES:
        if args.only and args.only not in name:
            continue
        for probe in (False, True):
            obj, bound, gap, status = run(name, args.time_limit, probe)
            print(f"{name:16} {'on' if probe else 'off':8} {obj * 1e3:10.2f} {bound * 1e3:8.2f} {gap:7.1%}  {status}",
                  flush=True)


if __name__ == "__main__":
    main()

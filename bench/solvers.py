"""Solvers compared on the same problems: objective, solve time, memory per device, feasibility.

The table later solver issues extend: add a name to ``SOLVERS`` (or pass ``--solvers``); every
solver runs through :func:`planmap.solve.solve`, so its answer is re-evaluated and checked the same
way. Workloads: profiled synthetic graphs (random DAGs and layered networks, inference and
training, latency and throughput) on the cluster of Tarnawski et al. (1 CPU + 4 accelerators), and
the example specs in specs/*.yaml once the StableHLO front end (``planmap.frontend.load_model``) is
there.

Run: .venv/bin/python bench/solvers.py [--quick] [--solvers greedy metis] [--time-limit 5] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _stamp import header

from planmap.errors import InfeasibleError, PlanmapError, SolverUnavailableError
from planmap.problem import Problem, SolveOptions
from planmap.solve import solve
from planmap.units import format_bytes, format_duration
from planmap.workloads.graphs import layered_dag, paper_topology, random_dag

ROOT = Path(__file__).resolve().parent.parent
SOLVERS = ["even", "single", "greedy", "metis", "local-search"]


@dataclass
class Workload:
    name: str
    build: Callable[[], Problem]


def synthetic_workloads(quick: bool) -> list[Workload]:
    topo = paper_topology(4)
    sizes = [300] if quick else [300, 1000, 2000]
    layers = [(12, 4)] if quick else [(12, 4), (40, 6)]
    out = []
    for n in sizes:
        g = random_dag(n, seed=n)
        out.append(Workload(f"random{n} latency q=2", lambda g=g: Problem.from_graph(
            g, topo, objective="latency", contiguous=False, max_subgraphs=2)))
        out.append(Workload(f"random{n} throughput", lambda g=g: Problem.from_graph(
            g, topo, objective="throughput", microbatches=8)))
    for L, w in layers:
        g = layered_dag(L, w, seed=L)
        gt = layered_dag(L, w, seed=L, training=True)
        out.append(Workload(f"layered{L}x{w} latency q=1",
                            lambda g=g: Problem.from_graph(g, topo, objective="latency")))
        out.append(Workload(f"layered{L}x{w} throughput", lambda g=g: Problem.from_graph(
            g, topo, objective="throughput", microbatches=8)))
        out.append(Workload(f"layered{L}x{w} training thr", lambda gt=gt: Problem.from_graph(
            gt, topo, objective="throughput", mode="training", microbatches=8, schedule="1f1b")))
    # tight memory: the model needs about two accelerators' memory
    g = random_dag(600 if quick else 1500, seed=7)
    need = float(g.state_bytes.sum())
    tight = paper_topology(4, memory=int(need / 1.6))
    out.append(Workload(f"random{g.num_nodes} thr tight-mem", lambda: Problem.from_graph(
        g, tight, objective="throughput", microbatches=8)))
    out.append(Workload(f"random{g.num_nodes} lat tight-mem", lambda: Problem.from_graph(
        g, tight, objective="latency", contiguous=False, max_subgraphs=2)))
    # CPU-only operators (5%) cut the accelerators' work; q = 2 calls per accelerator
    g2 = random_dag(400 if quick else 1500, seed=3, unsupported=0.05)
    out.append(Workload(f"random{g2.num_nodes} lat cpu-ops", lambda: Problem.from_graph(
        g2, topo, objective="latency", contiguous=False, max_subgraphs=2)))
    return out


def spec_workloads() -> tuple[list[Workload], str]:
    """The example specs, or why they are skipped."""
    import planmap.frontend as frontend

    if not hasattr(frontend, "load_model"):
        return [], "example specs skipped: planmap.frontend.load_model is not available yet"
    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    out = []
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        out.append(Workload(path.stem, lambda path=path: build_problem(load_spec(path))))
    return out, ""


@dataclass
class Row:
    workload: str
    solver: str
    objective: float | None
    time: float | None
    memory: str
    status: str


def memory_summary(ev, problem: Problem) -> str:
    """The fullest device: used / capacity (or the largest use when memory is unlimited)."""
    cap = ev.capacity
    mem = ev.memory
    finite = np.isfinite(cap) & (cap > 0)
    ratio = np.where(finite, mem / np.where(finite, cap, 1.0), 0.0)
    if ratio.max() > 0:
        d = int(np.argmax(ratio))
        return f"{format_bytes(mem[d])}/{format_bytes(cap[d])} {problem.topology.names[d]}"
    d = int(np.argmax(mem))
    return f"{format_bytes(mem[d])} {problem.topology.names[d]}"


def run(workload: Workload, problem: Problem, solver: str, options: SolveOptions, repeats: int) -> Row:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        try:
            result = solve(problem, solver, options)
        except SolverUnavailableError as e:
            return Row(workload.name, solver, None, None, "", f"n/a: {e}")
        except InfeasibleError as e:
            why = str(e).splitlines()[-1].strip()
            return Row(workload.name, solver, None, time.perf_counter() - t0, "", "infeasible: " + why)
        except PlanmapError as e:
            return Row(workload.name, solver, None, None, "", f"error: {e}")
        times.append(time.perf_counter() - t0)
    ev = result.evaluation
    used = len(np.unique(result.solution.node_device()))
    return Row(workload.name, solver, ev.objective, statistics.median(times), memory_summary(ev, problem),
               f"ok, {used} device(s), {result.solution.num_stages} stage(s)")


def print_table(rows: list[Row]) -> None:
    best: dict[str, float] = {}
    for r in rows:
        if r.objective is not None and math.isfinite(r.objective):
            best[r.workload] = min(best.get(r.workload, math.inf), r.objective)
    header = ("workload", "solver", "objective", "vs best", "time", "fullest device", "status")
    cells = []
    for r in rows:
        obj = f"{r.objective:.4g}s" if r.objective is not None else "-"
        rel = f"{r.objective / best[r.workload]:.3f}" if r.objective is not None and best.get(r.workload) else "-"
        t = format_duration(r.time) if r.time is not None else "-"
        cells.append((r.workload, r.solver, obj, rel, t, r.memory, r.status))
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    last = None
    for c in cells:
        if last is not None and c[0] != last:
            print()
        last = c[0]
        print("  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)).rstrip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", nargs="+", default=SOLVERS, help="solver names (registry), in column order")
    ap.add_argument("--time-limit", type=float, default=5.0, help="seconds per solve (search methods)")
    ap.add_argument("--repeats", type=int, default=3, help="solves per cell; the median time is shown")
    ap.add_argument("--quick", action="store_true", help="small workloads only, one repeat")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", type=Path, help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    run_header = header()
    print(run_header + "\n", flush=True)
    repeats = 1 if args.quick else args.repeats
    options = SolveOptions(time_limit=args.time_limit, seed=args.seed)
    workloads = synthetic_workloads(args.quick)
    specs, note = spec_workloads()
    workloads += specs
    rows: list[Row] = []
    for w in workloads:
        try:
            problem = w.build()
        except Exception as e:  # a front end still in progress must not hide the other rows
            rows.append(Row(w.name, "-", None, None, "", f"not built: {type(e).__name__}: {e}"))
            continue
        for s in args.solvers:
            rows.append(run(w, problem, s, options, repeats))
            print(f"  {w.name} / {s}: done", file=sys.stderr, flush=True)
    print(f"Solvers on paper_topology(4) (1 CPU + 4 accelerators) and the example specs; objective = latency "
          f"or per-microbatch bottleneck (s); time = median of {repeats}; time limit {args.time_limit:g}s")
    print_table(rows)
    if note:
        print(f"\nnote: {note}")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            f.write("".join(f"# {line}\n" for line in run_header.splitlines()))
            wr = csv.writer(f)
            wr.writerow(["workload", "solver", "objective_s", "time_s", "fullest_device", "status"])
            for r in rows:
                wr.writerow([r.workload, r.solver, r.objective, r.time, r.memory, r.status])
    return 0


if __name__ == "__main__":
    sys.exit(main())

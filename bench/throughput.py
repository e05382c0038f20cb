"""Pipelined throughput: optimal DP and IP against the baselines, on paper-like workloads.

For each workload (BERT at operator granularity, ResNet-50 / GNMT / Inception-v3 at layer
granularity; inference, and training with forward/backward pairs and 1F1B) and each placement
mode (contiguous / non-contiguous), on the paper's cluster (1 CPU + k accelerators through host
memory) with *tight* memory (the accelerators just hold the model), it prints:

* ``dp``: the contiguous optimum (exact; in non-contiguous mode a feasible plan, not a bound);
* ``ip``: objective, proven bound, gap and time within ``--time-limit``, warm-started from the DP;
* every baseline's time per sample, whether it fits memory, and its ratio to the optimum (the
  DP for contiguous, the best IP incumbent for non-contiguous — proven within the IP's gap);
* how many instances reach a proven 1 % gap within the time limit;
* the DP's size on the large graphs: units, ideals, stage candidates, time and peak memory;
* the same for the example specs whose model the front end can load.

Run: ``nice -n 10 .venv/bin/python bench/throughput.py`` (about 35 minutes on 2 shared cores;
``--quick`` for a few minutes: smaller time limits, no Inception IPs).
"""

from __future__ import annotations

import argparse
import glob
import math
import re
import time
from dataclasses import dataclass, field, replace

import numpy as np

from planmap import solvers
from planmap.errors import PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions
from planmap.synthetic import paper_topology
from planmap.synthetic_pipelines import tight_memory, workload

BASELINES = ("single", "even", "greedy", "metis", "local-search", "pipedream")
WORKLOADS = ("gnmt-layers", "resnet50-layers", "bert12-ops", "inception-layers")


@dataclass
class Run:
    name: str
    objective: float = math.nan
    feasible: bool = False
    wall: float = 0.0
    bound: float | None = None
    gap: float | None = None
    status: str = ""
    note: str = ""
    solution: Solution | None = field(default=None, repr=False)


def run(name: str, problem: Problem, options: SolveOptions) -> Run:
    t0 = time.perf_counter()
    try:
        sol = solvers.get(name).solve(problem, options)
    except PlanmapError as e:
        return Run(name, wall=time.perf_counter() - t0, status="error", note=str(e).split("\n")[0][:90])
    wall = time.perf_counter() - t0
    ev = evaluate(problem, sol)
    c = sol.certificate
    return Run(name, ev.objective, ev.feasible, wall, c.bound, c.gap, str(c.status.value), c.message[:90], sol)


def problem_for(name: str, training: bool, contiguous: bool, k: int) -> Problem:
    g = workload(name, training=training)
    kw = dict(mode="training", schedule="1f1b", microbatches=4) if training else {}
    return Problem.from_graph(g, paper_topology(k, memory=tight_memory(g, k, **kw)), contiguous=contiguous, **kw)


def ms(v: float) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v * 1e3:.4g}"


def pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.2%}"


# ------------------------------------------------------------------------------------------ main
def instance_rows(label: str, problem: Problem, args, dp_cache: dict) -> dict:
    key = (label.rsplit(" ", 1)[0])
    opts = SolveOptions(time_limit=args.time_limit, seed=0)
    if key not in dp_cache:  # the DP's plan is the same in both placement modes
        dp_cache[key] = run("dp", replace(problem, contiguous=True), SolveOptions(time_limit=args.dp_time_limit))
    dp = dp_cache[key]
    if dp.solution is not None and not problem.contiguous:
        ev = evaluate(problem, dp.solution)
        dp = replace(dp, objective=ev.objective, feasible=ev.feasible, bound=None, gap=None, status="heuristic")
    ip = Run("ip", status="skipped")
    if not (args.quick and problem.graph.num_nodes > 700 and not problem.contiguous):
        ip_opts = replace(opts, warm_start=dp.solution, passthrough={"start": "dp"})
        ip = run("ip", problem, ip_opts)
    base = {b: run(b, problem, replace(opts, time_limit=args.baseline_time_limit)) for b in BASELINES}
    if problem.contiguous and dp.feasible:
        opt, opt_bound = dp.objective, dp.objective
    else:
        cands = [r for r in (ip, dp) if r.feasible and math.isfinite(r.objective)]
        opt = min((r.objective for r in cands), default=math.nan)
        opt_bound = ip.bound if ip.bound is not None else None
    proven = opt_bound is not None and math.isfinite(opt) and (opt - opt_bound) <= 0.01 * opt
    ip_proven = ip.gap is not None and ip.gap <= 0.01 and ip.feasible
    return dict(label=label, dp=dp, ip=ip, base=base, opt=opt, bound=opt_bound, proven=proven, ip_proven=ip_proven)


def print_instances(rows: list[dict], time_limit: float) -> None:
    head = ["instance", "dp ms", "dp s", "ip ms", "ip bound", "ip gap", "ip s"] + [f"{b}" for b in BASELINES]
    print("\n### Time per sample (ms) and ratio to the optimum; `!` = over memory, `x` = no plan\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        dp, ip = r["dp"], r["ip"]
        dp_cell = dp.status if dp.solution is None else ms(dp.objective) + ("" if dp.feasible else "!")
        cells = [r["label"], dp_cell, f"{dp.wall:.1f}",
                 ms(ip.objective) if ip.solution is not None else ip.status, ms(ip.bound) if ip.bound else "—",
                 pct(ip.gap), f"{ip.wall:.1f}"]
        for b in BASELINES:
            x = r["base"][b]
            if x.solution is None:
                cells.append("x")
            else:
                ratio = f" ({x.objective / r['opt']:.2f})" if math.isfinite(r["opt"]) and r["opt"] > 0 else ""
                cells.append(f"{ms(x.objective)}{ratio}{'' if x.feasible else '!'}")
        print("| " + " | ".join(cells) + " |")
    errors = [(r["label"], x.name, x.note) for r in rows for x in (r["dp"], r["ip"]) if x.status == "error"]
    for label, who, note in errors:
        print(f"- {label}: {who} refused: {note}")
    n = len(rows)
    print(f"\nProven within 1 % in the time limit ({time_limit:g} s for the IP; the DP proves contiguous optima): "
          f"{sum(r['proven'] for r in rows)}/{n} instances; by the IP alone: {sum(r['ip_proven'] for r in rows)}/{n}.")
    ratios = {b: [r["base"][b].objective / r["opt"] for r in rows if r["base"][b].feasible and math.isfinite(r["opt"])]
              for b in BASELINES}
    print("\nMedian ratio to the optimum over instances where the baseline fits memory (fits / instances):")
    for b in BASELINES:
        v = ratios[b]
        print(f"  {b:13s} {np.median(v) if v else float('nan'):.3f}  ({len(v)}/{n})")


def _dp_child(conn, case: tuple, time_limit: float) -> None:
    """Build and solve one case in a fresh interpreter, so its peak memory is the DP's own (VmHWM of
    this process image; ``ru_maxrss`` would also count the parent's, kept across exec on Linux)."""
    from planmap.solvers.pipeline.dp import prepare

    def high_water_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024

    name, training, k, extra = case
    problem = replace(problem_for(name, training, True, k), **extra)
    base = high_water_mb()
    t0 = time.perf_counter()
    sol = solvers.get("dp").solve(problem, SolveOptions(time_limit=time_limit))
    wall = time.perf_counter() - t0
    rss = high_water_mb()
    prep = prepare(problem)
    found = re.search(r"([\d,]+) stage candidates", sol.certificate.message)
    conn.send((prep.num_units, prep.num_ideals, found.group(1) if found else "?", wall, base, rss,
               sol.certificate.objective))
    conn.close()


def dp_scaling(args) -> None:
    import multiprocessing as mp

    print("\n### DP on the large graphs (ideals of the class-contracted contiguity graph)\n")
    print("| instance | units | ideals | stage candidates | time s | RSS before / peak MB | objective ms |")
    print("|---|---|---|---|---|---|---|")
    cases = [("bert12-ops", True, 4, {}), ("inception-layers", False, 4, {}), ("inception-layers", True, 4, {}),
             ("inception-layers", True, 6, {}), ("inception-layers", True, 4, {"variant": "max-fw-plus-max-bw"}),
             ("inception-layers", True, 4, {"replication": True})]
    if args.quick:
        cases = cases[:2]
    ctx = mp.get_context("spawn")
    for case in cases:
        name, training, k, extra = case
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_dp_child, args=(send, case, args.dp_time_limit))
        child.start()
        units, ideals, cand, wall, base, rss, obj = recv.recv()
        child.join()
        label = f"{name} {'train' if training else 'infer'} k={k}" + "".join(
            f" {v if isinstance(v, str) else key}" for key, v in extra.items())
        print(f"| {label} | {units} | {ideals:,} | {cand} | {wall:.1f} | {base:.0f} / {rss:.0f} | {ms(obj)} |",
              flush=True)


def spec_instances(args, dp_cache) -> list[dict]:
    from planmap import frontend
    from planmap.problem import build_problem
    from planmap.spec import load_spec

    rows = []
    if not hasattr(frontend, "load_model"):
        print("\n(example specs skipped: planmap.frontend.load_model is not available)")
        return rows
    print("\n### Example specs")
    for path in sorted(glob.glob("specs/*.yaml")):
        try:
            p = build_problem(load_spec(path))
        except Exception as e:  # the front end is work in progress: report and go on
            print(f"- {path}: not built ({type(e).__name__}: {str(e)[:80]})")
            continue
        if p.objective != "throughput":
            continue
        print(f"- {path}: {p.graph.num_nodes} nodes, {p.num_devices} devices, {p.mode}, "
              f"{'contiguous' if p.contiguous else 'non-contiguous'}")
        rows.append(instance_rows(f"{path.split('/')[-1]} {'c' if p.contiguous else 'nc'}", p, args, dp_cache))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="IP time limit per instance (s)")
    ap.add_argument("--baseline-time-limit", type=float, default=10.0, help="time limit of each baseline (s)")
    ap.add_argument("--dp-time-limit", type=float, default=600.0)
    ap.add_argument("--accelerators", type=int, default=4)
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--quick", action="store_true", help="short limits, skip the largest non-contiguous IPs")
    args = ap.parse_args()
    if args.quick:
        args.time_limit, args.baseline_time_limit = min(args.time_limit, 20.0), min(args.baseline_time_limit, 5.0)
    print(f"# Pipelined throughput: paper cluster, 1 CPU + {args.accelerators} accelerators, tight memory "
          f"(1.3 x an even share + the largest working set); training: 1F1B, 4 microbatches")
    print("(`single` is the registry's one-device baseline: the fastest accelerator that holds the model, "
          "else the CPU — with tight memory it is the CPU)")
    dp_cache: dict = {}
    rows = []
    for name in args.workloads:
        for training in (False, True):
            for contiguous in (True, False):
                p = problem_for(name, training, contiguous, args.accelerators)
                label = f"{name} {'train' if training else 'infer'} {'c' if contiguous else 'nc'}"
                rows.append(instance_rows(label, p, args, dp_cache))
                print(f"  done {label}", flush=True)
    rows += spec_instances(args, dp_cache)
    print_instances(rows, args.time_limit)
    dp_scaling(args)


if __name__ == "__main__":
    main()

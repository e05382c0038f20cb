"""Latency placement benchmark: the latency IP against the baselines, on BERT-, ResNet-, GNMT- and
Inception-shaped profiled graphs (planmap.synthetic_nets) and the example specs.

For each instance it prints the IP's latency, best bound, gap and solve time, the time it took to
get within 2% of its final value, the best contiguous placement (the IP with q = 1), and the
greedy, even-split, METIS and max-load-DP placements' latencies under the same evaluator (a
baseline not installed yet is shown as "-" with a note). It draws incumbent and bound against time
for the largest instance into bench/results/latency_<instance>.png.

    .venv/bin/python bench/latency.py                # quick instances (about 3 minutes)
    nice -n 10 .venv/bin/python bench/latency.py --scale   # the paper's scales (minutes per instance)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from planmap import solvers
from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions
from planmap.solvers.latency.ip import LatencyIP
from planmap.solvers.latency.splits import best_splits
from planmap.synthetic_nets import bert, gnmt, inception_v3, net_topology, resnet50

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BASELINES = ("greedy", "even", "metis", "dp", "local-search")


@dataclass
class Row:
    name: str
    nodes: int
    accelerators: int
    q: int
    ip: float = math.nan
    bound: float = math.nan
    gap: float = math.nan
    status: str = ""
    solve_s: float = math.nan
    to_2pct_s: float = math.nan
    contiguous: float = math.nan
    split: float = math.nan
    baselines: dict[str, float] = field(default_factory=dict)
    trace: list[tuple[float, float | None, float | None]] = field(default_factory=list)


def synthetic_instances(scale: bool, fill: float | None = None) -> list[tuple[str, Problem]]:
    """(name, problem): q = 2 subgraphs per accelerator, memory filled to 60-70% (or ``fill``)."""
    if scale:
        specs = [("bert12-op", bert(12), 8, 0.7), ("resnet50-op", resnet50(), 9, 0.7),
                 ("inception_v3-layer", inception_v3(), 12, 0.6)]
    else:
        specs = [("bert3-op", bert(3), 4, 0.7), ("bert24-layer", bert(24, granularity="layer"), 8, 0.7),
                 ("resnet50-layer", resnet50(granularity="layer"), 4, 0.7), ("gnmt-layer", gnmt(), 4, 0.7)]
    out = []
    for name, g, k, f in specs:
        if fill is not None:
            name, f = f"{name}-fill{fill:g}", fill
        p = Problem.from_graph(g, net_topology(g, k, fill=f), objective="latency", max_subgraphs=2,
                               contiguous=False)
        out.append((name, p))
    return out


def spec_instances(notes: list[str]) -> list[tuple[str, Problem]]:
    """The example specs whose model is an inference artifact, solved for latency (needs the front end)."""
    try:
        from planmap.problem import build_problem
        from planmap.spec.loader import load_spec
    except ImportError as e:  # pragma: no cover - front end not installed
        notes.append(f"example specs skipped: {e}")
        return []
    out = []
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        try:
            spec = load_spec(path)
            if str(spec.spec.model.mode) != "inference":
                continue
            p = build_problem(spec)
        except Exception as e:  # the front end is being built: report, do not stop the benchmark
            notes.append(f"{path.name}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:80]})")
            continue
        if p.objective != "latency":
            p = replace(p, objective="latency")
        out.append((f"spec:{path.stem}", p))
    return out


def baseline_latency(name: str, p: Problem, time_limit: float, notes: list[str]) -> float:
    try:
        solver = solvers.get(name)
    except SolverUnavailableError:
        notes.append(f"{name}: not available yet")
        return math.nan
    target = p if p.objective in solver.objectives else replace(p, objective="throughput", contiguous=True)
    try:
        sol = solver.solve(target, SolveOptions(time_limit=time_limit))
    except PlanmapError as e:
        notes.append(f"{p.name} {name}: {str(e).splitlines()[0][:100]}")
        return math.nan
    ev = evaluate(p, Solution(sol.assignment, sol.stages, sol.certificate))
    return ev.objective if ev.feasible else math.inf


def run_ip(p: Problem, options: SolveOptions) -> tuple[Solution, list[tuple[float, float | None, float | None]], float]:
    t0 = time.perf_counter()
    trace: list[tuple[float, float | None, float | None]] = []

    def progress(*, elapsed, incumbent, bound, message=""):
        trace.append((time.perf_counter() - t0, incumbent, bound))

    sol = LatencyIP().solve(p, replace(options, progress=progress))
    return sol, trace, time.perf_counter() - t0


def bench_one(name: str, p: Problem, time_limit: float, notes: list[str]) -> Row:
    k = int((~p.topology.is_cpu).sum())
    row = Row(name, p.num_nodes, k, p.max_subgraphs)
    for b in BASELINES:
        row.baselines[b] = baseline_latency(b, p, min(15.0, time_limit / 8), notes)
    splits = [evaluate(p, s_).objective for s_ in best_splits(p)]
    row.split = min(splits) if splits else math.nan
    contiguous_budget = time_limit / 3
    cont, trace1, wall1 = run_ip(replace(p, max_subgraphs=1, contiguous=True),
                                 SolveOptions(time_limit=contiguous_budget, rel_gap=0.001))
    row.contiguous = cont.certificate.objective
    sol, trace2, wall2 = run_ip(p, SolveOptions(time_limit=time_limit - contiguous_budget, rel_gap=0.001,
                                                warm_start=cont))
    c = sol.certificate
    # one time axis for the whole pipeline: the q=1 IP (its incumbents are q=2 placements too; its bound
    # is not a q=2 bound), then the q=2 IP warm-started from it
    trace = [(t, inc, None) for t, inc, _ in trace1] + [(wall1 + t, inc, b) for t, inc, b in trace2]
    trace.append((wall1 + wall2, c.objective, c.bound))  # the final state, so the curves reach the end
    row.ip, row.status, row.solve_s, row.trace = c.objective, str(c.status), wall1 + wall2, trace
    row.bound = c.bound if c.bound is not None else math.nan
    row.gap = c.gap if c.gap is not None else math.nan
    within = [t for t, inc, _ in trace if inc is not None and inc <= c.objective * 1.02]
    row.to_2pct_s = within[0] if within else row.solve_s
    return row


def fmt(v: float, scale: float = 1e3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if math.isinf(v):
        return "infeas."
    return f"{v * scale:.2f}"


def print_table(rows: list[Row]) -> None:
    cols = ["instance", "n", "k", "IP ms", "bound", "gap", "status", "total s", "2% s", "q=1 ms", "split", *BASELINES,
            "vs greedy", "vs q=1"]
    lines = [cols]
    for r in rows:
        g = r.baselines.get("greedy", math.nan)
        lines.append([r.name, str(r.nodes), str(r.accelerators), fmt(r.ip), fmt(r.bound),
                      "-" if math.isnan(r.gap) else f"{r.gap:.1%}", r.status, f"{r.solve_s:.0f}", f"{r.to_2pct_s:.0f}",
                      fmt(r.contiguous), fmt(r.split), *[fmt(r.baselines.get(b, math.nan)) for b in BASELINES],
                      "-" if not (g and math.isfinite(g)) else f"{1 - r.ip / g:.1%}",
                      "-" if not math.isfinite(r.contiguous) else f"{1 - r.ip / r.contiguous:.1%}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    for i, line in enumerate(lines):
        print("  ".join(s.rjust(w) if j else s.ljust(w) for j, (s, w) in enumerate(zip(line, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def plot(row: Row, out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t = np.array([x[0] for x in row.trace])
    inc = np.array([np.nan if x[1] is None else x[1] * 1e3 for x in row.trace])
    bnd = np.array([np.nan if x[2] is None else x[2] * 1e3 for x in row.trace])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(t, inc, where="post", label="incumbent (IP)")
    ax.step(t, bnd, where="post", label="best bound")
    for name, v in (("greedy", row.baselines.get("greedy")), ("best contiguous (q=1)", row.contiguous)):
        if v is not None and math.isfinite(v):
            ax.axhline(v * 1e3, ls="--", lw=0.8, color="grey")
            ax.text(t[-1] if len(t) else 0, v * 1e3, name, va="bottom", ha="right", fontsize=8)
    values = np.concatenate([inc[np.isfinite(inc)], bnd[np.isfinite(bnd)]])
    if len(values) and values.min() > 0 and values.max() / values.min() > 5:
        ax.set_yscale("log")
    ax.set_xlabel("seconds since the solve started (q=1 IP, then the q=2 IP from its answer)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"{row.name}: n={row.nodes}, {row.accelerators} accelerators, q={row.q}")
    ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"latency_{row.name.replace(':', '_')}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_table() -> int:
    """Seconds to build the latency IP for growing BERT operator graphs (8 accelerators, q = 2),
    split into the bound sweeps + presolve, Pyomo rows and the translation into HiGHS: what must not
    dominate a solve of minutes."""
    from planmap.solvers import mip
    from planmap.solvers.latency import ip as lip

    print(f"{'nodes':>6} {'rows':>8} {'cols':>8} {'bounds s':>9} {'pyomo s':>8} {'highs s':>8} {'total s':>8}")
    for layers in (4, 8, 15, 30):
        g = bert(layers)
        p = Problem.from_graph(g, net_topology(g, 8, fill=0.7), objective="latency", max_subgraphs=2,
                               contiguous=False)
        horizon = evaluate(p, solvers.get("even").solve(p, SolveOptions())).objective
        t0 = time.perf_counter()
        dt = lip.prepare(p, horizon)
        t1 = time.perf_counter()
        m = lip.build_model(p, horizon=horizon, data=dt)
        t2 = time.perf_counter()
        mip.HighsSession(m)
        t3 = time.perf_counter()
        print(f"{p.num_nodes:>6} {m.nconstraints():>8} {m.nvariables():>8} {t1 - t0:>9.2f} {t2 - t1:>8.2f} "
              f"{t3 - t2:>8.2f} {t3 - t0:>8.2f}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", action="store_true", help="the paper's scales: BERT-12 and ResNet-50 operator "
                    "graphs on 8-9 accelerators, Inception-v3 layers on 12")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per instance (q=1 gets a third)")
    ap.add_argument("--only", default=None, help="substring of the instance names to run")
    ap.add_argument("--fill", type=float, default=None, help="share of the accelerators' memory the model fills "
                    "(default 0.6-0.7 per instance; 0.9 makes memory bind)")
    ap.add_argument("--no-specs", action="store_true", help="skip the example specs")
    ap.add_argument("--build", action="store_true", help="only time the model build (bounds, Pyomo rows, HiGHS "
                    "translation) for BERT operator graphs of 250 to 2,000 nodes")
    args = ap.parse_args(argv)
    if args.build:
        return build_table()
    limit = args.time_limit or (600.0 if args.scale else 30.0)
    notes: list[str] = []
    instances = synthetic_instances(args.scale, args.fill)
    if not args.scale and not args.no_specs:
        instances += spec_instances(notes)
    if args.only:
        instances = [(n, p) for n, p in instances if args.only in n]
    rows = []
    for name, p in instances:
        print(f"... {name}: {p.num_nodes} nodes, {int((~p.topology.is_cpu).sum())} accelerators", file=sys.stderr,
              flush=True)
        rows.append(bench_one(name, p, limit, notes))
        r = rows[-1]
        print(f"    IP {fmt(r.ip)} ms (bound {fmt(r.bound)}, gap {r.gap:.1%}, {r.status}), q=1 {fmt(r.contiguous)} ms, "
              + ", ".join(f"{b} {fmt(v)}" for b, v in r.baselines.items()), file=sys.stderr, flush=True)
    print(f"latency (ms) under planmap.evaluate; IP = latency IP with q=2 warm-started from the best of the "
          f"baselines and the q=1 IP; time limit {limit:g}s per instance in total (a third for q=1); "
          f"'2% s' = seconds from the start of the q=1 solve until the incumbent was within 2% of the final IP value; "
          f"q=1 = the latency IP restricted to one contiguous subgraph per accelerator (the best contiguous "
          f"placement found); split = the exact DP over contiguous splits of a topological order")
    print_table(rows)
    for n in dict.fromkeys(notes):
        print(f"note: {n}")
    if rows:
        import json

        RESULTS.mkdir(parents=True, exist_ok=True)
        tag = ("scale" if args.scale else "quick") + (f"_fill{args.fill:g}" if args.fill is not None else "")
        (RESULTS / f"latency_{tag}_traces.json").write_text(json.dumps(
            {r.name: {"trace": r.trace, "greedy": r.baselines.get("greedy"), "contiguous": r.contiguous}
             for r in rows}, indent=1, default=float) + "\n")
        largest = max(rows, key=lambda r: r.nodes)
        path = plot(largest, RESULTS)
        if path is not None:
            print(f"plot: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

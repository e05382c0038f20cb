"""The DQN planner against the exact DP, random search and local search, on problems it was not trained on.

Held-out set: :func:`planmap.solvers.dqn.problems.held_out` (BERT at operator granularity, GNMT with
sinks, 100-node random DAGs, 16-block layered DAGs; inference and training; 1 host and 2 hosts — none of
these graphs or seeds is drawn in pre-training) plus the example specs whose model the front end loads.
For each problem: the exact ``dp`` (60 s; exact within one host, a per-host heuristic across hosts —
marked ``*``), the shipped agent's search (a Q-ranked beam, then a Q-ordered improvement pass, at most
``--evaluations`` evaluate calls and 10 s), random search (the number of ``evaluate`` calls the agent
made: random valid episodes of the same environment) and ``local-search`` (``max_evaluations`` = the same
number; its starting baselines are computed without counting evaluate calls). Ratios are to the DP. Then:

* ``--finetune S``: fine-tuning (:func:`planmap.solvers.dqn.finetune.finetune`) for S seconds on the problems
  ``--finetune-on`` names (default: the first three with an exact reference and at most 500 nodes), the
  search's and the beam's ratio before and after; with ``--finetune-dir D`` a fine-tuned checkpoint
  ``D/<problem>.pt`` is reused when it exists, else written there; ``--finetune-only`` runs only this table;
* ``--ablation N``: the paper's pruning question — a fresh agent trained with and without action masking on
  three problems with an exact DP reference (the fewest, a middling and the most devices among those of at most
  200 nodes): episodes, steps and ``evaluate`` calls until an episode's plan is within 5 % of the DP, and the
  episode within 10 % (at most N episodes; "not in N" when not reached).

Run: ``nice python bench/dqn.py --out bench/results/dqn.md`` (about 10-20 minutes on 2 shared cores).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _stamp import header

from planmap.errors import PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Problem, SolveOptions
from planmap.solvers import get
from planmap.solvers.dqn import checkpoint
from planmap.solvers.dqn.agent import Agent, AgentConfig
from planmap.solvers.dqn.env import PlanEnv
from planmap.solvers.dqn.finetune import finetune
from planmap.solvers.dqn.problems import held_out
from planmap.solvers.dqn.solver import plan_with_agent
from planmap.solvers.dqn.train import train

SPECS = ("specs/gpt-8dev.yaml", "specs/gpt-train-8dev.yaml", "specs/cnn-tpu.yaml", "specs/gpt-train-2host.yaml")


def exact(problem: Problem) -> tuple[float, bool]:
    try:
        sol = get("dp").solve(problem, SolveOptions(time_limit=30))
    except PlanmapError:
        return math.nan, False
    return evaluate(problem, sol).objective, sol.certificate.bound is not None


def random_search(problem: Problem, evaluations: int, seed: int = 0) -> float:
    """The best of ``evaluations`` random valid episodes (each ends in one evaluate call, or a dead end)."""
    env = PlanEnv(problem)
    rng = np.random.default_rng(seed)
    best = math.inf
    for _ in range(evaluations):
        _, info = env.reset()
        done = False
        while not done:
            valid = np.flatnonzero(env.action_masks())
            if not len(valid):
                break
            _, _, done, _, info = env.step(int(rng.choice(valid)))
        best = min(best, float(info.get("objective", math.inf)))
    return best


def local_search(problem: Problem, evaluations: int) -> float:
    try:
        sol = get("local-search").solve(problem, SolveOptions(time_limit=60, passthrough={
            "max_evaluations": evaluations, "restarts": 1}))
    except PlanmapError:
        return math.inf
    ev = evaluate(problem, sol)
    return ev.objective if ev.feasible else math.inf


def problems(count: int) -> list[tuple[str, callable]]:
    items = list(held_out(count))
    for spec in SPECS:
        def make(spec=spec) -> Problem:
            from planmap.assemble import build_problem
            from planmap.spec import load_spec

            return build_problem(load_spec(spec))
        items.append((Path(spec).stem, make))
    return items


def finetune_table(args, built: list[tuple[str, Problem, float]], exact: set[str]) -> list[str]:
    """The search's ratio with the shipped checkpoint and after ``args.finetune`` seconds of fine-tuning on the
    problem itself (the `planmap agent finetune` recipe), on the chosen problems."""
    names = args.finetune_on.split(",") if args.finetune_on else [
        n for n, p, _ in built if n in exact and p.num_nodes <= 500][:3]
    out = ["", f"Fine-tuning {args.finetune:.0f}s per problem (seed 0; ratios to the DP):", "",
           "| problem | before | after | dqn beam before | dqn beam after | episodes | updates | cpu s |",
           "|---|---|---|---|---|---|---|---|"]
    afters = []
    for name, p, ref in [b for b in built if b[0] in names]:
        a, meta = checkpoint.load()
        before = plan_with_agent(a, p, args.evaluations)[0]
        c0 = time.process_time()
        path = args.finetune_dir / f"{name}.pt" if args.finetune_dir else None
        if path is not None and path.is_file():
            a, meta = checkpoint.load(path)
        else:
            log = finetune(a, p, args.finetune)
            meta = {**meta, "finetuned_on": name, "finetune_episodes": len(log.returns),
                    "finetune_updates": a.updates, "finetune_cpu_s": round(time.process_time() - c0)}
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                checkpoint.save(a, path, meta)
        after = plan_with_agent(a, p, args.evaluations, greedy=True)[0]
        afters.append((before.objective / ref, after.objective / ref, before.beam_objective / ref,
                       after.beam_objective / ref))
        out.append(f"| {name} | {fmt(before.objective / ref)} | {fmt(after.objective / ref)} | "
                   f"{fmt(before.beam_objective / ref)} | {fmt(after.beam_objective / ref)} | "
                   f"{meta.get('finetune_episodes', '?')} | {meta.get('finetune_updates', '?')} | "
                   f"{meta.get('finetune_cpu_s', '?')} |")
        print(out[-1], flush=True)
    if afters:
        med = [statistics.median(r[k] for r in afters) for k in range(4)]
        better = [sum(r[k + 1] < r[k] * (1 - 1e-9) for r in afters) for k in (0, 2)]
        out.append(f"\nMedian before {fmt(med[0])}, after {fmt(med[1])} (improved on {better[0]} of {len(afters)}); "
                   f"the beam alone: before {fmt(med[2])}, after {fmt(med[3])} (improved on {better[1]}).")
    return out


def fmt(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--evaluations", type=int, default=32)
    ap.add_argument("--finetune", type=float, default=0.0, help="seconds per problem (0: skip)")
    ap.add_argument("--finetune-on", default="", help="comma-separated problem names")
    ap.add_argument("--finetune-dir", type=Path, default=None, help="reuse / keep fine-tuned checkpoints here")
    ap.add_argument("--finetune-only", action="store_true", help="only the fine-tuning table (--finetune-on)")
    ap.add_argument("--ablation", type=int, default=150, help="episodes at most (0: skip)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent  # bench/profile.py would shadow the stdlib's profile (torch imports it)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    stamp = header()
    print(stamp + "\n", flush=True)
    agent, meta = checkpoint.load()
    if args.finetune_only:  # only the fine-tuning table, on the named problems
        chosen = [(n, mk()) for n, mk in problems(args.count) if n in args.finetune_on.split(",")]
        built = [(n, p, exact(p)[0]) for n, p in chosen]
        tune_lines = finetune_table(args, built, {n for n, *_ in built})
        if args.out:
            args.out.write_text(f"```\n{stamp}\n```\n" + "\n".join(tune_lines) + "\n")
        return
    lines = ["| problem | nodes | devices | dp ms | dqn | dqn beam | random | local search | evals | dqn s | cpu s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"dqn": [], "dqn beam": [], "random": [], "local": []}
    built: list[tuple[str, Problem, float]] = []
    times, cpu_times = [], []
    proven_rows: list[bool] = []
    exact_names: set[str] = set()
    for name, make in problems(args.count):
        p = make()
        ref, proven = exact(p)
        t0, c0 = time.perf_counter(), time.process_time()
        res, _ = plan_with_agent(agent, p, args.evaluations)
        obj, evals = res.objective, res.evaluations
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        times.append(wall)
        cpu_times.append(cpu)
        rnd = random_search(p, evals)
        loc = local_search(p, evals)
        row = {"dqn": obj / ref, "dqn beam": res.beam_objective / ref, "random": rnd / ref, "local": loc / ref}
        for k, v in row.items():
            if math.isfinite(ref):
                ratios[k].append(v)
        if math.isfinite(ref):
            proven_rows.append(proven)
        built.append((name, p, ref))
        exact_names.update({name} if proven and math.isfinite(ref) else set())
        lines.append(f"| {name} | {p.num_nodes} | {p.num_devices} | {ref * 1e3:.4g}{'' if proven else '*'} | "
                     f"{fmt(row['dqn'])} | {fmt(row['dqn beam'])} | {fmt(row['random'])} | {fmt(row['local'])} | "
                     f"{evals} | {wall:.2f} | {cpu:.2f} |")
        print(lines[-1], flush=True)
    summary = ["", "| planner | median ratio | worst ratio | no plan |", "|---|---|---|---|"]
    for k, v in ratios.items():
        fin = [x for x in v if math.isfinite(x)]
        summary.append(f"| {k} | {fmt(statistics.median(fin)) if fin else '—'} | {fmt(max(fin)) if fin else '—'} | "
                       f"{len(v) - len(fin)} |")
    exact_rows = {k: [x for x, pr in zip(v, proven_rows, strict=True) if pr and math.isfinite(x)]
                  for k, v in ratios.items()}
    summary.append(f"\nOn the {len(exact_rows['dqn'])} rows where the DP is exact (no `*`): " + "; ".join(
        f"{k} median {fmt(statistics.median(v))}, worst {fmt(max(v))}" for k, v in exact_rows.items() if v) + ".")
    if args.finetune <= 0:
        summary.append("\nFine-tuning: not run in this bench run (`--finetune S` runs it).")
    summary.append(f"\nDQN inference: wall median {statistics.median(times):.2f}s, worst {max(times):.2f}s; CPU median "
                   f"{statistics.median(cpu_times):.2f}s, worst {max(cpu_times):.2f}s (load average "
                   f"{os.getloadavg()[0]:.1f} at the end). "
                   f"Checkpoint: {meta}.")
    print("\n".join(summary), flush=True)
    tune_lines = finetune_table(args, built, exact_names) if args.finetune > 0 else []
    abl_lines: list[str] = []
    if args.ablation > 0:
        abl_lines = ["", f"Ablation (fresh agent, at most {args.ablation} episodes, on problems with an exact DP "
                         "reference: the first episode within 5 % (and 10 %) of the DP; `not in N`: not reached):", "",
                         "| problem | devices | masking | episodes | steps | evaluate calls | first within 10 % | "
                         "best ratio |", "|---|---|---|---|---|---|---|---|"]
        small = sorted([b for b in built if b[0] in exact_names and b[1].num_nodes <= 200],
                       key=lambda b: (b[1].num_devices, b[1].num_nodes))
        picks = [small[i] for i in sorted({0, len(small) // 2, len(small) - 1})] if small else []
        for name, p, ref in picks:
            for masked in (True, False):
                a = Agent(AgentConfig(eps_decay=1500), seed=0)
                hit: dict[float, tuple[int, int, int]] = {}

                def cb(ep, log, hit=hit, ref=ref):
                    for tol in (1.05, 1.10):
                        if tol not in hit and log.objectives[-1] <= tol * ref:
                            hit[tol] = (ep, log.steps, log.evaluations)

                log = train(a, p, episodes=args.ablation, mask_actions=masked, on_episode=cb)
                best = min(log.objectives) / ref
                miss = f"not in {args.ablation}"
                e, s, c = hit.get(1.05, (miss, "—", "—"))
                ten = hit[1.10][0] if 1.10 in hit else miss
                abl_lines.append(f"| {name} | {p.num_devices} | {'on' if masked else 'off'} | {e} | {s} | {c} | "
                                 f"{ten} | {fmt(best)} |")
                print(abl_lines[-1], flush=True)
    if args.out:
        args.out.write_text("# DQN planner vs exact DP, random search and local search (held-out problems)\n\n"
                            "Generated by `python bench/dqn.py`. Ratios: objective / DP objective (lower is better; "
                            "`*`: the DP is a per-host heuristic there, not exact). Random search and local search "
                            f"get the DQN's number of `evaluate` calls.\n\n```\n{stamp}\n```\n\n"
                            + "\n".join(lines + summary + tune_lines + abl_lines) + "\n")


if __name__ == "__main__":
    main()

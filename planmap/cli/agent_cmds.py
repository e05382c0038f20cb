"""``planmap agent train | finetune | eval``: the DQN planner's pre-training, fine-tuning and evaluation.

The agent lives in ``planmap.solvers.dqn`` (extra ``dqn``: torch and gymnasium), imported inside each
command. ``train`` pre-trains on synthetic graphs and clusters, ``finetune`` continues on one spec's
problem, both writing a checkpoint and (``--png``) the learning curve; ``eval`` plans specs (or the
held-out set) with a checkpoint and compares with the exact DP. Inference in a plan is ``planmap solve``
with ``solver: dqn``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer

agent_app = typer.Typer(name="agent", help="Train, fine-tune and evaluate the DQN planner (solver `dqn`).",
                        no_args_is_help=True)


def _progress(total: float, what: str):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(what), BarColumn(), TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                   transient=False)
    task = bar.add_task(what, total=total, info="")
    return bar, task


def _budget_callback(bar, task, t0: float, seconds: float | None, episodes: int | None):
    import numpy as np

    def cb(ep: int, log) -> None:
        done = ep if episodes is not None else min(seconds or 0.0, time.perf_counter() - t0)
        recent = np.asarray(log.returns[-50:], float)
        bar.update(task, completed=done, info=f"episode {ep}, return {recent.mean():.3g}")

    return cb


def _save(agent, log, out: Path, png: Path | None, meta: dict) -> None:
    from planmap.solvers.dqn import checkpoint
    from planmap.solvers.dqn.train import learning_curve

    sha = checkpoint.save(agent, out, {**meta, "episodes": len(log.returns), "steps": log.steps,
                                       "seconds": round(log.seconds)})
    if png is not None:
        learning_curve(log, png)
    typer.echo(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB, sha256 {sha[:12]}): {len(log.returns)} episodes, "
               f"{log.steps} steps, {log.evaluations} evaluations, {log.seconds:.0f}s")


def train(
    out: Path = typer.Option(..., "-o", "--out", help="Checkpoint to write."),
    minutes: float = typer.Option(12.0, "--minutes", help="Wall-clock budget."),
    episodes: int | None = typer.Option(None, "--episodes", help="Stop after this many episodes."),
    seed: int = typer.Option(0, "--seed"),
    png: Path | None = typer.Option(None, "--png", help="Write the learning curve here."),
) -> None:
    """Pre-train a new agent on synthetic graphs and clusters (planmap.workloads)."""
    from planmap.solvers.dqn.agent import Agent, AgentConfig
    from planmap.solvers.dqn.problems import sample_problem
    from planmap.solvers.dqn.train import train as run

    agent = Agent(AgentConfig(eps_decay=15000), seed=seed)
    t0 = time.perf_counter()
    bar, task = _progress(episodes if episodes is not None else minutes * 60, "pre-training")
    with bar:
        log = run(agent, sample_problem, episodes=episodes, seconds=minutes * 60, seed=seed,
                  on_episode=_budget_callback(bar, task, t0, minutes * 60, episodes))
    _save(agent, log, out, png, {"seed": seed, "distribution": "planmap.solvers.dqn.problems.sample_problem"})


def finetune(
    spec: Path = typer.Argument(..., help="The target spec."),
    out: Path = typer.Option(..., "-o", "--out", help="Checkpoint to write."),
    checkpoint_path: Path | None = typer.Option(None, "--checkpoint", help="Start here (default: the shipped one)."),
    seconds: float = typer.Option(300.0, "--seconds", help="Wall-clock budget."),
    seed: int = typer.Option(0, "--seed"),
    png: Path | None = typer.Option(None, "--png", help="Write the learning curve here."),
) -> None:
    """Fine-tune an agent on one spec's problem."""
    from planmap.assemble import build_problem
    from planmap.solvers.dqn import checkpoint
    from planmap.solvers.dqn.finetune import finetune as run
    from planmap.spec import load_spec

    problem = build_problem(load_spec(spec))
    agent, meta = checkpoint.load(checkpoint_path, seed=seed)
    t0 = time.perf_counter()
    bar, task = _progress(seconds, f"fine-tuning on {problem.name}")
    with bar:
        log = run(agent, problem, seconds, seed=seed, on_episode=_budget_callback(bar, task, t0, seconds, None))
    _save(agent, log, out, png, {**meta, "finetuned_on": problem.name})


def evaluate_cmd(
    specs: list[Path] = typer.Argument(None, help="Specs to plan (default: the held-out synthetic set)."),
    checkpoint_path: Path | None = typer.Option(None, "--checkpoint", help="Default: the shipped checkpoint."),
    held_out: int = typer.Option(20, "--held-out", help="Held-out problems when no spec is given."),
    exact: bool = typer.Option(True, "--exact/--no-exact", help="Also run the exact DP for the ratio."),
    evaluations: int = typer.Option(32, "--evaluations", help="Evaluate calls per problem (the agent's search)."),
) -> None:
    """Plan each problem with the agent; print its objective, the exact DP's and the ratio."""
    from rich.console import Console
    from rich.table import Table

    from planmap.assemble import build_problem
    from planmap.evaluate import evaluate
    from planmap.problem import SolveOptions
    from planmap.solvers.dqn import checkpoint
    from planmap.solvers.dqn.problems import held_out as held
    from planmap.solvers.dqn.solver import plan_with_agent
    from planmap.solvers.pipeline.dp import ThroughputDP
    from planmap.spec import load_spec

    agent, meta = checkpoint.load(checkpoint_path)
    items = [(str(s), lambda s=s: build_problem(load_spec(s))) for s in specs] if specs else held(held_out)
    table = Table("problem", "dqn ms", "evals", "dqn s", "dp ms", "ratio")
    ratios = []
    bar, task = _progress(len(items), "evaluating")
    with bar:
        for name, make in items:
            problem = make()
            t0 = time.perf_counter()
            res, _ = plan_with_agent(agent, problem, evaluations, greedy="finetuned_on" in meta)
            obj, evals = res.objective, res.evaluations
            wall = time.perf_counter() - t0
            ref = math.nan
            if exact:
                try:
                    ref = evaluate(problem, ThroughputDP().solve(problem, SolveOptions(time_limit=60))).objective
                except Exception:  # noqa: BLE001 - the comparison is optional
                    ref = math.nan
            ratio = obj / ref if math.isfinite(obj) and ref > 0 else math.nan
            ratios.append(ratio)
            table.add_row(name, f"{obj * 1e3:.4g}", str(evals), f"{wall:.2f}", f"{ref * 1e3:.4g}", f"{ratio:.3f}")
            bar.advance(task)
    Console(highlight=False).print(table)
    import numpy as np

    r = np.asarray([x for x in ratios if math.isfinite(x)])
    if len(r):
        typer.echo(f"ratio to the exact DP: median {np.median(r):.3f}, worst {r.max():.3f} ({len(r)}/{len(ratios)})")


def register(app: typer.Typer) -> None:
    agent_app.command("train")(train)
    agent_app.command("finetune")(finetune)
    agent_app.command("eval")(evaluate_cmd)
    app.add_typer(agent_app, name="agent")

"""``planmap solve | explain | solvers``: from a spec to a plan file (``check`` and ``diff`` are in review_cmds)."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planmap.cli.consoles import console
from planmap.errors import PlanmapError

# stderr carries the live progress line (a terminal only); reports go to stdout through console(), never cut.
err = Console(stderr=True, highlight=False, soft_wrap=True)


def solve(
    spec: Path = typer.Argument(..., help="PlanSpec YAML file.", show_default=False),
    output: Path = typer.Option(None, "--output", "-o", help="Plan file to write.",
                                show_default="plans/<spec file stem>.plan.yaml in the current directory"),
    solver: str = typer.Option(None, "--solver", "-s", help="Solver name; see `planmap solvers`.",
                               show_default="the spec's solver.name, else auto"),
    time_limit: str = typer.Option(None, "--time-limit", "-t", help="Time limit, e.g. 60s or 5min.",
                                   show_default="the spec's solver.timeLimit"),
    gap: float = typer.Option(None, "--gap", help="Relative optimality gap to stop at, e.g. 0.01.",
                              show_default="the spec's solver.relGap"),
    threads: int = typer.Option(None, "--threads", help="Solver threads.", show_default="the spec's solver.threads"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the plan path."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (no live progress)."),
    write_interrupted: bool = typer.Option(False, "--write-interrupted", help="After Ctrl-C/SIGTERM/SIGHUP, write "
                                           "the incumbent even over an existing plan."),
) -> None:
    """Solve a spec and write its plan. Nothing is written when the problem is infeasible or the solve fails.

    Long solves show the elapsed time, incumbent, bound and gap on a live line, refreshed twice a second.
    Interrupted (Ctrl-C, SIGTERM, SIGHUP), the incumbent is written only to a path that does not exist yet
    or with --write-interrupted, and the exit status is 128 + the signal number (130 for Ctrl-C)."""
    from planmap import plan as plan_mod
    from planmap.api import regenerate_args, solve_spec
    from planmap.cli.summary import LiveProgress, print_json, print_summary, summary_data
    from planmap.spec import load_spec

    loaded = load_spec(spec)
    extra = regenerate_args(solver, time_limit, gap, threads)
    plan_path = output or plan_mod.default_plan_path(spec)
    live = not (quiet or as_json)
    status_ctx = err.status("loading the model", spinner="dots") if live else _Null()
    with status_ctx as status:
        progress = LiveProgress(status) if status is not None else None
        with progress or _Null():
            t0 = time.perf_counter()

            def solving(problem) -> None:
                if progress is not None:
                    progress.set_phase(f"solving ({problem.graph.num_nodes} nodes on "
                                       f"{problem.topology.num_devices} devices)")

            problem, result = solve_spec(loaded, solver=solver, time_limit=time_limit, gap=gap, threads=threads,
                                         progress=progress, on_problem=solving)
            interrupted = _interrupted(result.solution.certificate.status)
            doc = plan_mod.make_plan(problem, result.solution, result.evaluation, spec=loaded, plan_path=plan_path)
            _warn_unchecked(doc, loaded, problem)
            keep = interrupted is not None and plan_path.exists() and not write_interrupted
            if not keep:
                plan_mod.save(doc, plan_path, header_lines=plan_mod.header(spec, plan_path, extra))
            wall = time.perf_counter() - t0
    if interrupted is not None:
        err.print("[bold red]interrupted:[/] " + (
            f"kept the existing {plan_path}; the interrupted answer was not written (pass --write-interrupted, "
            "or -o a new path, to keep it)" if keep else f"wrote the interrupted answer to {plan_path}"))
        raise typer.Exit(interrupted)
    out = console()
    if quiet:
        out.print(str(plan_path))
        return
    data = summary_data(problem, result.solution, result.evaluation, doc, plan_path=plan_path, wall=wall,
                        tried=result.tried)
    if as_json:
        print_json(out, data)
        return
    for name, why in result.tried:
        err.print(f"[dim]auto: {name}: {why}[/]")
    print_summary(out, data)


def _warn_unchecked(doc, loaded, problem) -> None:
    """Say so when CLI overrides made a plan that does not follow from its spec (check and run refuse it)."""
    from planmap.plan.certificate import certificate_rules

    wrong, _ = certificate_rules(doc, loaded, problem)
    if wrong:
        err.print("[yellow]warning:[/] the plan does not follow from its spec, so `planmap check` and `planmap run` "
                  f"refuse it (an experiment: `run --unchecked` runs it): {escape('; '.join(wrong))}")


def _interrupted(status) -> int | None:
    """The exit status of an interrupted solve (128 + signal), or None when the solve was not interrupted."""
    from planmap.cli import state
    from planmap.problem import Status

    guard = state.signals
    if guard is not None and guard.received is not None:
        return guard.exit_status()
    return 130 if status == Status.INTERRUPTED else None


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def explain(
    plan: Path = typer.Argument(..., help="Plan file.", show_default=False),
    png: Path = typer.Option(None, "--png", help="Also draw the timeline, memory and placement picture."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Describe a plan: stages, devices, loads, memory, certificate; optionally as a picture.

    The solve's wall time is not in plan files (they are reproducible), so it shows as "not recorded"."""
    from planmap import plan as plan_mod
    from planmap.assemble import build_problem, plan_remat
    from planmap.cli.summary import print_json, print_summary, summary_data
    from planmap.evaluate import evaluate
    from planmap.microbatching import as_planned
    from planmap.peak_memory import with_peak_memory
    from planmap.spec import load_spec

    loaded = plan_mod.load(plan)
    spec_path = loaded.spec_path
    if spec_path is None:
        raise PlanmapError(f"{plan}: the plan records no spec input, so it cannot be explained")
    spec = load_spec(spec_path)
    problem = build_problem(spec, remat=plan_remat(spec, loaded.document))
    solution = plan_mod.to_solution(problem, loaded.document)
    try:
        problem = as_planned(problem, solution)
    except ValueError as e:
        raise PlanmapError(f"{plan}: {e} (run `planmap check {plan}`)") from None
    ev = with_peak_memory(problem, solution, evaluate(problem, solution))
    data = summary_data(problem, solution, ev, loaded.document, plan_path=None, wall=None)
    out = console()
    if ev.spmd is not None and solution.shardings is not None:
        from planmap.sharding.solution import solution_mesh
        from planmap.sharding.summary import spmd_lines

        names = tuple(n for n, _ in solution.shardings.mesh_axes)
        data["sharding"] = list(spmd_lines(solution_mesh(problem, solution), names, ev.spmd,
                                           zero=solution.shardings.zero))
    elif ev.stages:
        from planmap.explain import stage_summary

        data["sharding"] = stage_summary(problem, ev)
    if png is not None:
        from planmap.explain import draw

        data["picture"] = str(draw(png, loaded.document, problem, solution, ev))
    if as_json:
        print_json(out, data)
        return
    print_summary(out, data)
    for line in data.get("sharding", ()):
        out.print(line)
    if png is not None:
        out.print(f"picture: {data['picture']}")


def solvers() -> None:
    """List the solvers, the objectives each handles, and whether it is installed."""
    from planmap import solvers as registry

    out = console()
    t = Table()
    for col in ("solver", "objectives", "available"):
        t.add_column(col)
    for info in registry.available():
        t.add_row(info.name, ", ".join(sorted(info.objectives)) or "-",
                  "yes" if info.available else f"[dim]no: {info.reason}[/]")
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command()(solve)
    app.command()(explain)
    app.command()(solvers)

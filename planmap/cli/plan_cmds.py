"""``planmap solve | check | diff | explain | solvers``: from a spec to a reviewed plan file."""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from planmap.errors import PlanmapError
from planmap.vocabulary import ObjectiveKind

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _fmt_t(seconds: float | None) -> str:
    from planmap.units import format_duration

    return "-" if seconds is None or not math.isfinite(seconds) else format_duration(seconds)


def _summary(problem, solution, ev, plan_path: Path | None, wall: float) -> None:
    from planmap.units import format_bytes

    topo, g = problem.topology, problem.graph
    t = Table(title=f"{problem.name}: {problem.objective} plan, {solution.num_stages} stage(s)", title_justify="left")
    for col in ("stage", "devices", "nodes", "ops", "load", "memory / usable"):
        t.add_column(col, justify="right" if col in ("nodes", "ops", "load") else "left")
    order = list(ev.stage_order) if problem.objective is ObjectiveKind.THROUGHPUT else range(solution.num_stages)
    for k in order:
        nodes = solution.assignment == k
        if not nodes.any():
            continue
        st = solution.stages[k]
        d = st.device
        ops = int(sum(len(g.members_of(int(i))) for i in range(g.num_nodes) if nodes[i]))
        cap = ev.capacity[d]
        mem = f"{format_bytes(ev.memory[d])} / {format_bytes(cap) if math.isfinite(cap) else 'unlimited'}"
        t.add_row(str(k), ",".join(topo.names[x] for x in st.devices), str(int(nodes.sum())), str(ops),
                  _fmt_t(ev.load[d]), mem)
    out.print(t)
    c = solution.certificate
    what = "latency" if problem.objective is ObjectiveKind.LATENCY else "time per microbatch (bottleneck)"
    out.print(f"predicted {what}: [bold]{_fmt_t(ev.objective)}[/]"
              + (f", step {_fmt_t(ev.step_time)} for {max(1, solution.microbatches)} microbatch(es)"
                 if problem.objective is ObjectiveKind.THROUGHPUT else ""))
    bound = f", bound {_fmt_t(c.bound)}" if c.bound is not None else ""
    gap = f", gap {c.gap:.2%}" if c.gap is not None else ""
    out.print(f"certificate: [bold]{c.status}[/] by {c.solver}{f' ({c.backend})' if c.backend else ''}{bound}{gap}; "
              f"solved in {wall:.2f}s" + (f" — {c.message}" if c.message else ""))
    if c.details:
        out.print(f"[dim]{c.details}[/]")
    if plan_path is not None:
        out.print(f"wrote {plan_path}")


class _LiveProgress:
    """Shows a long solve's incumbent and bound on one live line."""

    def __init__(self, status):
        self.status = status

    def __call__(self, *, elapsed: float, incumbent: float | None, bound: float | None, message: str = "") -> None:
        parts = [f"{elapsed:6.1f}s"]
        if incumbent is not None:
            parts.append(f"incumbent {_fmt_t(incumbent)}")
        if bound is not None:
            parts.append(f"bound {_fmt_t(bound)}")
        if message:
            parts.append(message)
        self.status.update("solving: " + ", ".join(parts))


def solve(
    spec: Path = typer.Argument(..., help="PlanSpec YAML file.", show_default=False),
    output: Path = typer.Option(None, "--output", "-o", help="Plan file to write [default: plans/<spec>.plan.yaml]."),
    solver: str = typer.Option(None, "--solver", "-s", help="Solver name (overrides the spec); see `planmap solvers`."),
    time_limit: str = typer.Option(None, "--time-limit", "-t",
                                   help="Time limit, e.g. 60s or 5min (overrides the spec)."),
    gap: float = typer.Option(None, "--gap",
                              help="Relative optimality gap to stop at, e.g. 0.01 (overrides the spec)."),
    threads: int = typer.Option(None, "--threads", help="Solver threads (overrides the spec)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the plan path."),
    write_interrupted: bool = typer.Option(False, "--write-interrupted", help="After Ctrl-C/SIGTERM/SIGHUP, write "
                                           "the incumbent even over an existing plan."),
) -> None:
    """Solve a spec and write its plan. Nothing is written when the problem is infeasible or the solve fails.

    Interrupted (Ctrl-C, SIGTERM, SIGHUP), the incumbent is written only to a path that does not exist yet
    or with --write-interrupted, and the exit status is 128 + the signal number (130 for Ctrl-C)."""
    from planmap import plan as plan_mod
    from planmap.assemble import build_problem
    from planmap.problem import SolveOptions
    from planmap.solve import solve as run_solve
    from planmap.spec import load_spec
    from planmap.units import parse_duration

    loaded = load_spec(spec)
    cfg = loaded.spec.solver
    extra: list[str] = []
    if solver:
        extra += ["--solver", solver]
    if time_limit:
        extra += ["--time-limit", time_limit]
    if gap is not None:
        extra += ["--gap", str(gap)]
    if threads is not None:
        extra += ["--threads", str(threads)]
    try:
        limit_ns = parse_duration(time_limit) if time_limit else cfg.time_limit
    except ValueError as e:
        raise PlanmapError(f"--time-limit: {e}") from None
    plan_path = output or plan_mod.default_plan_path(spec)
    status_ctx = err.status("loading the model", spinner="dots") if not quiet else _Null()
    with status_ctx as status:
        t0 = time.perf_counter()
        problem = build_problem(loaded)
        if status is not None:
            status.update(f"solving ({problem.graph.num_nodes} nodes on {problem.topology.num_devices} devices)")
        options = SolveOptions.from_spec(cfg, time_limit=limit_ns / 1e9, rel_gap=gap, threads=threads or None,
                                         progress=_LiveProgress(status) if status else None)
        result = run_solve(problem, solver or cfg.name, options)
        interrupted = _interrupted(result.solution.certificate.status)
        doc = plan_mod.make_plan(problem, result.solution, result.evaluation, spec=loaded, plan_path=plan_path)
        keep = interrupted is not None and plan_path.exists() and not write_interrupted
        if not keep:
            plan_mod.save(doc, plan_path, header_lines=plan_mod.header(spec, plan_path, extra))
        wall = time.perf_counter() - t0
    if interrupted is not None:
        err.print("[bold red]interrupted:[/] " + (
            f"kept the existing {plan_path}; the interrupted answer was not written (pass --write-interrupted, "
            "or -o a new path, to keep it)" if keep else f"wrote the interrupted answer to {plan_path}"))
        raise typer.Exit(interrupted)
    if quiet:
        out.print(str(plan_path))
        return
    for name, why in result.tried:
        err.print(f"[dim]auto: {name}: {why}[/]")
    _summary(problem, result.solution, result.evaluation, plan_path, wall)


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


def check(
    plans: list[Path] = typer.Argument(..., help="Plan files.", show_default=False),
    resolve: bool = typer.Option(False, "--resolve", help="Also solve each spec again and require identical bytes."),
) -> None:
    """Check plans: inputs unchanged, decisions feasible and reproducing the recorded predictions. Exit 1 otherwise."""
    from planmap.plan import check as run_check

    bad = 0
    for p in plans:
        report = run_check(p, resolve=resolve)
        if report.ok:
            note = f" ({'; '.join(report.notes)})" if report.notes else ""
            out.print(f"{p}: ok{note}")
        else:
            bad += 1
            for msg in report.problems:
                err.print(f"{p}: [red]{msg}[/]")
    if bad:
        raise typer.Exit(1)


def diff(
    old: Path = typer.Argument(..., help="The old plan.", show_default=False),
    new: Path = typer.Argument(..., help="The new plan.", show_default=False),
) -> None:
    """Show what changed between two plans at the level of decisions. Exit 1 when they differ."""
    from planmap import plan as plan_mod
    from planmap.plan.diff import diff_plans

    a = plan_mod.load(old, verify_inputs=False)
    b = plan_mod.load(new, verify_inputs=False)
    names = _op_names(b) or _op_names(a)
    d = diff_plans(a.document, b.document, names)
    if not d.changed:
        out.print("no differences")
        return
    for line in d.settings:
        out.print(f"[yellow]~[/] {line}")
    if d.moved:
        t = Table(title=f"{len(d.moved)} moved op range(s)", title_justify="left")
        for col in ("ops", "from", "to", "layer"):
            t.add_column(col)
        for start, stop, before, after, label in d.moved[:200]:
            t.add_row(f"[{start}, {stop})", before, after, label)
        out.print(t)
    if d.only_old or d.only_new:
        out.print(f"ops placed only in the old plan: {d.only_old}; only in the new plan: {d.only_new}")
    for line in d.shardings:
        out.print(f"[yellow]~[/] sharding {line}")
    t = Table(title="predicted", title_justify="left")
    for col in ("", "old", "new"):
        t.add_column(col)
    for what, a_, b_ in d.predicted:
        t.add_row(what, a_, b_ if a_ == b_ else f"[bold]{b_}[/]")
    out.print(t)
    raise typer.Exit(1)


def _op_names(plan) -> list[str] | None:
    try:
        from planmap.frontend import load_model

        return list(load_model(plan.model_path).op_name)
    except Exception:  # noqa: BLE001 - names are a convenience; the diff works without them
        return None


def explain(
    plan: Path = typer.Argument(..., help="Plan file.", show_default=False),
    png: Path = typer.Option(None, "--png", help="Also draw the timeline, memory and placement picture."),
) -> None:
    """Describe a plan: stages, devices, loads, memory, certificate; optionally as a picture."""
    from planmap import plan as plan_mod
    from planmap.assemble import build_problem
    from planmap.evaluate import evaluate
    from planmap.spec import load_spec

    loaded = plan_mod.load(plan)
    spec_path = loaded.spec_path
    if spec_path is None:
        raise PlanmapError(f"{plan}: the plan records no spec input, so it cannot be explained")
    problem = build_problem(load_spec(spec_path))
    solution = plan_mod.to_solution(problem, loaded.document)
    ev = evaluate(problem, solution)
    _summary(problem, solution, ev, None, 0.0)
    if ev.spmd is not None:
        from planmap.sharding.solution import solution_mesh
        from planmap.sharding.summary import spmd_lines

        names = tuple(n for n, _ in solution.shardings.mesh_axes)
        for line in spmd_lines(solution_mesh(problem, solution), names, ev.spmd):
            out.print(line)
    if png is not None:
        from planmap.explain import draw

        path = draw(png, loaded.document, problem, solution, ev)
        out.print(f"picture: {path}")


def solvers() -> None:
    """List the solvers, the objectives each handles, and whether it is installed."""
    from planmap import solvers as registry

    t = Table()
    for col in ("solver", "objectives", "available"):
        t.add_column(col)
    for info in registry.available():
        t.add_row(info.name, ", ".join(sorted(info.objectives)) or "-",
                  "yes" if info.available else f"[dim]no: {info.reason}[/]")
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command()(solve)
    app.command()(check)
    app.command()(diff)
    app.command()(explain)
    app.command()(solvers)

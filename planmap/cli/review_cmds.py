"""``planmap check | diff``: review plans in CI and pull requests.

Both follow Terraform's detailed exit statuses (:mod:`planmap.cli.exits`): 0 up to date / no
differences, 2 stale / different, 1 error. Text goes to a terminal as tables; piped, the console is
as wide as the longest line, so nothing is cut at 80 columns. ``--format`` picks the other readers:
markdown (a PR comment) and JSON for ``diff``; JSON and GitHub annotations for ``check``.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from planmap.cli.consoles import consoles as _consoles
from planmap.cli.exits import CHANGED
from planmap.errors import PlanmapError, render_error


class DiffFormat(StrEnum):
    text = "text"
    markdown = "markdown"
    json = "json"


class CheckFormat(StrEnum):
    text = "text"
    json = "json"
    github = "github"


def check(
    plans: list[Path] = typer.Argument(..., help="Plan files, or directories to search for *.plan.yaml.",
                                       show_default=False),
    resolve: bool = typer.Option(False, "--resolve", help="Also solve each spec again and require identical bytes."),
    fmt: CheckFormat = typer.Option(CheckFormat.text, "--format", "-f",
                                    help="text, json (schemas/plan-check.schema.json) or github (annotations)."),
) -> None:
    """Check plans: inputs unchanged (spec and cluster by meaning), decisions feasible and reproducing the
    recorded predictions, digest intact. Exit 0 when every plan is up to date, 2 when one is stale (an input
    changed: the message gives the regenerate command), 1 when one is broken, tampered or missing."""
    from planmap.plan import check as run_check
    from planmap.plan.integrity import CheckReport
    from planmap.plan.review import check_github, check_results

    reports = []
    for p in _expand(plans):
        try:
            reports.append(run_check(p, resolve=resolve))
        except PlanmapError as e:  # unreadable plan or spec: an error of this plan, the others still checked
            reports.append(CheckReport(p, problems=[render_error(e).removeprefix(f"{p}: ")]))
    results = check_results(reports)
    if fmt == CheckFormat.json:
        typer.echo(results.model_dump_json(indent=2))
    elif fmt == CheckFormat.github:
        text = check_github(reports)
        if text:
            typer.echo(text)
    else:
        out, err = _consoles()
        for rep in reports:
            if rep.ok:
                note = f" ({'; '.join(rep.notes)})" if rep.notes else ""
                out.print(f"{escape(str(rep.path))}: ok{escape(note)}")
            for msg in rep.problems:
                coded = msg if msg.startswith("error[") else f"error[integrity]: {msg}"  # a finding of the check
                err.print(f"{escape(str(rep.path))}: {escape(coded)}")
            for msg in rep.stale:
                err.print(f"{escape(str(rep.path))}: [yellow]{escape(msg)}[/]")
    if results.exit_status:
        raise typer.Exit(results.exit_status)


def _expand(paths: list[Path]) -> list[Path]:
    """Plan files as given; a directory stands for its ``*.plan.yaml`` files, sorted (what a CI job or a
    pre-commit hook passes when any input may have staled any plan)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(p.rglob("*.plan.yaml"))
            if not found:
                raise PlanmapError(f"{p}: no *.plan.yaml files in this directory")
            out += found
        else:
            out.append(p)
    return out


def diff(
    old: Path = typer.Argument(..., help="The old plan.", show_default=False),
    new: Path = typer.Argument(..., help="The new plan.", show_default=False),
    fmt: DiffFormat = typer.Option(DiffFormat.text, "--format", "-f",
                                   help="text, markdown (a PR comment) or json (schemas/plan-diff.schema.json)."),
) -> None:
    """Show what changed between two plans: moved layers, shardings, settings, then predicted time and memory
    before -> after. Exit 0 when they are equal, 2 when they differ, 1 when a plan cannot be read."""
    from planmap import plan as plan_mod
    from planmap.plan.diff import check_op_ids, diff_plans
    from planmap.plan.review import diff_markdown, diff_report

    a = plan_mod.load(old, verify_inputs=False)
    b = plan_mod.load(new, verify_inputs=False)
    check_op_ids(a.document, str(old))
    check_op_ids(b.document, str(new))
    names = _op_names(b) or _op_names(a)
    report = diff_report(diff_plans(a.document, b.document, names), str(old), str(new), names)
    if fmt == DiffFormat.json:
        typer.echo(report.model_dump_json(indent=2))
    elif fmt == DiffFormat.markdown:
        typer.echo(diff_markdown(report), nl=False)
    else:
        _diff_text(report)
    if report.changed:
        raise typer.Exit(CHANGED)


def _diff_text(r) -> None:
    """The terminal form: one line when nothing or only predictions changed, tables of what moved otherwise."""
    out, _ = _consoles()
    if not r.changed:
        out.print("no differences")
        return
    if r.same_decisions:
        out.print("identical decisions: every op runs where it ran, with the same shardings")
    for line in r.settings:
        out.print(f"[yellow]~[/] {escape(line)}")
    if r.moved:
        t = Table(title=f"{len(r.moved)} moved op range(s)", title_justify="left")
        for col in ("layer", "ops", "from", "to"):
            t.add_column(col, overflow="fold")
        for m in r.moved:
            t.add_row(escape(m.layer or "-"), f"[{m.ops[0]}, {m.ops[1]})", escape(m.old), escape(m.new))
        out.print(t)
    if r.only_old or r.only_new:
        out.print(f"ops placed only in the old plan: {r.only_old}; only in the new plan: {r.only_new}")
    for line in r.shardings:
        out.print(f"[yellow]~[/] sharding {escape(line)}")
    if r.predicted:
        t = Table(title="predicted", title_justify="left")
        for col in ("", "old", "new", "new/old"):
            t.add_column(col, overflow="fold")
        for p in r.predicted:
            t.add_row(escape(p.what), escape(p.old), f"[bold]{escape(p.new)}[/]",
                      "" if p.ratio is None else f"{p.ratio:.2f}×")
        out.print(t)


def _op_names(plan) -> list[str] | None:
    try:
        from planmap.frontend import load_model

        return list(load_model(plan.model_path).op_name)
    except Exception:  # noqa: BLE001 - names are a convenience; the diff works without them
        return None


def register(app: typer.Typer) -> None:
    app.command()(check)
    app.command()(diff)

"""``planmap validate`` and ``planmap schema``: the spec author's tools."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from planmap.cli.exits import CHANGED, ERROR

if TYPE_CHECKING:
    from planmap.spec.diagnostics import Diagnostic


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    github = "github"


def validate(
    files: list[Path] = typer.Argument(..., help="PlanSpec or Cluster YAML files.", show_default=False),
    fmt: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f",
                                     help="text (file:line:col), json, or github (workflow annotations)."),
) -> None:
    """Validate specs: every mistake of every file, each at its line and column. Exit 0 when all are valid,
    1 on any error."""
    from planmap.spec import SpecError, load_document, render

    diagnostics: list[Diagnostic] = []
    ok: list[tuple[Path, Any]] = []
    for f in files:
        try:
            doc = load_document(f)
            ok.append((f, doc))
        except SpecError as e:
            diagnostics.extend(e.diagnostics)
    if fmt == OutputFormat.json:
        typer.echo(render(diagnostics, "json"))
    elif diagnostics:
        typer.echo(render(diagnostics, fmt.value), err=fmt == OutputFormat.text)
    if fmt == OutputFormat.text:
        for f, doc in ok:
            kind = "Cluster" if doc.kind == "Cluster" else "PlanSpec"
            typer.echo(f"{f}: ok ({kind} {doc.metadata.name!r})")
        if diagnostics:
            n_files = len({d.file for d in diagnostics})
            typer.echo(f"{len(diagnostics)} error(s) in {n_files} file(s)", err=True)
    if diagnostics:
        raise typer.Exit(ERROR)


def schema(
    out: Path = typer.Option(Path("schemas"), "--out", "-o", help="Directory to write the schemas into."),
    check: bool = typer.Option(False, "--check", help="Only check that the files are up to date (exit 2 if not)."),
) -> None:
    """Generate the JSON Schemas of planmap's documents (PlanSpec, Cluster, plans, op graphs, check and diff
    reports). With --check: exit 0 when the files are up to date, 2 when one is stale or missing."""
    from planmap.schema import stale, write_all

    if check:
        bad = stale(out)
        if bad:
            typer.echo(f"stale schemas in {out}: {', '.join(bad)}; regenerate with `make schemas`", err=True)
            raise typer.Exit(CHANGED)
        typer.echo(f"schemas in {out} are up to date")
        return
    for p in write_all(out):
        typer.echo(f"wrote {p}")


def register(app: typer.Typer) -> None:
    app.command()(validate)
    app.command()(schema)

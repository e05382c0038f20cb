"""Positioned diagnostics (``path:line:col: error[code]: message (got …; expected …)``).

One diagnostic per mistake; a file's diagnostics are collected and raised together as a
:class:`SpecError`, so a user fixes a spec in one round trip instead of one error per run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from planmap.errors import PlanmapError


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return repr(value)


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem at one place in one file."""

    file: str
    line: int
    col: int
    code: str
    message: str
    got: Any = None
    expected: str | None = None
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.severity}[{self.code}]: {self.text()}"

    def text(self) -> str:
        """The message with its (got …; expected …) tail, without the position."""
        extra = []
        if self.got is not None:
            extra.append(f"got {_show(self.got)}")
        if self.expected:
            extra.append(f"expected {self.expected}")
        tail = f" ({'; '.join(extra)})" if extra else ""
        return f"{self.message}{tail}"

    def to_json(self) -> dict:
        d = asdict(self)
        if d["got"] is not None and not isinstance(d["got"], str | int | float | bool):
            d["got"] = _show(d["got"])
        return d

    def github(self) -> str:
        """GitHub Actions workflow-command form (an annotation on the line)."""
        msg = self.text().replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        return f"::{self.severity} file={self.file},line={self.line},col={self.col},title={self.code}::{msg}"


class SpecError(PlanmapError):
    """A spec (or a file it references) has one or more mistakes; ``diagnostics`` lists them all."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = tuple(sorted(diagnostics, key=lambda d: (d.file, d.line, d.col, d.code, d.message)))
        super().__init__("\n".join(str(d) for d in self.diagnostics))


def render(diagnostics: list[Diagnostic], fmt: str) -> str:
    """Render diagnostics as text, json (a list of objects) or github annotations."""
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2, sort_keys=True, default=str)
    if fmt == "github":
        return "\n".join(d.github() for d in diagnostics)
    return "\n".join(str(d) for d in diagnostics)

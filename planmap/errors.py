"""The exception hierarchy that separates a user's mistake from a bug in planmap.

Everything derived from :class:`PlanmapError` is a problem with the user's input or environment:
the CLI prints its message and exits 1 without a traceback (``--debug`` shows it). Any other
exception is a bug and surfaces with its traceback.

Every such error carries a ``code`` (``error[code]`` in the CLI's output, listed in docs/errors.md):
a message that names its own code (``path:line:col: error[yaml-syntax]: …``) keeps it; any other
message gets its class's code, after the file it starts with (:func:`render_error`), so scripts and
CI annotations can match every user-facing error by code.
"""

from __future__ import annotations

import re

__all__ = ["PlanmapError", "InputError", "InfeasibleError", "StalePlanError", "SolverUnavailableError",
           "render_error"]


class PlanmapError(Exception):
    """A user-facing error: the message says what is wrong and, where possible, how to fix it."""

    code = "invalid"  # a request planmap cannot carry out as given (unknown name, option out of range, no plan)

    def __init__(self, *args: object, code: str | None = None) -> None:
        """``code``: the raise site's own code (docs/errors.md), where it is more specific than the class's."""
        super().__init__(*args)
        if code is not None:
            self.code = code


class InputError(PlanmapError):
    """An input file (model artifact, profile, plan) is missing, unreadable or malformed."""

    code = "input"


class InfeasibleError(PlanmapError):
    """No plan satisfies the constraints; the message names the binding constraint."""

    code = "infeasible"


class StalePlanError(PlanmapError):
    """A plan's recorded input hashes no longer match the files on disk."""

    code = "stale"


class SolverUnavailableError(PlanmapError):
    """A requested solver or MIP backend is not installed."""

    code = "unavailable"


# "file: …" or "file:line:col: …" at the start of a message; a file name has a '/' or a '.' in it
_FILE_PREFIX = re.compile(r"([^\s:]*[/.][^\s:]*(?::\d+){0,2}): ")


def render_error(error: PlanmapError) -> str:
    """The error as the CLI prints it: ``[file[:line:col]: ]error[code]: message``."""
    text = str(error)
    if "error[" in text.split("\n", 1)[0]:
        return text
    m = _FILE_PREFIX.match(text)
    if m:
        return f"{m.group(1)}: error[{error.code}]: {text[m.end():]}"
    return f"error[{error.code}]: {text}"

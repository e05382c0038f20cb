"""The exception hierarchy that separates a user's mistake from a bug in planmap.

Everything derived from :class:`PlanmapError` is a problem with the user's input or environment:
the CLI prints its message and exits 1 without a traceback (``--debug`` shows it). Any other
exception is a bug and surfaces with its traceback.
"""

from __future__ import annotations


class PlanmapError(Exception):
    """A user-facing error: the message says what is wrong and, where possible, how to fix it."""


class InputError(PlanmapError):
    """An input file (model artifact, profile, plan) is missing, unreadable or malformed."""


class InfeasibleError(PlanmapError):
    """No plan satisfies the constraints; the message names the binding constraint."""


class StalePlanError(PlanmapError):
    """A plan's recorded input hashes no longer match the files on disk."""


class SolverUnavailableError(PlanmapError):
    """A requested solver or MIP backend is not installed."""

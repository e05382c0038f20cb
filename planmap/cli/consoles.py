"""The consoles the CLI prints its reports to.

On a terminal rich fits tables to the window. Piped or redirected (CI logs, ``| less``, a file),
rich would assume 80 columns (or ``$COLUMNS``) and cut cells with an ellipsis; there the consoles are
as wide as the longest line instead, so nothing a command reports is ever cut. Made per call (not at
import), so a test's or wrapper's replaced ``sys.stdout`` is the one examined.
"""

from __future__ import annotations

from rich.console import Console

__all__ = ["console", "consoles"]

UNCUT_WIDTH = 100_000


def console(*, stderr: bool = False) -> Console:
    """stdout (or stderr) console: the terminal's width on a terminal, never cut otherwise."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else UNCUT_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def consoles() -> tuple[Console, Console]:
    """The stdout and stderr consoles (see :func:`console`)."""
    return console(), console(stderr=True)

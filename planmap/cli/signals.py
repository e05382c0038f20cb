"""Signals as exceptions: Ctrl-C, SIGTERM and SIGHUP unwind the stack like a KeyboardInterrupt.

The default action of SIGTERM/SIGHUP kills the process at once, leaving a ``.tmp`` file of an
atomic write behind; raised as :class:`Terminated` (a KeyboardInterrupt, so solvers that keep
their incumbent on Ctrl-C do the same here) they run every ``finally`` and the CLI exits with the
conventional status 128 + signal number (130 SIGINT, 143 SIGTERM, 129 SIGHUP). The guard records
the signal so that ``solve`` can tell an interrupted answer from a finished one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["Terminated", "SignalGuard"]

_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
                 if s is not None)
# What signal.signal takes and returns: a handler, SIG_DFL/SIG_IGN, or None (set outside Python)
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Terminated(KeyboardInterrupt):
    """A catchable signal arrived; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class SignalGuard:
    """Context manager: while active, SIGINT/SIGTERM/SIGHUP raise :class:`Terminated` (main thread only)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, _Handler] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        raise Terminated(signum)

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for s in _SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def exit_status(self, default: int = 130) -> int:
        """128 + the signal received, or ``default`` (an interrupt the solver caught itself is a SIGINT)."""
        return default if self.received is None else 128 + self.received

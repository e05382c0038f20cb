"""Time boxes: stop a phase of a solver that has no deadline of its own when the time limit runs out.

Model building (Pyomo, pure Python), handing a model to a backend and the quick start methods of the
exact solvers scale with the cluster (D² transfer charges, D devices per operator); on thousands of
devices one such phase alone can outlast the whole time limit. Rather than thread a deadline through
every loop, a solver runs such a phase inside :func:`time_box`: a ``SIGALRM`` timer that raises
:class:`TimeBoxExpired` in the phase when its seconds are up. The solver catches it and returns its
best answer so far, certified ``time limit``.

:class:`TimeBoxExpired` derives from ``BaseException``, so the ``except Exception`` guards that keep a
baseline's bug from taking a solver down do not swallow it. The box is a no-op outside the main
thread (signals are delivered there only) and under an outer timer that fires first (the fuzzer's
hang alarm); an outer timer that fires later is re-armed with its remaining time when the box closes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TimeBoxExpired", "time_box"]


class TimeBoxExpired(BaseException):
    """The time box around a solver phase ran out (see the module docstring)."""


@contextmanager
def time_box(seconds: float | None) -> Iterator[None]:
    """Raise :class:`TimeBoxExpired` inside the ``with`` body after ``seconds`` (None: no limit)."""
    usable = (seconds is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL) if usable else (0.0, 0.0)
    if seconds is None or not usable or (outer_left and outer_left <= seconds):
        yield
        return

    def expire(signum, frame):
        raise TimeBoxExpired(f"time box of {seconds:.3g} s expired")

    old = signal.signal(signal.SIGALRM, expire)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - start), 1e-6), outer_interval)

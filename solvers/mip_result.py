"""What a MIP backend returned, and how its progress is observed while it runs: the result record
(:class:`MipResult`, in the caller's units), the mapping of backend termination words onto
:class:`~planmap.problem.Status`, the recorder of improving incumbents and bounds that feeds
``options.progress``, and Ctrl-C as a flag while a backend runs (shared by every backend interface of
:mod:`planmap.solvers.mip` and the HiGHS session of :mod:`planmap.solvers.mip_highs`)."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from planmap.problem import SolveOptions, Status, relative_gap

__all__ = ["OPTIMAL_GAP", "ProgressPoint", "MipResult", "status_for"]

OPTIMAL_GAP = 1e-6  # a backend "optimal" with at most this gap is reported as proven optimal


@dataclass(frozen=True)
class ProgressPoint:
    """One anytime observation: seconds since :func:`solve_model` started, incumbent and bound."""

    elapsed: float
    incumbent: float | None
    bound: float | None


@dataclass(frozen=True)
class MipResult:
    """What a backend returned, in the caller's units (objective values times ``scale``).

    ``termination`` is the backend's own word for how it stopped; ``status`` its mapping onto
    :class:`Status` (``None`` when it stopped without a solution and without proving infeasibility,
    e.g. a time limit before the first incumbent).
    """

    backend: str
    version: str
    termination: str
    status: Status | None
    has_solution: bool
    incumbent: float | None
    bound: float | None
    gap: float | None
    warm_start: str  # "accepted" | "rejected" | "not given" | "not supported" | "unknown"
    translate_time: float
    solve_time: float
    history: tuple[ProgressPoint, ...] = ()
    log: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return self.status == Status.INTERRUPTED


def status_for(termination: str, has_solution: bool, gap: float | None) -> Status | None:
    """Map a backend termination word onto :class:`Status` (None: stopped with nothing to show)."""
    t = termination.lower()
    if "infeasible" in t and "unbounded" not in t:
        return Status.INFEASIBLE
    if not has_solution:
        return None
    if "interrupt" in t:
        return Status.INTERRUPTED
    if "optimal" in t or "convergence" in t:
        return Status.OPTIMAL if gap is None or gap <= OPTIMAL_GAP else Status.GAP_REACHED
    return Status.TIME_LIMIT  # time, node, iteration or solution limits: stopped with an incumbent


# ------------------------------------------------------------------------------------ Ctrl-C
class _Interrupt:
    """A flag that SIGINT sets (instead of raising) while a backend runs in this thread."""

    def __init__(self) -> None:
        self.requested = False

    def request(self, *_: Any) -> None:
        self.requested = True


@contextlib.contextmanager
def _sigint_as_flag(flag: _Interrupt) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, flag.request)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Recorder:
    """Collects incumbents/bounds as they improve and forwards them to ``options.progress``."""

    def __init__(self, options: SolveOptions, scale: float, t0: float, flag: _Interrupt, sense: float = 1.0):
        self.progress = options.progress
        self.scale, self.t0, self.flag, self.sense = scale, t0, flag, sense
        self.points: list[ProgressPoint] = []
        self.incumbent: float | None = None
        self.bound: float | None = None
        self.error: BaseException | None = None

    def _conv(self, v: float | None) -> float | None:
        if v is None or not math.isfinite(v) or abs(v) >= 1e30:
            return None
        return float(v) * self.scale

    def observe(self, incumbent: float | None, bound: float | None, message: str = "") -> None:
        inc, bnd = self._conv(incumbent), self._conv(bound)
        better_inc = inc is not None and (self.incumbent is None
                                          or self.sense * (inc - self.incumbent) < -1e-12 * max(1.0, abs(inc)))
        better_bnd = bnd is not None and (self.bound is None
                                          or self.sense * (bnd - self.bound) > 1e-12 * max(1.0, abs(bnd)))
        if not (better_inc or better_bnd):
            return
        if better_inc:
            self.incumbent = inc
        if better_bnd:
            self.bound = bnd
        point = ProgressPoint(time.perf_counter() - self.t0, self.incumbent, self.bound)
        self.points.append(point)
        if self.progress is not None:
            try:
                self.progress(elapsed=point.elapsed, incumbent=point.incumbent, bound=point.bound, message=message)
            except KeyboardInterrupt:
                self.flag.request()
            except Exception as e:  # a broken progress display must not kill the solve
                self.error = e
                self.progress = None


def _objective_sense(model) -> float:
    import pyomo.environ as pyo

    objs = list(model.component_data_objects(pyo.Objective, active=True))
    if len(objs) != 1:
        raise ValueError(f"solve_model requires exactly one active objective, but got {len(objs)}")
    return 1.0 if objs[0].sense == pyo.minimize else -1.0


def _finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and abs(f) < 1e30 else None


def _gap(incumbent: float | None, bound: float | None, sense: float) -> float | None:
    """:func:`planmap.problem.relative_gap` in the model's sense (``sense`` -1 for a maximisation)."""
    if incumbent is None or bound is None:
        return None
    return relative_gap(sense * incumbent, sense * bound)

"""What the latency solver's certificate says: status, objective, bound and gap as the backend
returned them (kept in the message) and as they stand for the answer (the fields).

Kept apart from :mod:`.ip` so the model's module stays about the model.
"""

from __future__ import annotations

import math
import re

from planmap.problem import Solution, Status, relative_gap

from .. import mip

__all__ = ["NAME", "VERSION"]

NAME = "ip"
VERSION = "1"


def _interrupted(start: Solution, latency: float, name: str, notes: list[str], wall: float, *,
                 timed_out: bool = False) -> Solution:
    """Ctrl-C (or the time limit, ``timed_out``) before the MIP ran: the best baseline, no bound."""
    why = "time limit reached" if timed_out else "interrupted"
    return start.with_certificate(status=Status.TIME_LIMIT if timed_out else Status.INTERRUPTED, solver=NAME,
                                  objective=latency, bound=None, gap=None, version=VERSION, backend=None,
                                  message="; ".join([f"{why} before the MIP; answer is {name}", *notes]),
                                  options={"warm_start": name}, wall_time=wall)


def _certificate_fields(problem, objective, result: mip.MipResult, origin, start_name, start_latency, notes,
                        model, build_time, warm, wall) -> dict:
    bound = result.bound
    # the model's own lower bound on T (critical path, placement-aware time bounds): valid before any
    # branching, so it stands when the backend stops before reporting one or reports a weaker one
    static = float(model.T.lb) * model.time_unit if model.T.lb is not None else None
    floor = (result.status in (Status.TIME_LIMIT, Status.INTERRUPTED, None) and static is not None
             and math.isfinite(static) and (bound is None or static > bound * (1 + 1e-9)))
    if floor:
        bound = static
    if bound is not None:
        bound = min(bound, objective)
    same = result.incumbent is not None and abs(result.incumbent - objective) <= 1e-6 * max(abs(objective), 1e-30)
    gap = result.gap if (same and result.gap is not None and not floor) else relative_gap(objective, bound)
    status = result.status or Status.TIME_LIMIT
    if status == Status.OPTIMAL and not same:
        status = Status.GAP_REACHED if (gap or 0.0) > mip.OPTIMAL_GAP else Status.OPTIMAL
    status, bound, gap, notes = mip.unproven_if_infeasible(status, bound, gap, notes)

    def fmt(v):
        return "none" if v is None else f"{v:.6g}s"

    parts = [f"{result.backend} {result.termination}: incumbent {fmt(result.incumbent)}, bound {fmt(result.bound)}, "
             f"gap {'none' if result.gap is None else f'{result.gap:.4%}'}"]
    if start_latency is not None:
        parts.append(f"warm start {start_name} {start_latency:.6g}s ({result.warm_start if warm else 'not used'})")
    if floor and status != Status.HEURISTIC:
        parts.append(f"bound {fmt(bound)} from the model's time bounds")
    if origin != "ip":
        parts.append(f"answer is the warm start ({origin})")
    parts.append(f"model {model.nconstraints()} rows x {model.nvariables()} cols, q={model.data.q}")
    parts += [n for n in notes if not _timed(n)]
    timings = [f"build {build_time:.2f}s, translate {result.translate_time:.2f}s, solve {result.solve_time:.2f}s",
               *[n for n in notes if _timed(n)]]
    opts = {k: v for k, v in result.options.items() if k != "time_limit"}
    opts.update(q=model.data.q, warm_start=start_name or None)
    return dict(status=status, solver=NAME, objective=objective, bound=bound, gap=gap, version=VERSION,
                backend=result.version, message="; ".join(parts), options=opts, wall_time=wall,
                details="; ".join(timings))


def _timed(note: str) -> bool:
    """Notes that mention wall-clock times vary run to run: they go to details, not into the plan."""
    return re.search(r"\d(\.\d+)?\s*s\b", note) is not None

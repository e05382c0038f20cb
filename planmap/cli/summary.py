"""What ``solve`` and ``explain`` print about a plan (a table, or ``--json``), and the live progress line.

The summary is computed once as plain data (:func:`summary_data`) and then either rendered as a
table or dumped as JSON, so the two never disagree. The step time is the evaluator's, with its
definition (:data:`planmap.explain.STEP_DEFINITION`) said next to it, as in the ``--png`` picture.
A solve's wall time is shown only where it is known: plan files do not record it (it would make
the bytes differ between runs), so ``explain`` says "not recorded" rather than a false 0.00s.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planmap.explain import STEP_DEFINITION, compact_devices, plan_title
from planmap.remat_stages import stage_choices
from planmap.vocabulary import ObjectiveKind

__all__ = ["summary_data", "print_summary", "print_json", "LiveProgress"]


def _fmt_t(seconds: float | None) -> str:
    from planmap.units import format_duration

    return "-" if seconds is None or not math.isfinite(seconds) else format_duration(seconds)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def summary_data(problem, solution, ev, doc, *, plan_path: Path | None, wall: float | None,
                 tried: tuple = ()) -> dict[str, Any]:
    """The summary of a solved or loaded plan as JSON-ready data (times in seconds, memory in bytes)."""
    topo, g = problem.topology, problem.graph
    throughput = problem.objective is ObjectiveKind.THROUGHPUT
    stages = []
    again = stage_choices(problem, solution) if solution.shardings is None else [False] * solution.num_stages
    for k in (list(ev.stage_order) if throughput else range(solution.num_stages)):
        nodes = solution.assignment == k
        if not nodes.any():
            continue
        st = solution.stages[k]
        cap = ev.capacity[st.device]
        stages.append({"stage": int(k), "devices": [topo.names[x] for x in st.devices], "nodes": int(nodes.sum()),
                       "ops": int(sum(len(g.members_of(int(i))) for i in map(int, nodes.nonzero()[0]))),
                       "load_s": _finite(ev.load[st.device]), "memory_bytes": int(round(ev.memory[st.device])),
                       "capacity_bytes": int(cap) if math.isfinite(cap) else None,
                       "memory": _stage_memory(ev, k), "remat": again[k]})
    c = solution.certificate
    return {
        "name": problem.name, "objective": str(problem.objective), "kind": plan_title(doc),
        "plan": None if plan_path is None else str(plan_path), "stages": stages,
        "predicted": {"objective_s": _finite(ev.objective),
                      "step_time_s": _finite(ev.step_time) if throughput else None,
                      "step_definition": STEP_DEFINITION if throughput else None,
                      "microbatches": max(1, solution.microbatches)},
        "certificate": {"status": str(c.status), "solver": c.solver, "backend": c.backend,
                        "bound_s": _finite(c.bound), "gap": c.gap, "message": c.message},
        "wall_time_s": wall, "auto": [{"solver": n, "why": w} for n, w in tried],
        "remat": {"on": any(again), "chosen": "remat" in c.options,
                  "stages": [s["stage"] for s in stages if s["remat"]]},
    }


def _stage_memory(ev, k: int) -> dict[str, Any] | None:
    """Stage ``k``'s program-model memory per device, by part (bytes), with the solvers' linear terms beside."""
    if ev.peak is None:
        return None
    sm = ev.peak.stages[k]
    return {"total_bytes": int(round(sm.total)), "program_bytes": int(round(sm.program)),
            **{f"{a}_bytes": int(round(b)) for a, b in sm.parts().items()}, "in_flight": sm.in_flight,
            "linear_bytes": int(round(sm.linear))}


def _memory_lines(out: Console, stages: list[dict[str, Any]]) -> None:
    """Per stage: the program-model peak per device against capacity, and what it is made of."""
    from planmap.units import format_bytes as b

    shown = [s for s in stages if s.get("memory")]
    if not shown:
        return
    out.print("peak memory by stage, per device, program model (the stage's largest compiled program for one "
              "microbatch + optimizer state + node state + the stash of the other microbatches in flight):")
    for s in shown:
        m, cap = s["memory"], s["capacity_bytes"]
        share = f" ({100 * m['total_bytes'] / cap:.3g}%)" if cap else ""
        out.print(f"  stage {s['stage']}: {b(m['total_bytes'])} of {'unlimited' if cap is None else b(cap)}{share} = "
                  f"program {b(m['program_bytes'])} (params {b(m['params_bytes'])}, inputs {b(m['inputs_bytes'])}, "
                  f"outputs {b(m['outputs_bytes'])}, temp {b(m['temp_bytes'])}) + optimizer "
                  f"{b(m['optimizer_bytes'])} + state {b(m['state_bytes'])} + stash {b(m['stash_bytes'])} "
                  f"({m['in_flight']} microbatch(es) in flight); solver's linear terms {b(m['linear_bytes'])}")


def _remat_line(out: Console, data: dict[str, Any]) -> None:
    """Which stages recompute their layers' forward in their backward (activation checkpointing)."""
    remat = data.get("remat") or {}
    if not (remat.get("on") or remat.get("chosen")):
        return
    how = "chosen per stage by the planner (remat: auto)" if remat.get("chosen") else "set by the spec"
    ids, total = remat.get("stages", []), len(data["stages"])
    if not remat.get("on"):
        out.print(f"activation checkpointing: off ({how})")
    elif len(ids) == total:
        out.print(f"activation checkpointing: on ({how}); each stage's backward runs its layers' forward again")
    else:
        out.print(f"activation checkpointing: stage(s) {', '.join(map(str, ids))} of {total} ({how}); their backward "
                  "runs their layers' forward again, the other stages keep their activations")


def print_json(out: Console, data: dict[str, Any]) -> None:
    out.print_json(json.dumps(data), indent=2, highlight=False)


def print_summary(out: Console, data: dict[str, Any]) -> None:
    """The summary as a table and three lines (prediction, certificate, plan path)."""
    from planmap.units import format_bytes

    t = Table(title=escape(f"{data['name']}: {data['objective']} plan, {data['kind']}"), title_justify="left")
    for col in ("stage", "devices", "nodes", "ops", "load", "memory / usable"):
        t.add_column(col, justify="right" if col in ("nodes", "ops", "load") else "left")
    for s in data["stages"]:
        cap = "unlimited" if s["capacity_bytes"] is None else format_bytes(s["capacity_bytes"])
        t.add_row(str(s["stage"]), compact_devices(s["devices"]), str(s["nodes"]), str(s["ops"]),
                  _fmt_t(s["load_s"]), f"{format_bytes(s['memory_bytes'])} / {cap}")
    out.print(t)
    _memory_lines(out, data["stages"])
    p, c = data["predicted"], data["certificate"]
    if p["step_time_s"] is None:
        out.print(f"predicted latency: [bold]{_fmt_t(p['objective_s'])}[/]")
    else:
        out.print(f"predicted time per microbatch (bottleneck): [bold]{_fmt_t(p['objective_s'])}[/], "
                  f"step {_fmt_t(p['step_time_s'])} for {p['microbatches']} microbatch(es) ({p['step_definition']})")
    _remat_line(out, data)
    bound = f", bound {_fmt_t(c['bound_s'])}" if c["bound_s"] is not None else ""
    gap = f", gap {c['gap']:.2%}" if c["gap"] is not None else ""
    wall = "not recorded in the plan" if data["wall_time_s"] is None else f"{data['wall_time_s']:.2f}s"
    backend = f" ({c['backend']})" if c["backend"] else ""
    message = f" — {escape(c['message'])}" if c["message"] else ""
    out.print(f"certificate: [bold]{c['status']}[/] by {c['solver']}{backend}{bound}{gap}; solve time {wall}{message}")
    if data["plan"] is not None:
        out.print(f"wrote {escape(data['plan'])}")


class LiveProgress:
    """A long solve's phase, elapsed time, incumbent, bound and gap on one live line.

    Solvers report (``__call__``) only when their incumbent or bound improves, which can be minutes
    apart; a ticker thread therefore redraws the line every ``interval`` seconds with the elapsed
    time and the latest report. Display only: nothing here reaches the solver, so plans are unchanged.
    """

    def __init__(self, status: Any, interval: float = 0.5):
        self.status = status
        self.interval = interval
        self.phase = "loading the model"
        self._t0 = time.perf_counter()
        self._latest: tuple[float | None, float | None, str] = (None, None, "")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, *, elapsed: float, incumbent: float | None, bound: float | None, message: str = "") -> None:
        with self._lock:
            self._latest = (incumbent, bound, message)
        self.refresh()

    def line(self) -> str:
        from planmap.problem import relative_gap

        with self._lock:
            incumbent, bound, message = self._latest
            phase = self.phase
        parts = [f"{time.perf_counter() - self._t0:6.1f}s"]
        if incumbent is not None:
            parts.append(f"incumbent {_fmt_t(incumbent)}")
        if bound is not None:
            parts.append(f"bound {_fmt_t(bound)}")
        gap = relative_gap(incumbent, bound) if incumbent is not None and bound is not None else None
        if gap is not None and math.isfinite(gap):
            parts.append(f"gap {gap:.2%}")
        if message:
            parts.append(message)
        return f"{phase}: " + ", ".join(parts)

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
        self.refresh()

    def refresh(self) -> None:
        self.status.update(escape(self.line()))

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def __enter__(self) -> LiveProgress:
        self._thread = threading.Thread(target=self._tick, name="planmap-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

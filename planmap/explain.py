"""``planmap explain``: a plan in words and in one picture.

The picture has three panels: a timeline of one step (the stages of a latency plan on their
devices, or the pipeline schedule of a throughput plan for its microbatches), memory per device
against capacity, and the artifact's ops coloured by the device that runs them.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planmap.evaluate import Evaluation
from planmap.plan.document import PlanDocument
from planmap.problem import Problem, Solution
from planmap.vocabulary import ObjectiveKind

__all__ = ["Blocks", "pipeline_blocks", "latency_blocks", "timeline", "draw", "compact_devices", "plan_kind",
           "plan_title", "stage_summary", "STEP_DEFINITION"]

# What "step time" means, said the same way by the CLI summary and the picture.
STEP_DEFINITION = "step = (microbatches + stages - 1) x bottleneck"


def compact_devices(names: Sequence[str]) -> str:
    """Device names for a label, runs of consecutive numbers merged: ``node0/gpu0-7,node1/gpu0-3``.

    Names are kept in their order; a run is a stretch of names with the same prefix and consecutive
    trailing numbers (``node0/gpu0``, ``node0/gpu1``, ... -> ``node0/gpu0-7``)."""
    parts: list[str] = []
    run: tuple[str, int, int] | None = None  # (prefix, first, last)
    for name in names:
        m = _TRAILING_NUMBER.match(name)
        if m and run is not None and m.group(1) == run[0] and int(m.group(2)) == run[2] + 1:
            run = (run[0], run[1], run[2] + 1)
            continue
        if run is not None:
            parts.append(_run_label(run))
        run = (m.group(1), int(m.group(2)), int(m.group(2))) if m else None
        if m is None:
            parts.append(name)
    if run is not None:
        parts.append(_run_label(run))
    return ",".join(parts)


_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def _run_label(run: tuple[str, int, int]) -> str:
    prefix, first, last = run
    return f"{prefix}{first}" if first == last else f"{prefix}{first}-{last}"


def plan_kind(doc: PlanDocument) -> str:
    """What a plan is: ``spmd`` (one stage over several devices: data-parallel, FSDP, Megatron, the
    sharding IP), ``single-device``, ``pipeline`` (stages streamed with a schedule) or ``placement``
    (ops on devices, run in dependency order: latency plans)."""
    if len(doc.stages) == 1:
        return "single-device" if len(doc.stages[0].devices) == 1 else "spmd"
    return "pipeline" if doc.schedule.kind != "none" else "placement"


def plan_title(doc: PlanDocument) -> str:
    """A plan's kind in words, for the CLI summary and the picture: "gpipe pipeline, 4 stages, 8 microbatches",
    "SPMD over mesh data=4 x tensor=2", "placement over 3 devices", "single device node0/gpu0"."""
    kind = plan_kind(doc)
    mb = doc.schedule.microbatches
    per = f", {mb} microbatch{'es' if mb != 1 else ''}" if doc.objective.kind == "throughput" else ""
    if kind == "pipeline" and (doc.shardings.args or doc.shardings.values):
        meshes = " | ".join(" x ".join(f"{a}={n}" for a, n in zip(st.mesh.axis_names, st.mesh.axis_sizes, strict=True))
                            if st.mesh else "1 device" for st in doc.stages)
        return f"{doc.schedule.kind} pipeline of {len(doc.stages)} sharded stages ({meshes}){per}"
    if kind == "pipeline":
        return f"{doc.schedule.kind} pipeline, {len(doc.stages)} stages{per}"
    if kind == "spmd":
        st = doc.stages[0]
        axes = zip(st.mesh.axis_names, st.mesh.axis_sizes, strict=True) if st.mesh else [("device", len(st.devices))]
        return "SPMD over mesh " + " x ".join(f"{a}={n}" for a, n in axes) + per
    if kind == "single-device":
        return f"single device {doc.stages[0].devices[0]}{per}"
    devices = {d for st in doc.stages for d in st.devices}
    return f"placement, {len(doc.stages)} stages over {len(devices)} devices{per}"


@dataclass(frozen=True)
class Blocks:
    """Timeline boxes: (row label, start s, duration s, label, colour index, kind 'f'|'b'|'s')."""

    rows: list[str]
    boxes: list[tuple[int, float, float, str, int, str]]
    makespan: float


def pipeline_blocks(fw: list[float], bw: list[float], microbatches: int, schedule: str, names: list[str]) -> Blocks:
    """Simulate GPipe or 1F1B over stages with forward/backward times per microbatch."""
    S, m = len(fw), max(1, microbatches)
    training = any(b > 0 for b in bw)
    free = [0.0] * S
    f_end = [[0.0] * m for _ in range(S)]
    b_end = [[0.0] * m for _ in range(S)]
    boxes = []

    def run_f(s, j):
        start = max(free[s], f_end[s - 1][j] if s else 0.0)
        f_end[s][j] = start + fw[s]
        free[s] = f_end[s][j]
        boxes.append((s, start, fw[s], f"F{j}", j, "f"))

    def run_b(s, j):
        start = max(free[s], b_end[s + 1][j] if s < S - 1 else f_end[s][j])
        b_end[s][j] = start + bw[s]
        free[s] = b_end[s][j]
        boxes.append((s, start, bw[s], f"B{j}", j, "b"))

    if not training or schedule != "1f1b":
        for j in range(m):
            for s in range(S):
                run_f(s, j)
        if training:
            for j in range(m):
                for s in range(S - 1, -1, -1):
                    run_b(s, j)
    else:
        # 1F1B: stage s does (S - s) warm-up forwards, then alternates one backward / one forward.
        order = []
        for s in range(S):
            warm = min(S - s, m)
            seq = [("f", j) for j in range(warm)]
            nf, nb = warm, 0
            while nb < m:
                seq.append(("b", nb))
                nb += 1
                if nf < m:
                    seq.append(("f", nf))
                    nf += 1
            order.append(seq)
        pos = [0] * S
        done_f = [[False] * m for _ in range(S)]
        done_b = [[False] * m for _ in range(S)]
        remaining = sum(len(x) for x in order)
        while remaining:
            progressed = False
            for s in range(S):
                if pos[s] >= len(order[s]):
                    continue
                kind, j = order[s][pos[s]]
                if kind == "f" and (s == 0 or done_f[s - 1][j]):
                    run_f(s, j)
                    done_f[s][j] = True
                elif kind == "b" and done_f[s][j] and (s == S - 1 or done_b[s + 1][j]):
                    run_b(s, j)
                    done_b[s][j] = True
                else:
                    continue
                pos[s] += 1
                remaining -= 1
                progressed = True
            if not progressed:  # pragma: no cover - the order above is always runnable
                break
    makespan = max((b[1] + b[2] for b in boxes), default=0.0)
    return Blocks(names, boxes, makespan)


def latency_blocks(problem: Problem, solution: Solution, ev: Evaluation) -> Blocks:
    """Each stage as a box on its device's row, from the evaluator's schedule."""
    names = list(problem.topology.names)
    used = sorted({s.device for s in solution.stages})
    row = {d: i for i, d in enumerate(used)}
    boxes = []
    for k, st in enumerate(solution.stages):
        start, finish = ev.stage_start[k], ev.stage_finish[k]
        if np.isfinite(start) and np.isfinite(finish):
            kind = "c" if problem.topology.is_cpu[st.device] else "s"
            boxes.append((row[st.device], float(start), float(finish - start), f"S{k}", st.device, kind))
    return Blocks([names[d] for d in used], boxes, float(ev.objective))


def timeline(doc: PlanDocument, problem: Problem, solution: Solution, ev: Evaluation) -> tuple[Blocks, str]:
    """The picture's timeline boxes and title. The title's step time is the evaluator's, as in the CLI,
    with its definition; a simulated schedule that takes another time says so."""
    if problem.objective is ObjectiveKind.LATENCY:
        title = f"{plan_title(doc)}: single-stream latency {ev.objective * 1e3:.3g} ms"
        return latency_blocks(problem, solution, ev), title
    topo = problem.topology
    order = list(ev.stage_order)
    fw = [float(ev.fw_load[solution.stages[k].device]) for k in order]
    bw = [float(ev.bw_load[solution.stages[k].device]) for k in order]
    names = [compact_devices([topo.names[d] for d in solution.stages[k].devices]) for k in order]
    if ev.stages:  # whole-cluster plan: each row says its mesh and where its time goes
        names = [f"{name}\n{_stage_label(ev.stages[k])}" for name, k in zip(names, order, strict=True)]
    blocks = pipeline_blocks(fw, bw, solution.microbatches, solution.schedule or "gpipe", names)
    drawn = ("" if abs(blocks.makespan - ev.step_time) <= 1e-9 * max(ev.step_time, 1e-30)
             else f"; the timeline simulates the schedule: {blocks.makespan * 1e3:.3g} ms")
    return blocks, (f"{plan_title(doc)}\nstep {ev.step_time * 1e3:.3g} ms, bottleneck {ev.objective * 1e3:.3g} ms "
                    f"({STEP_DEFINITION}{drawn})")


def _stage_label(stage) -> str:
    """A whole-cluster stage in a few words: its mesh, compute and communication per microbatch, memory."""
    lay = stage.layout
    mesh = ("1 device" if lay.mesh.num_devices == 1
            else " x ".join(f"{a}={n}" for a, n in zip(lay.names, lay.mesh.axis_sizes, strict=True)))
    from planmap.units import format_bytes

    return (f"{mesh}\ncomp {stage.compute * 1e3:.3g} ms, comm {stage.communication * 1e3:.3g} ms\n"
            f"mem {format_bytes(stage.memory)} / {format_bytes(stage.capacity)}")


def stage_summary(problem: Problem, ev: Evaluation) -> list[str]:
    """The explain lines of a whole-cluster plan, stage by stage in pipeline order (submesh, sharding in
    words, compute vs communication, memory vs capacity): :func:`planmap.sharding.summary.stage_lines`."""
    from planmap.sharding.summary import stage_lines

    names = problem.topology.names
    lines: list[str] = []
    for pos, k in enumerate(ev.stage_order):
        st = ev.stages[k]
        lay = st.layout
        devices = compact_devices([names[d] for d in lay.mesh.devices.tolist()])
        lines += stage_lines(pos, devices, lay.mesh, lay.names, st)
    return lines


def draw(path: str | Path, doc: PlanDocument, problem: Problem, solution: Solution, ev: Evaluation) -> Path:
    """Write the three-panel PNG; return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    topo = problem.topology
    blocks, title = timeline(doc, problem, solution, ev)
    cmap = plt.get_cmap("tab20")
    fig, axes = plt.subplots(3, 1, figsize=(11, 3 + 0.35 * len(blocks.rows) + 4),
                             gridspec_kw={"height_ratios": [max(2, 0.35 * len(blocks.rows)), 2, 0.8]})
    ax = axes[0]
    for r, start, dur, label, colour, kind in blocks.boxes:
        ax.barh(r, dur * 1e3, left=start * 1e3, color=cmap(colour % 20), edgecolor="black", linewidth=0.4,
                hatch="//" if kind in ("b", "c") else None)
        if dur * 1e3 > blocks.makespan * 1e3 / 60:
            ax.text((start + dur / 2) * 1e3, r, label, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(blocks.rows)), blocks.rows, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title("\n".join(textwrap.fill(line, 120) for line in f"{doc.name}: {title}".split("\n")), fontsize=9)
    ax = axes[1]
    used = [d for d in range(topo.num_devices) if ev.memory[d] > 0]
    mem = np.array([ev.memory[d] for d in used]) / 2**30
    cap = np.array([ev.capacity[d] for d in used]) / 2**30
    ax.bar(range(len(used)), mem, color=[cmap(d % 20) for d in used])
    finite = np.isfinite(cap)
    ax.scatter(np.flatnonzero(finite), cap[finite], marker="_", s=400, color="red", label="usable capacity")
    if finite.any() and len(mem) and mem.max() > 0 and cap[finite].max() > 20 * mem.max():
        ax.set_yscale("log")  # a small model on big devices: keep both visible
    for i, (m_, c_) in enumerate(zip(mem, cap, strict=True)):
        if np.isfinite(c_) and c_ > 0:
            share = 100 * m_ / c_
            ax.annotate(f"{share:.1f}%" if share >= 1 else f"{share:.2g}%", (i, m_), ha="center", va="bottom",
                        fontsize=7)
    ax.set_xticks(range(len(used)), [topo.names[d] for d in used], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("GiB")
    ax.set_title("memory per device (share of usable capacity)", fontsize=9)
    if finite.any():
        ax.legend(fontsize=7)
    ax = axes[2]
    n_ops = problem.original.num_nodes
    strip = np.full(n_ops, -1.0)
    dev_of_stage = [st.device for st in solution.stages]
    g = problem.graph
    for i in range(g.num_nodes):
        strip[g.members_of(i)] = dev_of_stage[solution.assignment[i]]
    colours = np.array([cmap(int(d) % 20) if d >= 0 else (1, 1, 1, 1) for d in strip])
    ax.imshow(colours[None, :, :], aspect="auto", interpolation="nearest")
    ax.set_yticks([])
    ax.set_xlabel("artifact op id (coloured by device)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

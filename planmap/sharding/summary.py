"""What an SPMD plan does per mesh axis, in words: for ``planmap explain``.

Per axis: its role name and size, where its links run (inside a host or across hosts) with their
bandwidth and latency, and the seconds per microbatch its collectives take (a collective over several
axes is charged to each axis with that axis's term, as :meth:`LogicalMesh.collective` sums them). Then
compute vs communication and memory per device vs capacity, with the parts of the memory, and the
plan's ZeRO stage. A whole-cluster plan (several sharded stages) gets the same per stage (:func:`stage_lines`), with
its sharding in a phrase ("tp=4 inside a host, dp=2 over the network") and its transfers between stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.spmd import SpmdEvaluation
from planmap.units import format_bytes as _b
from planmap.units import format_duration as _t

__all__ = ["AxisSummary", "axis_summaries", "spmd_lines", "sharding_phrase", "stage_lines"]

_SCOPE = {"intra": "inside a host", "inter": "across hosts"}
_SHORT = {"data": "dp", "tensor": "tp", "fsdp": "fsdp"}
_OVER = {"intra": "inside a host", "inter": "over the network"}


@dataclass(frozen=True)
class AxisSummary:
    """One mesh axis: name, size, scope ("intra"/"inter"), link bandwidth (bytes/s) and latency (s),
    seconds per microbatch of its collectives and their count."""

    name: str
    size: int
    scope: str
    bandwidth: float
    latency: float
    comm: float
    collectives: int


def axis_summaries(mesh: LogicalMesh, names: tuple[str, ...], ev: SpmdEvaluation) -> tuple[AxisSummary, ...]:
    """Per mesh axis, its links and the time of the collectives over it (op collectives and reshards)."""
    comm, count = [0.0] * mesh.num_axes, [0] * mesh.num_axes
    for kind, axes, nbytes, n in ev.collectives:
        for a in axes:
            comm[a] += float(mesh.collective(kind, float(nbytes), (a,))) * n
            count[a] += n
    return tuple(AxisSummary(names[a], mesh.axis_sizes[a], mesh.scope[a],
                             1.0 / mesh.inv_bw[a] if mesh.inv_bw[a] > 0 else float("inf"), mesh.latency[a],
                             comm[a], count[a]) for a in range(mesh.num_axes))


_ZERO = {1: "optimizer state", 2: "optimizer state and gradients", 3: "optimizer state and gradients"}


def spmd_lines(mesh: LogicalMesh, names: tuple[str, ...], ev: SpmdEvaluation, *, zero: int = 0) -> list[str]:
    """The explain lines of an SPMD plan: one per axis, then time and memory (and the ZeRO stage)."""
    axes = axis_summaries(mesh, names, ev)
    lines = ["mesh: " + ", ".join(f"{s.name}={s.size} {_SCOPE.get(s.scope, s.scope)}" for s in axes)]
    for s in axes:
        lines.append(f"  {s.name}={s.size} {_SCOPE.get(s.scope, s.scope)} ({s.bandwidth / 1e9:.0f} GB/s, "
                     f"{_t(s.latency)} per hop): {s.collectives} collective(s), {_t(s.comm)} per microbatch")
    total = ev.microbatch_time
    share = (ev.comm + ev.reshard) / total if total > 0 else 0.0
    lines.append(f"time per microbatch {_t(total)}: compute {_t(ev.compute)}, communication "
                 f"{_t(ev.comm + ev.reshard)} ({share:.0%}; in ops {_t(ev.comm)}, resharding {_t(ev.reshard)})")
    parts = ", ".join(f"{k} {_b(v)}" for k, v in ev.memory_parts.items())
    lines.append(f"memory per device (the solver's linear terms) {_b(ev.memory)} of {_b(ev.capacity)} "
                 f"({ev.memory / ev.capacity:.0%}{'' if ev.feasible else ', DOES NOT FIT'}): {parts}")
    if zero > 0:
        lines.append(f"ZeRO-{zero}: {_ZERO[zero]} sharded over the data axes each parameter's spec does not use")
    return lines


def sharding_phrase(axes: Sequence[AxisSummary]) -> str:
    """The axes in practitioners' words, innermost first: "tp=4 inside a host (450 GB/s), dp=2 over the
    network (50 GB/s)" (``dp``/``tp``/``fsdp`` for the role names; size-1 axes left out)."""
    parts = [f"{_SHORT.get(a.name, a.name)}={a.size} {_OVER.get(a.scope, a.scope)} ({a.bandwidth / 1e9:.0f} GB/s)"
             for a in reversed(axes) if a.size > 1]
    return ", ".join(parts) or "not sharded"


def stage_lines(index: int, devices: str, mesh: LogicalMesh, names: tuple[str, ...], stage: Any) -> list[str]:
    """The explain lines of one stage of a whole-cluster plan (``stage``: a
    :class:`planmap.evaluate_stages.StageEvaluation`): submesh and sharding, time per microbatch split
    into compute and communication, memory per device against capacity."""
    ev: SpmdEvaluation = stage.spmd
    single = mesh.num_devices == 1
    axes = axis_summaries(mesh, names, ev)
    shape = "one device" if single else "mesh " + " x ".join(f"{a.name}={a.size}" for a in axes)
    lines = [f"stage {index} on {devices}: {shape}" + ("" if single else f"; {sharding_phrase(axes)}")]
    total, comm = stage.time, stage.communication
    share = comm / total if total > 0 else 0.0
    lines.append(f"  time per microbatch {_t(total)}: compute {_t(stage.compute)}, communication {_t(comm)} "
                 f"({share:.0%}; collectives {_t(ev.comm)}, resharding {_t(ev.reshard)}, between stages "
                 f"{_t(stage.recv + stage.send)})")
    parts = ", ".join(f"{k} {_b(v)}" for k, v in stage.memory_parts.items())
    fits = "" if stage.memory <= stage.capacity else ", DOES NOT FIT"
    lines.append(f"  memory per device (the solver's linear terms) {_b(stage.memory)} of {_b(stage.capacity)} "
                 f"({stage.memory / stage.capacity:.0%}{fits}): {parts} ({stage.in_flight} microbatch(es) in flight)")
    return lines

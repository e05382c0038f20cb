"""What an SPMD plan does per mesh axis, in words: for ``planmap explain``.

Per axis: its role name and size, where its links run (inside a host or across hosts) with their
bandwidth and latency, and the seconds per microbatch its collectives take (a collective over several
axes is charged to each axis with that axis's term, as :meth:`LogicalMesh.collective` sums them). Then
compute vs communication and memory per device vs capacity, with the parts of the memory, and the
plan's ZeRO stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.spmd import SpmdEvaluation
from planmap.units import format_bytes as _b
from planmap.units import format_duration as _t

__all__ = ["AxisSummary", "axis_summaries", "spmd_lines"]

_SCOPE = {"intra": "inside a host", "inter": "across hosts"}


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
    lines.append(f"memory per device {_b(ev.memory)} of {_b(ev.capacity)} "
                 f"({ev.memory / ev.capacity:.0%}{'' if ev.feasible else ', DOES NOT FIT'}): {parts}")
    if zero > 0:
        lines.append(f"ZeRO-{zero}: {_ZERO[zero]} sharded over the data axes each parameter's spec does not use")
    return lines

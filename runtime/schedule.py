"""The order in which (microbatch, segment) calls are dispatched: GPipe, 1F1B, or one after another.

JAX dispatches asynchronously and each device runs its work in dispatch order, so a pipeline
schedule *is* a dispatch order. It is derived by simulating the pipeline with unit-time calls:
every call occupies all devices of its stage, starts when its inputs are done and its devices are
free, and among the calls ready on a device the schedule's rule picks one:

* ``gpipe``: earliest segment first (all microbatches through the forward, then the backward);
* ``1f1b``: latest segment first (a microbatch's backward before another forward), with at most
  ``S - s`` microbatches in flight on the stage at pipeline position ``s`` of ``S`` — the warm-up
  that bounds the activations each stage keeps;
* ``none``: microbatches one after another (gradient accumulation without a pipeline).

Dispatching in simulated start order gives every device the schedule's sequence of calls.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["dispatch_order"]


def dispatch_order(kind: str, microbatches: int, seg_stage: Sequence[int], seg_deps: Sequence[Sequence[int]],
                   stage_devices: Sequence[frozenset]) -> list[tuple[int, int]]:
    """(microbatch, segment) pairs in dispatch order.

    ``seg_stage[g]``: stage of segment g (segments are given in a valid execution order);
    ``seg_deps[g]``: segments whose outputs g uses (same microbatch); ``stage_devices[s]``: device ids.
    """
    n = len(seg_stage)
    if kind == "none" or microbatches == 1 or n == 1:
        return [(m, g) for m in range(microbatches) for g in range(n)]
    if kind not in ("gpipe", "1f1b"):
        raise ValueError(f"schedule kind requires gpipe, 1f1b or none, but got {kind!r}")
    stages_in_order: list[int] = []
    for s in seg_stage:
        if s not in stages_in_order:
            stages_in_order.append(s)
    position = {s: i for i, s in enumerate(stages_in_order)}
    n_stages = len(stages_in_order)
    first_seg = {s: min(g for g in range(n) if seg_stage[g] == s) for s in stages_in_order}
    last_seg = {s: max(g for g in range(n) if seg_stage[g] == s) for s in stages_in_order}
    done: dict[tuple[int, int], int] = {}  # (m, g) -> finish time
    busy_until: dict[object, int] = {}
    in_flight = {s: 0 for s in stages_in_order}
    finishing: dict[int, list[int]] = {}  # time -> stages whose microbatch finishes then
    pending = {(m, g) for m in range(microbatches) for g in range(n)}
    order: list[tuple[int, int]] = []
    t = 0
    while pending:
        for s in finishing.pop(t, []):
            in_flight[s] -= 1
        ready = [(m, g) for (m, g) in pending if all(done.get((m, d), t + 1) <= t for d in seg_deps[g])]
        ready.sort(key=(lambda mg: (mg[1], mg[0])) if kind == "gpipe" else (lambda mg: (-mg[1], mg[0])))
        started = _start(ready, t, kind, seg_stage, stage_devices, first_seg, in_flight, n_stages, position,
                         busy_until, limit=True)
        if not started and all(b <= t for b in busy_until.values()):
            started = _start(ready, t, kind, seg_stage, stage_devices, first_seg, in_flight, n_stages, position,
                             busy_until, limit=False)  # never deadlock on the warm-up limit
        for m, g in sorted(started, key=lambda mg: (mg[1], mg[0])):
            pending.discard((m, g))
            done[(m, g)] = t + 1
            order.append((m, g))
            if g == last_seg[seg_stage[g]]:
                finishing.setdefault(t + 1, []).append(seg_stage[g])
        t += 1
    return order


def _start(ready, t, kind, seg_stage, stage_devices, first_seg, in_flight, n_stages, position, busy_until,
           *, limit: bool) -> list[tuple[int, int]]:
    """Start the ready calls whose devices are free at ``t`` (and, with ``limit``, within the warm-up)."""
    started = []
    for m, g in ready:
        s = seg_stage[g]
        devs = stage_devices[s]
        if any(busy_until.get(d, 0) > t for d in devs):
            continue
        if limit and kind == "1f1b" and g == first_seg[s] and in_flight[s] >= n_stages - position[s]:
            continue
        if g == first_seg[s]:
            in_flight[s] += 1
        for d in devs:
            busy_until[d] = t + 1
        started.append((m, g))
    return started

"""A latency bound from device contention: the accelerators run their calls one after another.

The sweeps of :mod:`.cuts` follow one path at a time, so they never see that independent branches
compete for the same few accelerators. This bound does: a call computes its nodes one after another
and a device runs its calls one after another, so an accelerator computes at most one node at a
time. For any set ``S`` of nodes that must run on accelerators (no CPU is left to them), the
classic parallel-machine bound with heads and tails holds: on the device that computes the largest
share of ``S``'s work, that share (at least ``W(S) / k`` for ``k`` accelerators, each node at its
least accelerator time) starts no earlier than the least head of ``S`` and is followed by at least
the least tail of ``S``:

    latency >= min_{v in S} r(v) + W(S) / k + min_{v in S} q(v).

The head ``r(v)`` is the earliest a node's compute can start on an accelerator (its chain point from
:func:`.cuts.time_bounds` less its own compute: a call receives every value before it computes, and
computes the node's ancestors in the call before it), the tail ``q(v)`` what must follow its compute
(:attr:`TimeBounds.tail`); both are minima over the node's accelerators. CPUs run nodes in parallel
along independent paths, so nodes that may run on a CPU are left out of ``S``. The best ``S`` for a
given least head ``a`` and least tail ``b`` is every node with ``r >= a`` and ``q >= b``, so
:func:`contention_bound` tries every pair of thresholds.

Where it pays: wide graphs whose branches are heavy and whose CPUs are too slow to take any of them
(presolve and probing remove the CPU from such nodes: :func:`.cuts.probe_lower_bound` uses this bound
to refute a latency too). On the layer graphs of the latency bench it does not move the bound (their
gaps come from transfers and memory along paths; figures in ``docs/notes/latency-bounds.md``).
Tests check it against every feasible placement of small graphs.
"""

from __future__ import annotations

import numpy as np

from .cuts import TimeBounds

__all__ = ["contention_bound"]


def contention_bound(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, bounds: TimeBounds) -> float:
    """The bound of the module docstring, model time units (0 when no node is bound to the accelerators).

    ``t`` (n, D) compute, ``allowed`` (n, D) where each node may still run, ``bounds`` computed for
    ``allowed`` (or for a superset of it: fewer options only raise the true times)."""
    cpu = np.asarray(is_cpu, bool)
    acc = ~cpu
    k = int(acc.sum())
    if k == 0 or not len(t):
        return 0.0
    on_acc = allowed[:, acc]
    must = ~allowed[:, cpu].any(axis=1) & on_acc.any(axis=1)
    if not must.any():
        return 0.0
    ta = np.where(on_acc, t[:, acc], np.inf)[must]
    work = ta.min(axis=1)
    head = np.where(on_acc[must], bounds.ef[must][:, acc] - np.where(on_acc[must], ta, 0.0), np.inf).min(axis=1)
    tail = np.where(on_acc[must], bounds.tail[must][:, acc], np.inf).min(axis=1)
    ok = np.isfinite(work) & np.isfinite(head) & np.isfinite(tail)
    work, head, tail = work[ok], np.maximum(head[ok], 0.0), np.maximum(tail[ok], 0.0)
    best = 0.0
    for a in np.unique(head):
        sel = head >= a
        order = np.argsort(-tail[sel], kind="stable")
        b = tail[sel][order]  # least tail so far, as nodes join in order of decreasing tail
        w = np.cumsum(work[sel][order])
        best = max(best, float((a + b + w / k).max()))
    return best

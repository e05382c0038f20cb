"""What a call must also hold when a producer and its consumer share it: every node between them.

A call is convex: when ``p`` and ``w`` run in one call, so does every node on a path from ``p`` to ``w``
(the interval ``desc(p) & anc(w)``). The sweeps of :mod:`.cuts` follow one path, so a path over a skip
edge (a residual block's identity shortcut ``p -> w``) counted neither the compute nor the memory of the
block's main branch between ``p`` and ``w``, although the call holds and runs it. With the interval in
the same-call options (the forward chain through ``p`` into ``w``, the backward tail from ``p`` through
``w``) the bound stays valid, because the interval's nodes are descendants of ``p`` and ancestors of
``w`` (disjoint from what the chain of ``p`` and the tail of ``w`` already count), and a call computes
its nodes one after another and holds all of them.

On ResNet-50 layers (1 CPU, 4 accelerators, q = 2, 70% full) a chain could hop from block output to
block output over the identity shortcuts, each call holding only the join nodes: the sweep then cut
the network inside a block, between two layers with small activations, and paid neither the block
input's transfer (which the shortcut still carries) nor the memory that makes such a call too big.
Figures in ``docs/notes/latency-bounds.md``; tests/solvers/latency/test_intervals.py checks the bounds
against every feasible placement of small graphs with skip edges.
"""

from __future__ import annotations

import numpy as np

__all__ = ["interval_terms"]


def _members(bits: int, n: int) -> np.ndarray:
    """The indices of the set bits of ``bits`` (nodes ``0..n-1``)."""
    raw = np.frombuffer(bits.to_bytes((n + 7) // 8, "little"), np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")[:n])


def interval_terms(prod: np.ndarray, cons: np.ndarray, anc: list[int], desc: list[int], t: np.ndarray,
                   size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per use ``(prod[i], cons[i])``: the compute (``(P, D)``, ``t`` summed, ``inf`` where some node of the
    interval cannot run) and the memory (``(P, D)``, ``size`` units summed) of the nodes strictly between
    the producer and the consumer, which any call holding both holds too (0 for a use with no such node)."""
    n, D = t.shape
    P = len(prod)
    work = np.zeros((P, D))
    mem = np.zeros((P, D), np.int64)
    seen: dict[tuple[int, int], int] = {}
    for i, (a, b) in enumerate(zip(prod.tolist(), cons.tolist(), strict=True)):
        if (a, b) in seen:
            work[i], mem[i] = work[seen[a, b]], mem[seen[a, b]]
            continue
        seen[a, b] = i
        between = desc[a] & anc[b]
        if between:
            nodes = _members(between, n)
            work[i] = t[nodes].sum(axis=0)
            mem[i] = size[nodes].sum(axis=0)
    return work, mem

"""Ideals (downsets) of a small DAG as packed bitsets, and bit queries on many of them at once.

A contiguous pipeline is a chain of ideals ``∅ = I_0 ⊂ I_1 ⊂ ... ⊂ I_s = all``: stage ``j`` is
``I_j \\ I_{j-1}``, convex by construction, and the chain is the pipeline order. The DP of
Tarnawski et al. enumerates every ideal; here ideals are generated level by level (an ideal of
``s + 1`` units is an ideal of ``s`` units plus one unit whose predecessors it holds), vectorised
over a whole level, and stored as ``(N, W)`` ``uint64`` rows (bit ``u % 64`` of word ``u // 64``).
"""

from __future__ import annotations

import numpy as np

from planmap.errors import PlanmapError

__all__ = ["enumerate_ideals", "unpack", "member", "TooManyIdeals"]


class TooManyIdeals(PlanmapError):
    """The graph has more ideals than the configured limit (the DP would not be tractable)."""

    code = "too-many-ideals"


def words(num_units: int) -> int:
    return max(1, (num_units + 63) // 64)


def unpack(bits: np.ndarray, num_units: int) -> np.ndarray:
    """(k, W) uint64 -> (k, num_units) bool membership."""
    as_bytes = np.ascontiguousarray(bits).view(np.uint8).reshape(len(bits), -1)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :num_units].astype(bool)


def pack(member_rows: np.ndarray) -> np.ndarray:
    """(k, U) bool -> (k, W) uint64 (inverse of :func:`unpack`)."""
    k, u = member_rows.shape
    w = words(u)
    padded = np.zeros((k, w * 64), bool)
    padded[:, :u] = member_rows
    return np.packbits(padded, axis=1, bitorder="little").view(np.uint64).reshape(k, w)


def member(bits: np.ndarray, rows: np.ndarray, units: np.ndarray) -> np.ndarray:
    """(len(rows), len(units)) bool: is unit ``units[j]`` in ideal ``rows[i]``."""
    units = np.asarray(units, np.int64)
    w = bits[np.asarray(rows)[:, None], (units >> 6)[None, :]]
    return ((w >> (units & 63).astype(np.uint64)[None, :]) & np.uint64(1)).astype(bool)


def predecessor_segments(num_units: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges grouped by head for ``reduceat``: the tails in head order, where each head's run starts,
    and the heads (each unit with a predecessor once, ascending)."""
    edges = np.asarray(edges, np.int64).reshape(-1, 2)
    order = np.argsort(edges[:, 1], kind="stable")
    heads = edges[order, 1]
    targets, first = np.unique(heads, return_index=True)
    return edges[order, 0], first, targets


def enumerate_ideals(num_units: int, edges: np.ndarray, limit: int) -> np.ndarray:
    """Every ideal of the DAG on ``num_units`` units with ``edges`` (a, b) = a before b, as packed rows
    sorted by size, then lexicographically. Raises :class:`TooManyIdeals` beyond ``limit``."""
    U = num_units
    W = words(U)
    pred_of, first, targets = predecessor_segments(U, edges)
    level = np.zeros((1, W), np.uint64)
    out = [level]
    total = 1
    one = np.uint64(1)
    for _ in range(U):
        m = unpack(level, U)
        blocked = np.zeros_like(m)  # a predecessor not yet in the ideal
        if len(pred_of):
            blocked[:, targets] = np.logical_or.reduceat(~m[:, pred_of], first, axis=1)
        rows, units = np.nonzero(~m & ~blocked)
        if not len(rows):
            break
        nxt = level[rows].copy()
        nxt[np.arange(len(rows)), units >> 6] |= one << (units & 63).astype(np.uint64)
        packed = np.ascontiguousarray(nxt).view(np.dtype((np.void, 8 * W))).ravel()
        nxt = np.unique(packed).view(np.uint64).reshape(-1, W)
        total += len(nxt)
        if total > limit:
            raise TooManyIdeals(
                f"the contiguity graph ({U} units after contracting colocation classes) has more than {limit:,} "
                "ideals, too many for the exact DP; coarsen the model further (constraints.coarsening), raise "
                "solver option max_ideals, or use solver 'ip' / 'local-search'")
        out.append(nxt)
        level = nxt
    return np.concatenate(out, axis=0)

"""Finding repeated layers from structure alone, for artifacts without usable name stacks.

A stack of identical layers shows up, in topological order, as a *tandem repeat*: a block of node
signatures (op kinds and shapes) that occurs several times back to back. :func:`tandem_blocks` finds
the repeat covering the most nodes — anchored on a signature that occurs once per block at a constant
stride — and then looks for further repeats in what is left (a training step has a forward and a
backward stack). Blocks are intervals of a topological order, hence convex: contracting each keeps
the graph a DAG. A block boundary may not coincide with the author's layer boundary (it starts at
the anchor), which does not matter for planning: blocks are equal, and consecutive.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

__all__ = ["tandem_blocks"]


def _best_repeat(sig: Sequence[int], free: list[bool], min_block: int) -> tuple[int, int, int] | None:
    """``(start, length, count)`` of the tandem repeat with the largest coverage among free positions."""
    occ: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sig):
        if free[i]:
            occ[s].append(i)
    best: tuple[int, int, int] | None = None
    best_cov = 0
    n = len(sig)
    for positions in occ.values():
        if len(positions) < 2:
            continue
        j = 0
        while j < len(positions) - 1:
            d = positions[j + 1] - positions[j]
            k = j + 1
            while k + 1 < len(positions) and positions[k + 1] - positions[k] == d:
                k += 1
            if d >= min_block:
                start = positions[j]
                ref = tuple(sig[start:start + d])
                count = 1
                while (count < k - j + 1 and start + (count + 1) * d <= n
                       and all(free[start + count * d: start + (count + 1) * d])
                       and tuple(sig[start + count * d: start + (count + 1) * d]) == ref):
                    count += 1
                if count >= 2 and all(free[start:start + d]) and count * d > best_cov:
                    best, best_cov = (start, d, count), count * d
            j = k
    return best


def tandem_blocks(sig: Sequence[int], *, min_block: int = 2, max_repeats: int = 4) -> list[list[tuple[int, int]]]:
    """Up to ``max_repeats`` tandem repeats, each a list of ``(start, end)`` half-open blocks."""
    free = [True] * len(sig)
    found: list[list[tuple[int, int]]] = []
    for _ in range(max_repeats):
        rep = _best_repeat(sig, free, min_block)
        if rep is None:
            break
        start, d, count = rep
        blocks = [(start + t * d, start + (t + 1) * d) for t in range(count)]
        for a, b in blocks:
            for i in range(a, b):
                free[i] = False
        found.append(blocks)
    found.sort(key=lambda blocks: blocks[0][0])
    return found

"""How a stage is cut into the programs that run it (segments): one rule for the runtime and the cost model.

A stage runs as one compiled program when it is *convex*: no path leaves the stage and comes back
into it. A training stage that holds a layer's forward and backward ops is not (its backward half
waits for the later stages' backward), so it is cut into its maximal runs of consecutive op ids; op
ids are a topological order, so runs ordered by their first op always form a valid execution order.
:mod:`planmap.runtime.segments` compiles these programs and :mod:`planmap.program_memory` predicts
their memory, both from :func:`stage_programs` over the ops' predecessor lists.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Preds", "pred_csr", "convex", "runs", "stage_programs"]

# CSR of each op's producer ops: ``(indptr, ids)``, the producers of op i are ids[indptr[i]:indptr[i + 1]].
Preds = tuple[np.ndarray, np.ndarray]


def pred_csr(producers: Sequence[Sequence[int]]) -> Preds:
    """:data:`Preds` from one sequence of producer op ids per op."""
    indptr = np.zeros(len(producers) + 1, np.int64)
    indptr[1:] = np.cumsum([len(p) for p in producers])
    ids = np.fromiter((int(p) for ps in producers for p in ps), np.int64, int(indptr[-1]))
    return indptr, ids


def convex(preds: Preds, group: np.ndarray, k: int) -> bool:
    """No path from the ops of ``group == k`` through other groups' ops back into ``k``."""
    indptr, ids = preds
    mine = np.flatnonzero(group == k)
    if len(mine) == 0:
        return True
    left = np.zeros(len(group), bool)  # an op outside k reachable from k
    for i in range(int(mine[0]), len(group)):
        p = ids[indptr[i]: indptr[i + 1]]
        if group[i] == k:
            if left[p].any():
                return False
        else:
            left[i] = bool((group[p] == k).any() or left[p].any())
    return True


def runs(ops: np.ndarray) -> list[np.ndarray]:
    """The maximal runs of consecutive ids of the ascending ``ops``."""
    return np.split(ops, np.flatnonzero(np.diff(ops) != 1) + 1) if len(ops) else []


def stage_programs(preds: Preds, group: np.ndarray, k: int) -> list[np.ndarray]:
    """Op ids (ascending) of each program of group ``k``: all of them when the group is :func:`convex`,
    else each of its :func:`runs`."""
    group = np.asarray(group)
    ops = np.flatnonzero(group == k)
    return [ops] if len(ops) and convex(preds, group, k) else runs(ops)

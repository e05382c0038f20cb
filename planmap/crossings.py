"""The charging rule: which (value, consumer group) pairs cross a partition of the graph.

Every cost of a placement that involves communication rests on one rule. Nodes are grouped (stages,
devices, pipeline blocks, positions in an order, or single nodes); a value produced in one group and
read in another is sent once per *receiving group*, however many nodes of that group read it, and
never for a reader in the producer's own group. Arguments (values no node produces) are never
charged: they are where the data starts. The judge (:func:`planmap.evaluate.evaluate`) and every
solver that predicts its charges use :func:`crossings`, so they cannot disagree about what crosses.

:func:`spans` is the same rule for every prefix cut of one node order at once (the splits and the
greedy pipeline try all cut positions): a value crosses the cut before position ``i`` exactly when
its producer and some reader lie on different sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planmap.graph import OpGraph

__all__ = ["Crossings", "Spans", "crossings", "spans"]


@dataclass(frozen=True, eq=False)
class Crossings:
    """The distinct crossing (value, consumer group) pairs, sorted by value, then consumer group.

    ``value``, ``producer`` (node), ``producer_group`` and ``consumer_group`` are ``(P,)`` int64
    columns, one row per pair. Transfers are charged per row: the receiver once per row, the sender
    once per distinct (value, producer group) — see :attr:`values` and :attr:`starts`.
    """

    value: np.ndarray
    producer: np.ndarray
    producer_group: np.ndarray
    consumer_group: np.ndarray

    def __len__(self) -> int:
        return len(self.value)

    @property
    def pairs(self) -> np.ndarray:
        """(P, 2) rows of (value, consumer group)."""
        return np.stack([self.value, self.consumer_group], 1)

    @cached_property
    def _distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not len(self.value):
            e = np.zeros(0, np.int64)
            return e, e, e
        vals, starts, inverse = np.unique(self.value, return_index=True, return_inverse=True)
        return vals, starts.astype(np.int64), inverse.ravel().astype(np.int64)

    @property
    def values(self) -> np.ndarray:
        """The distinct crossing values, ascending (each is sent once by its producer's group)."""
        return self._distinct[0]

    @property
    def starts(self) -> np.ndarray:
        """Where each of :attr:`values` starts among the rows (rows of one value are consecutive)."""
        return self._distinct[1]

    @property
    def value_index(self) -> np.ndarray:
        """(P,) the position of each row's value in :attr:`values`."""
        return self._distinct[2]

    def inputs_of(self, num_groups: int) -> list[list[int]]:
        """Per consumer group, the values it receives, ascending."""
        out: list[list[int]] = [[] for _ in range(num_groups)]
        for v, c in zip(self.value.tolist(), self.consumer_group.tolist(), strict=True):
            out[c].append(v)
        return out


def crossings(graph: OpGraph, group_of: np.ndarray) -> Crossings:
    """The (value, consumer group) pairs of ``graph`` whose consumer group differs from the producer's.

    ``group_of`` (n,) is each node's group (any non-negative integers). With ``np.arange(n)`` every
    (value, reading node) pair is returned: a node never reads its own result.
    """
    group_of = np.asarray(group_of, np.int64)
    keep = graph.edge_src >= 0
    val, dst = graph.edge_value[keep].astype(np.int64), graph.edge_dst[keep].astype(np.int64)
    pg, cg = group_of[graph.value_node[val]], group_of[dst]
    cross = pg != cg
    if not cross.any():
        e = np.zeros(0, np.int64)
        return Crossings(e, e, e, e)
    key = np.unique(np.stack([val[cross], cg[cross]], 1), axis=0)
    value, consumer = key[:, 0], key[:, 1]
    producer = graph.value_node[value].astype(np.int64)
    return Crossings(value, producer, group_of[producer], consumer)


@dataclass(frozen=True, eq=False)
class Spans:
    """Values that cross some prefix cut of an order: value ``values[j]`` crosses the cut before
    position ``i`` iff ``low[j] < i <= high[j]``; ``forward[j]``: its producer is at ``low[j]`` (data
    flows to later positions), else a reader precedes the producer."""

    values: np.ndarray
    low: np.ndarray
    high: np.ndarray
    forward: np.ndarray


def spans(graph: OpGraph, position: np.ndarray) -> Spans:
    """:func:`crossings` for every prefix cut of the order ``position`` (n,) at once."""
    c = crossings(graph, position)
    low = np.full(graph.num_values, np.iinfo(np.int64).max)
    high = np.full(graph.num_values, -1)
    np.minimum.at(low, c.value, np.minimum(c.producer_group, c.consumer_group))
    np.maximum.at(high, c.value, np.maximum(c.producer_group, c.consumer_group))
    vals = c.values
    produced_at = c.producer_group[c.starts]
    return Spans(vals, low[vals], high[vals], produced_at == low[vals])

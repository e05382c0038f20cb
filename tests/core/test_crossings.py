"""The charging rule by hand on a small graph: an argument read twice, a value read twice in one
group, a value read in its producer's own group, and every prefix cut of two orders."""

from __future__ import annotations

import numpy as np

from planmap.crossings import crossings, spans
from planmap.graph import OpGraph

# values: v0 an argument; v1, v2, v3 the results of nodes 0, 1, 2 (node 3 and 4 results unread)
VALUE_NODE = [-1, 0, 1, 2, 3, 4]
EDGES = [(0, 0), (0, 3), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (3, 4)]  # (value, reading node)


def graph() -> OpGraph:
    n, e = 5, np.array(EDGES)
    return OpGraph(name="hand", kind=("op",) * n, op_name=tuple(f"n{i}" for i in range(n)), flops=np.zeros(n),
                   bytes_accessed=np.zeros(n), out_bytes=np.zeros(n, np.int64), state_bytes=np.zeros(n, np.int64),
                   dtype=("f32",) * n, value_node=np.array(VALUE_NODE), value_index=np.zeros(len(VALUE_NODE)),
                   value_bytes=np.zeros(len(VALUE_NODE), np.int64), value_time=np.zeros(len(VALUE_NODE)),
                   edge_value=e[:, 0], edge_dst=e[:, 1], measured={})


def test_pairs_by_hand():
    c = crossings(graph(), np.array([0, 1, 1, 2, 0]))
    # v0 is an argument: never charged. v1 (group 0) is read by nodes 1 and 2 (both group 1): one pair,
    # and by node 3 (group 2). v2 (group 1) is read by node 2 in its own group: no pair; by node 3 (group 2).
    assert c.value.tolist() == [1, 1, 2, 3]
    assert c.consumer_group.tolist() == [1, 2, 2, 0]
    assert c.producer_group.tolist() == [0, 0, 1, 1]
    assert c.producer.tolist() == [0, 0, 1, 2]
    assert c.pairs.tolist() == [[1, 1], [1, 2], [2, 2], [3, 0]]
    assert c.values.tolist() == [1, 2, 3] and c.starts.tolist() == [0, 2, 3]
    assert c.value_index.tolist() == [0, 0, 1, 2]
    assert c.inputs_of(3) == [[3], [1], [1, 2]]


def test_one_group_and_single_nodes():
    g = graph()
    none = crossings(g, np.zeros(5, np.int64))
    assert len(none) == 0 and none.values.tolist() == [] and none.value_index.tolist() == []
    each = crossings(g, np.arange(5))  # every (value, reading node) pair but the argument's
    assert each.pairs.tolist() == [[1, 1], [1, 2], [1, 3], [2, 2], [2, 3], [3, 4]]
    assert each.inputs_of(5) == [[], [1], [1, 2], [1, 2], [3]]


def test_spans_of_every_prefix_cut():
    g = graph()
    s = spans(g, np.arange(5))
    assert s.values.tolist() == [1, 2, 3]
    assert s.low.tolist() == [0, 1, 2] and s.high.tolist() == [3, 3, 4] and s.forward.tolist() == [True] * 3
    # node 1 at position 2, node 2 at position 1: v2 is read by node 2 before it is produced
    s = spans(g, np.array([0, 2, 1, 3, 4]))
    assert s.low.tolist() == [0, 1, 1] and s.high.tolist() == [3, 3, 4]
    assert s.forward.tolist() == [True, False, True]
    # the cut before position i is crossed by exactly the values crossings() finds for the split at i
    for order in (np.arange(5), np.array([0, 2, 1, 3, 4])):
        s = spans(g, order)
        for i in range(1, 5):
            side = (order >= i).astype(np.int64)
            assert set(crossings(g, side).values.tolist()) == set(s.values[(s.low < i) & (i <= s.high)].tolist())

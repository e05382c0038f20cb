"""The shared topological order (planmap.graph.topological_order) used by evaluate, the solvers and
the runtime: smallest tie-break first, independent of edge order, None on a cycle."""

import numpy as np

from planmap.graph import topological_order


def test_smallest_ready_item_first_whatever_the_edge_order():
    pairs = [(3, 1), (0, 2), (3, 2), (0, 2)]  # a repeated edge counts once per occurrence both ways
    assert topological_order(4, pairs) == [0, 3, 1, 2]
    assert topological_order(4, pairs[::-1]) == [0, 3, 1, 2]
    assert topological_order(4, np.array(pairs)) == [0, 3, 1, 2]


def test_tiebreak_orders_the_ready_items():
    assert topological_order(3, [], tiebreak=[5, 1, 3]) == [1, 2, 0]
    assert topological_order(3, [(0, 1)], tiebreak=[5, 1, 3]) == [2, 0, 1]


def test_a_cycle_has_no_order():
    assert topological_order(3, [(0, 1), (1, 2), (2, 1)]) is None

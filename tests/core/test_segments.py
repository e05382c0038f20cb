"""How a stage is cut into programs (:mod:`planmap.segments`), the rule the runtime and the cost model share."""

from __future__ import annotations

import numpy as np

from planmap.segments import convex, pred_csr, runs, stage_programs


def test_a_stage_a_path_leaves_and_reenters_runs_as_its_runs_of_consecutive_ops():
    # 0 -> 1 -> 2 -> 3, and 4 reads 0: stage 0 holds {0, 3, 4}, stage 1 holds {1, 2}
    preds = pred_csr([[], [0], [1], [2], [0]])
    group = np.array([0, 1, 1, 0, 0])
    assert not convex(preds, group, 0)
    assert [r.tolist() for r in stage_programs(preds, group, 0)] == [[0], [3, 4]]
    assert [r.tolist() for r in stage_programs(preds, group, 1)] == [[1, 2]]


def test_a_convex_stage_is_one_program_even_when_its_ops_are_not_consecutive():
    # two independent chains 0 -> 2 and 1 -> 3: stage 0 = {0, 2} is convex
    preds = pred_csr([[], [], [0], [1]])
    group = np.array([0, 1, 0, 1])
    assert [r.tolist() for r in stage_programs(preds, group, 0)] == [[0, 2]]
    assert stage_programs(preds, group, 2) == []
    assert [r.tolist() for r in runs(np.array([1, 2, 5]))] == [[1, 2], [5]]

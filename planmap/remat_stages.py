"""Activation checkpointing as a per-stage decision (``constraints.remat: auto``).

A stage that checkpoints runs its layers' forward again in its backward pass (its layer-forward nodes
cost twice) and stashes per microbatch only the values that leave a layer's forward; the others keep
everything their backward reads (:attr:`planmap.cost.CostModel.stash_bytes`: a value follows its
producer's choice). So, for a fixed split, a stage's memory depends only on its own choice, and its
time only grows with checkpointing: the best choice per stage is "no recomputation where the stage fits
without it, else recomputation". The throughput DP applies that rule inside its stage cost (exact over
splits x per-stage choices); :func:`planmap.remat_choice.relax` applies it to the final split of any
other solver.

A :class:`~planmap.problem.Stage` states its choice in ``remat`` (None: the problem's cost model's, the
spec's ``remat: true|false``); :func:`for_solution` gives the problem whose cost model charges a
solution's choices, which :func:`planmap.evaluate.evaluate` and the plan writer use, so a mixed plan's
numbers are exact.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planmap.problem import Problem, Solution
from planmap.remat import layer_forward

__all__ = ["node_mask", "for_solution", "stage_choices", "PER_STAGE"]

PER_STAGE = "per-stage"  # the certificate option ``remat`` of a plan whose stages chose (``remat: auto``)


def node_mask(problem: Problem, solution: Solution) -> np.ndarray:
    """(n,) bool: the nodes whose stage recomputes — a stage's own ``remat`` where it states one, else the
    problem's cost model's."""
    mask = problem.cost.remat_nodes.copy()
    if solution.shardings is not None:  # sharded stages: the plan states no recomputation (SPMD ignores it)
        return mask
    assignment = np.asarray(solution.assignment)
    for k, st in enumerate(solution.stages):
        if st.remat is not None:
            mask[assignment == k] = st.remat
    return mask


def for_solution(problem: Problem, solution: Solution) -> Problem:
    """``problem`` with the cost model of ``solution``'s per-stage choices (itself when no stage states one)."""
    if (all(st.remat is None for st in solution.stages) or solution.shardings is not None
            or len(solution.assignment) != problem.graph.num_nodes):
        return problem
    cost = problem.cost.with_remat(node_mask(problem, solution))
    return problem if cost is problem.cost else replace(problem, cost=cost)


def stage_choices(problem: Problem, solution: Solution) -> list[bool]:
    """Per stage: whether it recomputes anything (it checkpoints and has layer-forward nodes)."""
    again = node_mask(problem, solution) & layer_forward(problem.graph)
    assignment = np.asarray(solution.assignment)
    return [bool(again[assignment == k].any()) for k in range(solution.num_stages)]

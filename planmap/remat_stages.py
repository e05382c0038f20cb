"""Activation checkpointing as a per-stage decision (``constraints.remat: auto``).

A stage that checkpoints runs its layers' forward again in its backward pass (its layer-forward nodes
cost twice) and stashes per microbatch only the values that leave a layer's forward; the others keep
everything their backward reads (:attr:`planmap.cost.CostModel.stash_bytes`: a value follows its
producer's choice). So, for a fixed split, a stage's memory depends only on its own choice, and its
time only grows with checkpointing: the best choice per stage is "no recomputation where the stage fits
without it, else recomputation". The throughput DP applies that rule inside its stage cost (exact over
splits x per-stage choices); :func:`relax` applies it to the final split of any other solver.

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

__all__ = ["node_mask", "for_solution", "stage_choices", "relax", "PER_STAGE"]

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


def relax(problem: Problem, solution: Solution) -> Solution:
    """``solution`` with each stage's choice explicit and checkpointing turned off on every stage that fits
    its devices' memory without it (never slower; for this split, the best choice per stage)."""
    from planmap.evaluate import evaluate

    if solution.shardings is not None:  # sharded stages: no per-stage choice to make (see node_mask)
        return solution
    chosen = stage_choices(problem, solution)
    sol = replace(solution, stages=tuple(replace(st, remat=c) for st, c in zip(solution.stages, chosen, strict=True)))
    cap = problem.capacity
    for k in np.flatnonzero(chosen).tolist():
        stages = list(sol.stages)
        stages[k] = replace(stages[k], remat=False)
        trial = replace(sol, stages=tuple(stages))
        mem = evaluate(problem, trial).memory
        devs = list(sol.stages[k].devices)
        if (mem[devs] <= cap[devs] * (1 + 1e-12)).all():
            sol = trial
    return sol


def solve_choosing(problem: Problem, solver: str, options, run):
    """Solve a problem whose stages choose activation checkpointing (``remat: auto``) with ``run`` (the
    driver's one-problem solve). A solver that chooses per stage itself (its certificate's ``remat`` option is
    ``per-stage``: the throughput DP) answers alone. Otherwise the problem is solved with no stage and with
    every stage recomputing, the latter also after :func:`relax`, and the best of these under the evaluator
    wins: fitting memory first, then the objective, then fewer recomputing stages."""
    from planmap.errors import InfeasibleError

    answers = []
    try:
        res = run(problem, solver, options)
    except InfeasibleError:
        pass  # without recomputation nothing fits: the forced solve below may
    else:
        if res.solution.certificate.options.get("remat") == PER_STAGE:
            return res
        answers.append(_stated(res, problem, res.solution, "no stage recomputes (the solver does not choose "
                                                             "activation checkpointing per stage)"))
    forced = replace(problem, cost=problem.cost.with_remat(True), remat_choice=False)
    try:
        res = run(forced, solver, options)
    except InfeasibleError:
        if not answers:
            raise
    else:
        every = replace(res.solution, stages=tuple(replace(st, remat=c) for st, c in
                                                   zip(res.solution.stages, stage_choices(forced, res.solution),
                                                       strict=True)))
        answers.append(_stated(res, problem, every, "solved with every stage recomputing"))
        relaxed = relax(res.problem, res.solution)
        off = sum(a.remat and not b.remat for a, b in zip(every.stages, relaxed.stages, strict=True))
        if off:
            answers.append(_stated(res, problem, relaxed, f"solved with every stage recomputing, then recomputation "
                                                          f"turned off on {off} stage(s) that fit without it",
                                   proof=False))
    return min(answers, key=lambda a: (not a.evaluation.feasible, a.evaluation.objective,
                                       sum(stage_choices(a.problem, a.solution))))


def _stated(res, problem: Problem, solution: Solution, how: str, proof: bool = True):
    """A driver's answer re-evaluated as a plan of ``problem`` (per-stage choices) with the stages of
    ``solution``: the certificate says how the choice was made (and keeps its proof only for the space
    it was solved in: ``proof``)."""
    from planmap.evaluate import evaluate
    from planmap.peak_memory import with_peak_memory
    from planmap.problem import Status

    p = replace(res.problem, cost=problem.cost, remat_choice=True)  # the answer's microbatches and schedule
    ev = with_peak_memory(p, solution, evaluate(p, solution))
    cert = solution.certificate
    msg = (cert.message + "; " if cert.message else "") + f"remat: auto: {how}"
    changes: dict = {"objective": ev.objective, "message": msg, "options": {**cert.options, "remat": PER_STAGE}}
    if not proof:
        changes.update(status=Status.HEURISTIC, bound=None, gap=None)
    return replace(res, problem=p, solution=solution.with_certificate(**changes), evaluation=ev)

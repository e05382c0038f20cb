"""The planner's per-stage activation-checkpointing choice for solvers that do not make it themselves.

``remat: auto`` (:mod:`planmap.remat_stages`): the throughput DP chooses per stage inside its stage cost.
Any other solver is run by :func:`solve_choosing` with no stage and with every stage recomputing; the
latter answer also goes through :func:`relax` — recomputation turned off on every stage that fits its devices'
memory without it (never slower; for that split, the best choice per stage) — and the best answer under
the evaluator wins. The certificate says how the choice was made.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planmap.errors import InfeasibleError
from planmap.evaluate import evaluate
from planmap.peak_memory import with_peak_memory
from planmap.problem import Problem, Solution, Status
from planmap.remat_stages import PER_STAGE, stage_choices

__all__ = ["relax", "solve_choosing"]


def relax(problem: Problem, solution: Solution) -> Solution:
    """``solution`` with each stage's choice explicit and checkpointing turned off on every stage that fits
    its devices' memory without it (never slower; for this split, the best choice per stage)."""
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
    p = replace(res.problem, cost=problem.cost, remat_choice=True)  # the answer's microbatches and schedule
    ev = with_peak_memory(p, solution, evaluate(p, solution))
    cert = solution.certificate
    msg = (cert.message + "; " if cert.message else "") + f"remat: auto: {how}"
    changes: dict = {"objective": ev.objective, "message": msg, "options": {**cert.options, "remat": PER_STAGE}}
    if not proof:
        changes.update(status=Status.HEURISTIC, bound=None, gap=None)
    return replace(res, problem=p, solution=solution.with_certificate(**changes), evaluation=ev)

"""Microbatches and the pipeline schedule as planner decisions: the candidates a spec allows, the choice among them.

Artifacts have static shapes and are exported at the microbatch size, so ``globalBatch`` fixes the microbatch count
M = globalBatch / the artifact's batch, and a number fixes it too. ``microbatches: auto`` without ``globalBatch``
lets the planner choose M from :data:`AUTO_MICROBATCHES`, a list (``[1, 2, 4, 8]``) from that list;
``constraints.schedule: auto`` lets it choose gpipe or 1f1b. A plan records its M and schedule, and ``check``
accepts any value of the spec's set, re-evaluating the predictions with the recorded one.

The choice (:func:`choose`, :func:`pick`) is by the time per sample — step time / M, as every microbatch is one
run of the artifact — among the candidates whose memory fits. Ties go to small steps: the smallest M whose time
per sample is within :data:`TIE_TOLERANCE` of the best. A pipeline's bubble shrinks as (M + S − 1) / M, so past a
point more microbatches only make the step (and the global batch) larger; an SPMD plan's time per sample does not
depend on M, so it takes the smallest candidate. Solvers other than ``cluster`` (which searches stages per M) solve
at the largest candidate — the one with the most microbatches in flight, so their answer fits every smaller M —
and M is then chosen by evaluating their decisions at every candidate.

Schedules are not searched against each other: under planmap's cost model both have the step time
(M + S − 1) × the bottleneck and differ only in the microbatches a stage holds (GPipe M; 1F1B min(M, S − k) at
position k). In training 1F1B dominates GPipe (the same time, never more memory) and ``auto`` takes it; in
inference a stage holds one microbatch under either, they are the same plan, and ``auto`` takes gpipe
(:func:`resolve_schedule`). The certificate states the choice where the two differ (training).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from planmap.evaluation import Evaluation
from planmap.problem import Problem, Solution
from planmap.vocabulary import Mode, ObjectiveKind, Schedule

__all__ = ["AUTO_MICROBATCHES", "TIE_TOLERANCE", "Choice", "choose", "pick", "resolve_schedule", "pipelined",
           "as_planned"]

AUTO_MICROBATCHES = (1, 2, 4, 8, 16, 32)  # microbatches: auto without globalBatch
TIE_TOLERANCE = 0.01  # times per sample within 1 % of the best are a tie, won by the smallest M

T = TypeVar("T")


def resolve_schedule(mode: str) -> Schedule:
    """The schedule ``auto`` takes: 1f1b in training (it dominates gpipe), gpipe in inference (the same plan)."""
    return Schedule.ONE_F_ONE_B if Mode(mode) is Mode.TRAINING else Schedule.GPIPE


def pipelined(problem: Problem, solution: Solution) -> bool:
    """Whether ``solution`` is a pipeline (it has a schedule): a throughput plan that is not one SPMD stage."""
    return problem.objective is ObjectiveKind.THROUGHPUT and (solution.shardings is None or solution.num_stages > 1)


def as_planned(problem: Problem, solution: Solution) -> Problem:
    """``problem`` with the microbatches and schedule a plan's ``solution`` records (read back from a plan file),
    so that evaluating it gives the plan's predictions; ValueError when they are outside the spec's sets."""
    if problem.objective is not ObjectiveKind.THROUGHPUT:
        return problem
    return problem.decide(solution.microbatches, solution.schedule if pipelined(problem, solution) else None)


def pick(items: Sequence[T], key: Callable[[T], tuple[bool, float, int]]) -> T:
    """The winner of ``items`` by ``key(item) = (infeasible, time per microbatch, M)``: among feasible items the
    smallest M within :data:`TIE_TOLERANCE` of the best time, then the best time (the first on equal times); with no
    feasible item, the best time. With one M throughout this is ``min`` by (infeasible, time)."""
    keys = [key(x) for x in items]
    order = range(len(items))
    feasible = [i for i in order if not keys[i][0]]
    if not feasible:
        return items[min(order, key=lambda i: keys[i][1])]
    best = min(keys[i][1] for i in feasible)
    near = [i for i in feasible if keys[i][1] <= best * (1 + TIE_TOLERANCE)]
    m = min(keys[i][2] for i in near)
    return items[min((i for i in near if keys[i][2] == m), key=lambda i: keys[i][1])]


@dataclass(frozen=True, eq=False)
class Choice:
    """The decided problem (M and schedule fixed), the solution recording them, its evaluation, and the
    certificate's statement of the choice ("" when the spec left nothing to choose)."""

    problem: Problem
    solution: Solution
    evaluation: Evaluation
    statement: str


Final = Callable[[Problem, Solution, Evaluation], Evaluation]


def choose(problem: Problem, solution: Solution, final: Final | None = None) -> Choice:
    """Choose M for ``solution``'s decisions among ``problem.microbatch_candidates`` (see the module doc).

    ``final(problem, solution, evaluation)``: the verdict of a final plan (the program-model memory,
    :func:`planmap.peak_memory.with_peak_memory`), too slow for every candidate: the winner under ``evaluate`` is
    judged by it, and when it does not hold, the next winner, until one does or no candidate is left."""
    from planmap.evaluate import evaluate

    throughput = problem.objective is ObjectiveKind.THROUGHPUT
    ms = problem.microbatch_candidates if throughput else (problem.microbatches,)
    pipe = pipelined(problem, solution)
    sched = Schedule(solution.schedule) if pipe and solution.schedule else problem.schedule
    statement = ""
    if pipe and len(problem.schedule_candidates) > 1 and problem.mode is Mode.TRAINING:
        statement = (f"schedule {sched} of {{gpipe, 1f1b}}: 1f1b dominates gpipe in training (the same step time, "
                     "at most min(M, stages from it to the last) microbatches in flight per stage instead of M), "
                     "so gpipe was not evaluated")
    if len(ms) == 1:  # nothing to choose: the solver's answer as it is
        ev = evaluate(problem, solution)
        return Choice(problem, solution, ev if final is None else final(problem, solution, ev), statement)
    trials = []
    for m in ms:
        pm = problem.decide(m, sched)
        sol = replace(solution, microbatches=m, schedule=sched if pipe else None)
        trials.append((pm, sol, evaluate(pm, sol)))
    pm, sol, ev = _judged(trials, final)
    times = ", ".join(f"M={p.microbatches} " + (f"{_per_microbatch(e, p.microbatches) * 1e3:.6g} ms"
                                                 if e.feasible else "infeasible") for p, _, e in trials)
    chosen = (f"microbatches chosen from {{{', '.join(map(str, ms))}}} by the time per sample under evaluate "
              f"(the smallest M within {TIE_TOLERANCE:.0%} of the best): M={pm.microbatches} "
              f"(step time per microbatch: {times})")
    return Choice(pm, sol, ev, "; ".join(x for x in (chosen, statement) if x))


def _judged(trials: list[tuple[Problem, Solution, Evaluation]],
            final: Final | None) -> tuple[Problem, Solution, Evaluation]:
    """The :func:`pick` of ``trials`` whose ``final`` verdict holds (``trials`` is updated with the verdicts
    given); with none left feasible, :func:`pick`'s answer among all (an infeasible one)."""
    def key(t: tuple[Problem, Solution, Evaluation]) -> tuple[bool, float, int]:
        return not t[2].feasible, _per_microbatch(t[2], t[0].microbatches), t[0].microbatches

    judged: set[int] = set()
    while True:
        best = pick(trials, key=key)
        i = next(j for j, t in enumerate(trials) if t is best)
        if final is None or i in judged or not best[2].feasible:
            return best
        judged.add(i)
        trials[i] = (best[0], best[1], final(*best))
        if trials[i][2].feasible:
            return trials[i]


def _per_microbatch(ev: Evaluation, m: int) -> float:
    """Step time per microbatch of the step (the time per sample × the artifact's batch)."""
    return ev.step_time / max(m, 1)

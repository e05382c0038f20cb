"""``solve``: run a solver (or the ``auto`` chain) on a problem and re-evaluate its answer.

The driver owns what every solver would otherwise repeat: choosing a solver, refusing problems
that cannot fit before any search starts (with the bytes needed and available), re-deriving the
objective of the answer with :func:`planmap.evaluate.evaluate`, and reporting a solver whose
claimed objective disagrees with the evaluator.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError, SolverUnavailableError
from planmap.evaluate import Evaluation, evaluate
from planmap.evaluation import is_memory_violation
from planmap.problem import Problem, Solution, SolveOptions, Status, relative_gap
from planmap.units import format_bytes
from planmap.vocabulary import Mode

__all__ = ["SolveResult", "solve", "memory_precheck", "solver_choices", "installed_version", "CLAIM_TOLERANCE"]

CLAIM_TOLERANCE = 1e-6  # relative disagreement between a solver's claim and the evaluator


@dataclass(frozen=True)
class SolveResult:
    problem: Problem
    solution: Solution
    evaluation: Evaluation
    solver: str
    tried: tuple[tuple[str, str], ...]  # (solver, why it was skipped) for auto
    wall_time: float


def memory_precheck(problem: Problem) -> None:
    """Raise InfeasibleError when no placement can fit, naming bytes needed vs available."""
    g, cost, topo = problem.graph, problem.cost, problem.topology
    cap = problem.capacity
    pv, pn = cost.param_use
    params = float(g.value_bytes[np.unique(pv)].sum()) * cost.param_factor if len(pv) else 0.0
    need = params + float(g.state_bytes.sum())
    if np.isfinite(cap).all() and need > cap.sum():
        raise InfeasibleError(
            f"{problem.name} cannot fit: parameters"
            f"{' + gradients + optimizer state' if problem.mode is Mode.TRAINING else ''}"
            f" and state need {format_bytes(need)}, the cluster has {format_bytes(cap.sum())} usable "
            f"({len(cap)} devices x {format_bytes(cap.max())} after memoryHeadroom {problem.memory_headroom:.0%}); "
            "binding constraint: device memory")
    # the heaviest node must fit on some device it may run on
    node_mem = g.state_bytes.astype(float) + cost.working_set
    if len(pv):
        per_node = np.zeros(g.num_nodes)
        np.add.at(per_node, pn, g.value_bytes[pv] * cost.param_factor)
        node_mem = node_mem + per_node
    fits = (node_mem[:, None] <= cap[None, :]) & problem.allowed
    bad = np.flatnonzero(~fits.any(axis=1))
    if len(bad):
        i = int(bad[np.argmax(node_mem[bad])])
        allowed = np.flatnonzero(problem.allowed[i])
        best = cap[allowed].max() if len(allowed) else 0.0
        raise InfeasibleError(
            f"operator {g.op_name[i]!r} alone needs {format_bytes(node_mem[i])}, more than the "
            f"{format_bytes(best)} usable on any device it may run on; binding constraint: "
            f"{'pins / supported devices' if len(allowed) < topo.num_devices else 'device memory'}")


def solver_choices(problem: Problem, solver: str, *, recorded: bool = False) -> list[str]:
    """The solvers a solve with ``solver`` runs: the one named, or ``auto``'s candidates for this problem, in the
    order ``auto`` tries them; ``recorded``: also the other names their answers may carry (a baseline's)."""
    from planmap import solvers

    names = solvers.auto_candidates(problem) if solver == "auto" else [solver]
    if recorded:
        names = list(dict.fromkeys(n for name in names for n in (name, *solvers.RECORDED_AS.get(name, ()))))
    return names


def installed_version(solver: str, problem: Problem) -> tuple[str | None, bool]:
    """``(version, is MIP solver)`` of this installation's ``solver`` for ``problem``'s objective: the version its
    certificates carry (None: it declares none), and whether its certificates may name a MIP backend. Raises
    :class:`SolverUnavailableError` when the solver is unknown or not installed."""
    from planmap import solvers

    mip = solver in solvers.MIP_SOLVERS or solver not in solvers.BUILTIN
    return solvers.version(solver, str(problem.objective)), mip


def _run(name: str, problem: Problem, options: SolveOptions) -> Solution:
    from planmap import solvers

    solver = solvers.get(name)
    if problem.objective not in solver.objectives:
        raise SolverUnavailableError(f"solver {name!r} does not handle objective {problem.objective!r} "
                                     f"(it handles {', '.join(sorted(solver.objectives))})")
    return solver.solve(problem, options)


def solve(problem: Problem, solver: str = "auto", options: SolveOptions | None = None) -> SolveResult:
    """Solve ``problem``; with ``solver="auto"`` try :func:`planmap.solvers.auto_candidates` in order.

    ``auto`` stops at the first answer with a proof (optimal, or within the gap); a heuristic answer
    (e.g. the DP exact within one host only) warm-starts the next candidate, and the best answer
    under the evaluator wins. The time limit is for the whole chain. A problem whose stages choose
    activation checkpointing (``remat: auto``) is solved by :func:`planmap.remat_choice.solve_choosing`.
    """
    options = options or SolveOptions()
    if problem.remat_choice:
        from planmap.remat_choice import solve_choosing

        return solve_choosing(problem, solver, options, _solve)
    return _solve(problem, solver, options)


def _solve(problem: Problem, solver: str, options: SolveOptions) -> SolveResult:
    memory_precheck(problem)
    t0 = time.perf_counter()
    names = solver_choices(problem, solver)
    tried: list[tuple[str, str]] = []
    best: tuple[float, str, Solution] | None = None
    for name in names:
        left = options.time_limit - (time.perf_counter() - t0)
        if best is not None and left <= 0:
            break
        opts = replace(options, time_limit=max(left, 1e-3),
                       warm_start=best[2] if best is not None else options.warm_start)
        try:
            sol = _run(name, problem, opts)
        except SolverUnavailableError as e:
            if solver != "auto":
                raise
            tried.append((name, str(e)))
            continue
        except PlanmapError as e:
            if solver != "auto" or (isinstance(e, InfeasibleError) and best is None):
                raise
            tried.append((name, str(e)))
            continue
        if solver != "auto":
            return _finish(problem, sol, name, tuple(tried), time.perf_counter() - t0, options)
        ev = evaluate(problem, sol)
        proven = sol.certificate.status in (Status.OPTIMAL, Status.GAP_REACHED)
        if ev.feasible and (best is None or ev.objective < best[0] * (1 - CLAIM_TOLERANCE)
                            or (proven and ev.objective <= best[0] * (1 + CLAIM_TOLERANCE))):
            if best is not None:
                tried.append((best[1], f"{best[2].certificate.status} answer {best[0]:.6g}s superseded"))
            best = (ev.objective, name, sol)
        elif ev.feasible:
            tried.append((name, f"{sol.certificate.status} answer {ev.objective:.6g}s, not better"))
        else:
            tried.append((name, "answer violates constraints: " + "; ".join(ev.violations)))
        if proven and ev.feasible:
            break
    if best is None:
        raise SolverUnavailableError("no solver could handle this problem: "
                                     + "; ".join(f"{n}: {w}" for n, w in tried))
    _, name, sol = best
    return _finish(problem, sol, name, tuple(tried), time.perf_counter() - t0, options)


def _finish(problem: Problem, sol: Solution, name: str, tried, wall: float, options: SolveOptions) -> SolveResult:
    """Choose the microbatches among the spec's candidates (:func:`planmap.microbatching.choose`: the result's
    ``problem`` has them fixed) and re-evaluate the answer; keep the backend's bound and gap unless its claim
    disagrees (the objective, a time per microbatch, does not depend on M)."""
    from planmap.microbatching import choose
    from planmap.peak_memory import stage_programs_bytes, with_peak_memory

    programs: list = []  # the stages' compiled programs do not depend on M: computed once, for the first judged

    def final(p: Problem, s: Solution, e: Evaluation) -> Evaluation:
        if not programs:
            programs.append(stage_programs_bytes(p, s))
        return with_peak_memory(p, s, e, programs=programs[0])

    choice = choose(problem, sol, final)
    problem, sol, ev = choice.problem, choice.solution, choice.evaluation
    if not ev.feasible:
        linear_ok = ev.peak is not None and not any(is_memory_violation(v) for v in evaluate(problem, sol).violations)
        why = (" (the solver's linear memory terms fit; the program model of the stages' compiled programs, which "
               "the plan records, does not, at every microbatch count the spec allows)") if linear_ok else ""
        raise InfeasibleError(f"{problem.name}: the best plan found ({name}) violates constraints{why}:\n  - "
                              + "\n  - ".join(ev.violations))
    cert = sol.certificate
    message, gap, bound = cert.message, cert.gap, cert.bound
    if choice.statement:
        message = (message + "; " if message else "") + choice.statement
    claimed = cert.objective
    if (claimed is not None and math.isfinite(claimed) and math.isfinite(ev.objective)
            and abs(claimed - ev.objective) > CLAIM_TOLERANCE * max(abs(ev.objective), 1e-30)):
        message = (message + "; " if message else "") + (
            f"solver claimed {claimed:.9g}s, evaluated {ev.objective:.9g}s")
        if bound is not None:
            bound = min(bound, ev.objective)
        gap = relative_gap(ev.objective, bound)
    # what the user asked for wins over what a solver records (e.g. the time left for an inner stage)
    user = {"time_limit": options.time_limit, "rel_gap": options.rel_gap, "threads": options.threads,
            "seed": options.seed, **({"backend": options.backend} if cert.backend else {})}
    recorded = {**cert.options, **user}
    sol = sol.with_certificate(objective=ev.objective, bound=bound, gap=gap, message=message, options=recorded)
    return SolveResult(problem, sol, ev, name, tried, wall)

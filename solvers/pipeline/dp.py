"""``dp``: the optimal contiguous pipeline by dynamic programming over ideals (Tarnawski et al., §5).

For pipelined inference or training the time per sample is the load of the busiest device group.
Among *contiguous* plans — each stage convex on the contiguity graph, the stages in a pipeline
order, backward nodes with their forward class — the optimum is a chain of ideals, and a DP over
the ideals of the (coarsened, class-contracted) graph finds it exactly under the same model as
:func:`planmap.evaluate.evaluate`: compute plus distinct values received and sent, CPUs paying no
transfers, memory with the schedule's in-flight microbatches, replicated stages (load / r plus the
gradient all-reduce) when ``replication`` is allowed, and the max-fw + max-bw variant.

Two restrictions, both stated in :mod:`planmap.solvers.pipeline.stage_units`: a backward node without a
forward class partner (an *orphan*) is ordered by its mirrored edges, as in the paper, where
evaluate would let it go anywhere; and a device's transfer charges must depend only on the
device itself (true in the paper's setting), else the DP refuses with a message.

The search is bounded by the best known plan (the warm start, the even split and PipeDream's
planner at layer and at unit granularity), which prunes stages, sub-ideals and states that
cannot beat it. Passes with tighter thresholds come first (a ladder from the compute lower bound
to the incumbent): a pass costs roughly in proportion to how far its threshold is above the
lower bound, a pass at or above the optimum returns the optimum, and one that finds nothing
proves its threshold a lower bound (reported if the time limit stops the DP). Graphs with more ideals
than ``max_ideals`` (solver option, default 250,000) are refused with a message, so ``solver: auto`` moves on.

With ``remat: auto`` (``Problem.remat_choice``) each stage also chooses activation checkpointing: for a
fixed split a stage's memory depends on its own choice only and recomputing never makes it faster, so a
stage's cost is its plain cost where that fits the devices' memory, else its checkpointed cost where that
fits, else none (:mod:`planmap.remat_stages`); the DP is then exact over splits x per-stage choices, and
the certificate says so. The choice is read back from the final split by the same rule
(:func:`planmap.remat_choice.relax`).

Before the enumeration, lossless reductions shrink the unit graph (:mod:`.reductions`: colour classes
contracted, zero-cost leaves merged into their one neighbour); the certificate says how many units
they merged.

Options (``SolveOptions.passthrough``): ``max_ideals`` (int), ``reduce`` (default true; false skips the
free-leaf merging, for comparison), ``ladder`` (fractions of the way from
the lower bound to the incumbent tried as thresholds before the incumbent; default (0.3, 0.6);
``[]`` goes straight to the incumbent), ``bound_from_baselines`` (default true).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.remat_choice import relax
from planmap.remat_stages import PER_STAGE
from planmap.vocabulary import ObjectiveKind

from .engine import DPTimeout, to_solution
from .prepare import DEFAULT_MAX_IDEALS, PreparedDP, prepare
from .stage_units import NonUniformCharges

__all__ = ["ThroughputDP", "PreparedDP", "prepare", "incumbents", "threshold_ladder"]

VERSION = "2"  # 2: remat: auto chosen per stage inside the stage cost
DEFAULT_LADDER = (0.3, 0.6)


def threshold_ladder(lb: float, ub: float, fractions=DEFAULT_LADDER) -> list[float]:
    """Thresholds to try in turn: between the lower bound and the incumbent (a pass below the optimum
    fails fast and proves its threshold), the incumbent itself, and no threshold at all (an
    incumbent outside the DP's space — an orphan placed elsewhere — bounds nothing)."""
    if not math.isfinite(ub):
        return [math.inf]
    steps = [lb + float(f) * (ub - lb) for f in fractions if 0 < float(f) < 1 and ub > lb]
    return [t for t in steps if t > lb] + [ub * (1 + 1e-9), math.inf]


def incumbents(problem: Problem, options: SolveOptions) -> list[tuple[float, str, Solution]]:
    """Feasible plans to bound the search: the warm start and cheap baselines, best first."""
    from ..heuristics.even import EvenSplit
    from .pipedream import PipeDream

    found = []
    cands: list[tuple[str, Solution]] = []
    if options.warm_start is not None:
        cands.append(("warm start", options.warm_start))
    quick = replace(options, warm_start=None, progress=None)
    for name, solver, pt in (("even", EvenSplit(), {}), ("pipedream", PipeDream(), {"granularity": "layer"}),
                             ("unit chain", PipeDream(), {"granularity": "unit"})):
        try:
            cands.append((name, solver.solve(problem, replace(quick, passthrough=pt))))
        except PlanmapError:  # a baseline that cannot answer only means a looser bound
            continue
    for name, sol in cands:
        try:
            ev = evaluate(problem, sol)
        except ValueError:
            continue
        if ev.feasible and math.isfinite(ev.objective):
            found.append((ev.objective, name, sol))
    found.sort(key=lambda x: x[0])
    return found


class ThroughputDP:
    """Exact contiguous max-load (or max-fw + max-bw) pipeline split by DP over ideals."""

    name = "dp"
    objectives = frozenset({ObjectiveKind.THROUGHPUT})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        try:
            return self._exact(problem, options, t0)
        except NonUniformCharges as e:
            return self._per_host(problem, options, t0, e)

    def _per_host(self, problem: Problem, options: SolveOptions, t0: float, why: NonUniformCharges) -> Solution:
        """Charges differ between hosts (NVLink inside, a network between): solve exactly within each
        host — where they are uniform — and keep the best. Not a proof for the whole cluster, so the
        answer is a heuristic; ``solver: auto`` goes on to methods that model every link."""
        topo = problem.topology
        best: tuple[float, int, Solution] | None = None
        hosts = sorted({int(h) for h in topo.device_host[problem.allowed.any(axis=0)]})
        for k, h in enumerate(hosts):
            allowed = problem.allowed & (topo.device_host == h)[None, :]
            if not allowed.any(axis=1).all():
                continue
            left = options.time_limit - (time.perf_counter() - t0)
            if left <= 0:
                break
            sub = replace(problem, allowed=allowed)
            try:
                sol = self._exact(sub, replace(options, time_limit=left / (len(hosts) - k)), time.perf_counter())
            except PlanmapError:  # this host alone cannot hold the model, or its charges are not uniform either
                continue
            obj = evaluate(problem, sol).objective
            if best is None or obj < best[0]:
                best = (obj, h, sol)
        if best is None:
            raise why
        obj, h, sol = best
        host_name = next(d.host_name for d in topo.devices if d.host == h)
        return sol.with_certificate(status=Status.HEURISTIC, bound=None, gap=None, objective=obj,
                                    wall_time=time.perf_counter() - t0,
                                    message=f"transfer charges differ between hosts, so the DP is exact within one "
                                            f"host only: best on {host_name} ({sol.certificate.message})")

    def _exact(self, problem: Problem, options: SolveOptions, t0: float) -> Solution:
        pt = dict(options.passthrough)
        prep = prepare(problem, int(pt.get("max_ideals", DEFAULT_MAX_IDEALS)), reduce=bool(pt.get("reduce", True)))
        engine = prep.engine
        known = incumbents(problem, options) if pt.get("bound_from_baselines", True) else []
        ub = known[0][0] if known else math.inf
        lb = engine.lower_bound()
        deadline = t0 + options.time_limit if options.time_limit and options.time_limit > 0 else None
        thresholds = threshold_ladder(lb, ub, pt.get("ladder", DEFAULT_LADDER))
        proven = lb
        pairs = 0
        opts: dict[str, Any] = {"max_ideals": int(pt.get("max_ideals", DEFAULT_MAX_IDEALS)),
                                "time_limit": options.time_limit}
        for T in thresholds:
            self._progress(options, t0, ub, proven, f"DP over {prep.num_ideals:,} ideals, threshold {T:.6g}")
            try:
                res = engine.run(T, problem.variant, deadline)
            except (DPTimeout, KeyboardInterrupt) as stop:
                why = "timed out" if isinstance(stop, DPTimeout) else "was interrupted"
                if not known:
                    raise InfeasibleError(f"{problem.name}: the DP over {prep.num_ideals:,} ideals {why} before "
                                          "finding a plan; raise the time limit") from None
                obj, who, sol = known[0]
                return sol.with_certificate(
                    status=Status.TIME_LIMIT if isinstance(stop, DPTimeout) else Status.INTERRUPTED,
                    solver=self.name, version=VERSION, objective=obj, bound=proven, gap=None, backend=None,
                    options=opts, wall_time=time.perf_counter() - t0,
                    message=f"DP over {prep.num_ideals:,} ideals {why}; best known plan from {who}; "
                            f"the bound {proven:.6g} is proven")
            pairs += res.pairs
            if math.isfinite(res.value):
                status = Status.OPTIMAL if problem.contiguous else Status.HEURISTIC
                msg = (f"{prep.num_ideals:,} ideals of {prep.num_units} units, {pairs:,} stage candidates, "
                       f"threshold {T:.6g}")
                if prep.merged:
                    msg += f"; {prep.merged} zero-cost leaf unit(s) merged into their neighbour first (lossless)"
                if not problem.contiguous:
                    msg += "; optimal among contiguous plans only (non-contiguous plans may be better)"
                if problem.remat_choice:
                    msg += ("; over splits x activation checkpointing per stage (each stage recomputes its layers' "
                            "forward only where it does not fit without)")
                    opts = {**opts, "remat": PER_STAGE}
                cert = Certificate(status, self.name, objective=res.value,
                                   bound=res.value if problem.contiguous else None, version=VERSION,
                                   message=msg, options=opts, wall_time=time.perf_counter() - t0)
                sol = to_solution(problem, prep.unit_of, prep.bits, prep.classes, res, cert)
                if problem.remat_choice:  # the choice the DP made per stage, read back from the split
                    sol = relax(problem, replace(sol, stages=tuple(replace(st, remat=True) for st in sol.stages)))
                self._progress(options, t0, res.value, res.value, "DP done")
                return sol
            proven = max(proven, T)
        raise InfeasibleError(f"{problem.name}: no contiguous pipeline fits the devices' memory "
                              f"({prep.num_ideals:,} ideals searched); binding constraint: device memory")

    @staticmethod
    def _progress(options: SolveOptions, t0: float, inc: float, bound: float, message: str) -> None:
        if options.progress is not None:
            options.progress(elapsed=time.perf_counter() - t0, incumbent=inc if math.isfinite(inc) else None,
                             bound=bound, message=message)

"""The sharding IP on the stages the stage DP picks (Alpa's intra-op pass per stage), judged on the whole plan.

The stage DP (:mod:`.dp`) costs a stage additively from its layer groups' baseline layouts (:mod:`.costs`).
Here each stage of a DP answer is solved on its own submesh by the sharding IP
(:func:`planmap.solvers.sharding.ip.solve_mesh` on the stage's tables, repeated layers tied, warm-started from
the composed baseline layout, bounded by the deterministic work limits of :data:`~.layouts.WORK_LIMITS`).
Answers are cached per (layer range signature, mesh class, mode, microbatches, structure of the stage's
tables, warm start: the same inputs give the IP's same answer), so identical stages (the repeated layers of a
transformer on submeshes of one shape) cost one solve.
A stage's IP layout replaces the composed one only when :func:`planmap.evaluate.evaluate` says the *whole
plan* is no worse under it, and the kept stage's real time is put back into the DP's table (:func:`put_back`:
at its own entry, and where lower at every range of the same layer signatures on a submesh of the same mesh
class), so the DP can be solved again on it (:func:`dp_rounds`).

The stage IPs share a time box, ``REFINE_SHARE`` of the solve's time limit in CPU seconds of this process (the
IP's work, which a loaded machine does not inflate the way it does wall time); a stage it leaves out keeps its
baseline layout and the certificate says so. Each IP also has a wall-clock safety net, ``NET_SECONDS``
(reported when hit: on a loaded machine a 30 s net cut gpt-train-2host's stage IPs short, and its plan with
them); everything else is deterministic.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from planmap.evaluate import Evaluation, evaluate
from planmap.problem import Problem, Solution, SolveOptions, Status
from planmap.sharding import ShardingTables, evaluate_spmd
from planmap.sharding.stage import stage_map

from .costs import StageCosts, inflight_rows, mesh_class
from .dp import DPResult, stage_dp
from .layouts import WORK_LIMITS, StageLayout, _ip_available
from .space import LayerGroups, StagePlan, Submesh, build_solution, stage_meshes

__all__ = ["StageReport", "RefineStats", "StageRefiner", "refine_plan", "put_back", "dp_rounds", "report_text",
           "REFINE_SHARE", "ROUNDS"]

ROUNDS = 2  # DP re-solves on the table with the kept stages' real times put back
NET_SECONDS = 300.0  # wall clock per stage IP, a net only (the work limits bound it; a loaded machine stretches it)
REFINE_SHARE = 0.5  # of the solve's time limit: the stage IPs' CPU seconds in all (a time box; hitting it is stated)


@dataclass(frozen=True)
class StageReport:
    """What the sharding IP did for one stage of a plan: ``origin`` of the kept layout ("single device",
    "ip", "baselines"); ``gap`` the kept layout's relative gap to the stage IP's bound (None: no bound);
    ``note`` why the IP did not run or its layout was not kept."""

    start: int
    stop: int
    mesh: str
    origin: str
    status: Status | None = None
    gap: float | None = None
    tied: bool = False
    note: str = ""

    def text(self) -> str:
        where = f"groups {self.start}-{self.stop - 1} on {self.mesh}"
        if self.origin == "single device":
            return f"{where}: one device"
        if self.gap is None:
            return f"{where}: baselines only ({self.note or 'no IP bound'})"
        space = " over layouts with repeated layers tied" if self.tied else ""
        kept = "IP layout" if self.origin == "ip" else f"baseline layout kept ({self.note})"
        return f"{where}: {kept}, stage IP {self.status} gap {max(self.gap, 0.0):.2%}{space}"


@dataclass
class RefineStats:
    """Stage IP solves, cache hits, CPU seconds, stages left out by the time box, layouts kept and rejected."""

    solves: int = 0
    hits: int = 0
    seconds: float = 0.0
    skipped: int = 0
    kept: int = 0
    rejected: int = 0
    clock_cut: bool = False
    resolves: int = 0  # DP runs on a table with stage times put back
    new_plans: int = 0  # ... that gave a plan not found before


@dataclass(frozen=True, eq=False)
class _Answer:
    layout: StageLayout | None  # the IP's layout (or its warm start where that was better)
    bound: float | None  # seconds per microbatch no layout in the IP's space beats
    status: Status | None
    tied: bool
    note: str = ""


def _fingerprint(tables: ShardingTables) -> str:
    """The structure of a stage's tables (ops, operands, shapes, arguments, what crosses the stage): equal
    fingerprints have the same value ids, so one stage's layout is a layout of the other."""
    smap = stage_map(tables.graph)
    h = hashlib.sha256()
    for part in (tables.graph.kind, tables.operands, tables.shapes, [a.role for a in tables.graph.args],
                 None if smap is None else (smap.received.tolist(), smap.sent.tolist())):
        h.update(repr(part).encode())
    return h.hexdigest()[:20]


def _digest(obj) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:20]


@dataclass
class StageRefiner:
    """The cached stage IP (see the module doc); ``budget`` CPU seconds of stage IPs in all."""

    problem: Problem
    groups: LayerGroups
    options: SolveOptions
    budget: float
    stats: RefineStats = field(default_factory=RefineStats)
    _cache: dict = field(default_factory=dict)

    def solve(self, start: StageLayout, first: int, stop: int) -> _Answer:
        """The IP's answer for the stage of groups ``[first, stop)`` whose composed layout is ``start``."""
        tables = start.tables
        if not _ip_available():
            return _Answer(None, None, None, False, "the sharding IP is not installed")
        key = (self.groups.range_signature(first, stop), mesh_class(self.problem, tables.mesh), tables.mode,
               tables.microbatches, _fingerprint(tables), _digest(sorted(start.specs.items())))
        hit = self._cache.get(key)
        if hit is not None:
            self.stats.hits += 1
            if hit.layout is None:
                return hit
            return replace(hit, layout=replace(hit.layout, tables=tables, evaluation=evaluate_spmd(tables,
                                                                                                   hit.layout.specs)))
        if self.stats.seconds >= self.budget:
            self.stats.skipped += 1
            return _Answer(None, None, None, False, "the stage IPs' time share was spent")
        t0, c0 = time.monotonic(), time.process_time()
        ans = self._ip(start, NET_SECONDS)
        self.stats.seconds += time.process_time() - c0
        self.stats.solves += 1
        self.stats.clock_cut |= time.monotonic() - t0 >= NET_SECONDS * 0.99
        self._cache[key] = ans
        return ans

    def _ip(self, start: StageLayout, seconds: float) -> _Answer:
        from planmap.solvers.sharding.ip import solve_mesh
        from planmap.solvers.sharding.reduce import reduce_tables

        opts = SolveOptions(time_limit=seconds, rel_gap=self.options.rel_gap, threads=1, seed=self.options.seed,
                            backend="highs", passthrough={**WORK_LIMITS, **dict(self.options.passthrough)})
        tables = start.tables
        red = reduce_tables(tables, tie_layers=True)
        ans = solve_mesh(tables, opts, warm_start=start.specs, reduced=red)
        tied = any(n.startswith("repeated layers tied") for n in red.notes)
        if ans.specs is None or ans.evaluation is None:
            return _Answer(None, None, ans.status, tied, "the stage IP found no layout")
        mb = max(tables.microbatches, 1)
        bound = None if ans.bound is None else ans.bound / mb
        lay = StageLayout(tables, ans.specs, ans.evaluation, "ip" if ans.origin == "ip" else start.origin,
                          ans.status or Status.TIME_LIMIT, gap=ans.gap)
        return _Answer(lay, bound, ans.status, tied)


def _gap(t: float, bound: float | None) -> float | None:
    return None if bound is None else max(0.0, (t - bound) / t) if t > 0 else 0.0


def refine_plan(problem: Problem, groups: LayerGroups, plans: list[StagePlan], inflight: list[int],
                sol: Solution, ev: Evaluation, refiner: StageRefiner,
                score: Callable[[Solution, Evaluation], tuple]) -> tuple[list[StagePlan], Solution, Evaluation,
                                                                         list[StageReport]]:
    """The sharded stages of ``plans`` given the stage IP's layouts where the whole plan is no worse under
    ``score`` (the solver's ranking of evaluations): first every stage the IP made faster at once (stages agree
    on the layouts of what they pass each other only together), else stage by stage in order (a stage off the
    bottleneck changes no step time now, but may once the bottleneck is refined). The plans, solution and
    evaluation kept, and a report per stage. ``inflight[k]``: the microbatches stage ``k`` holds."""
    plans = list(plans)
    reports: list[StageReport] = []
    better: dict[int, tuple[StageLayout, StageReport, float | None]] = {}
    for k, st in enumerate(plans):
        if st.tables is None or st.specs is None or st.tables.mesh.num_devices == 1:
            reports.append(StageReport(st.start, st.stop, f"{len(st.devices)} device(s)", "single device"))
            continue
        current = StageLayout(st.tables, st.specs, evaluate_spmd(st.tables, st.specs), "baselines",
                              Status.HEURISTIC)
        ans = refiner.solve(current, st.start, st.stop)
        mesh = "mesh " + "x".join(map(str, st.tables.mesh.axis_sizes))
        if ans.layout is None:
            reports.append(StageReport(st.start, st.stop, mesh, "baselines", note=ans.note))
            continue
        lay = ans.layout
        reports.append(StageReport(st.start, st.stop, mesh, "baselines", ans.status, _gap(current.time, ans.bound),
                                   ans.tied, "the IP found none faster"))
        if lay.specs == current.specs or lay.time >= current.time:
            continue
        if lay.base + inflight[k] * lay.stash > st.tables.capacity:
            reports[k] = replace(reports[k], note=f"the IP's layout does not fit {inflight[k]} microbatches in flight")
            continue
        better[k] = (lay, reports[k], _gap(lay.time, ans.bound))

    def trial(ks: list[int]) -> tuple[list[StagePlan], Solution, Evaluation]:
        new = [replace(st, specs=better[k][0].specs) if k in ks else st for k, st in enumerate(plans)]
        tsol = build_solution(problem, groups, new, sol.certificate, microbatches=sol.microbatches,
                              schedule=sol.schedule)
        return new, tsol, evaluate(problem, tsol)

    kept: list[int] = []
    if len(better) > 1:
        new, tsol, tev = trial(sorted(better))
        if score(tsol, tev) <= score(sol, ev):
            plans, sol, ev, kept = new, tsol, tev, sorted(better)
    for k in sorted(better) if not kept else []:
        new, tsol, tev = trial([*kept, k])
        if score(tsol, tev) <= score(sol, ev):  # a faster stage off the bottleneck leaves the step as it is
            plans, sol, ev = new, tsol, tev
            kept.append(k)
    for k, (_, rep, gap) in better.items():
        if k in kept:
            reports[k] = replace(rep, origin="ip", gap=gap, note="")
        else:
            reports[k] = replace(rep, note="the whole plan is slower with the IP's layout")
    refiner.stats.kept += len(kept)
    refiner.stats.rejected += len(better) - len(kept)
    return plans, sol, ev, reports


def put_back(table: np.ndarray, mesh_of: np.ndarray, stages, plans: list[StagePlan], rows: list[int],
             boundary: list[np.ndarray], like: Callable[[int, int, int, int], list[tuple[int, int, int, int]]]
             | None = None) -> int:
    """Write each sharded stage's real time (its kept layout under :func:`evaluate_spmd`, plus the boundary
    transfers ``boundary[sub][i, j]`` the table charges) into the DP's ``table`` at its range and submesh, for
    every row whose in-flight microbatches (``rows``) the layout fits; and, where lower, at the entries
    ``like(i, j, sub, choice)`` names (the same layer signatures on a submesh of the same mesh class, each
    ``(i, j, sub, choice)``: the same stage elsewhere). Returns the entries changed."""
    changed = 0
    for st, plan in zip(stages, plans, strict=True):
        if plan.tables is None or plan.specs is None:
            continue
        i, j, s = st.start, st.stop, st.sub
        choice = int(mesh_of[st.row, i, j, s])
        ev = evaluate_spmd(plan.tables, plan.specs)
        stash = float(ev.memory_parts["stash"])
        fits = [row for row, f in enumerate(rows)
                if float(ev.memory) - stash + f * stash <= plan.tables.capacity * (1 + 1e-12)]
        others = [e for e in (like(i, j, s, choice) if like is not None else []) if e[:3] != (i, j, s)]
        for a, b, s2, c2 in [(i, j, s, choice), *others]:
            t = float(ev.microbatch_time) + float(boundary[s2][a, b])
            for row in fits:
                old = table[row, a, b, s2]
                if old != t and ((a, b, s2) == (i, j, s) or t < old):
                    table[row, a, b, s2] = t
                    mesh_of[row, a, b, s2] = c2
                    changed += 1
    return changed


def _like(costs: StageCosts, subs: list[Submesh]) -> Callable[[int, int, int, int], list[tuple[int, int, int, int]]]:
    """``like(i, j, sub, choice)``: every ``(a, b, sub', choice')`` whose groups have the signatures of ``[i, j)``
    and whose submesh has a mesh of the same class as the chosen one (same variant): a stage that costs the
    same up to its boundary transfers."""
    classes = [[mesh_class(costs.problem, m) for m in stage_meshes(costs.problem, sub)] for sub in subs]
    groups = costs.groups

    def like(i: int, j: int, s: int, choice: int) -> list[tuple[int, int, int, int]]:
        want, sig, n = classes[s][choice // 2], groups.range_signature(i, j), j - i
        ranges = [(a, a + n) for a in range(groups.num_groups - n + 1) if groups.range_signature(a, a + n) == sig]
        targets = [(s2, 2 * cs.index(want) + choice % 2) for s2, cs in enumerate(classes) if want in cs]
        return [(a, b, s2, c2) for a, b in ranges for s2, c2 in targets]

    return like


def dp_rounds(problem: Problem, costs: StageCosts, refiner: StageRefiner | None, order: np.ndarray, subs: list[Submesh],
              formula: str, build: Callable[[DPResult, np.ndarray], list[StagePlan]],
              score: Callable[[Solution, Evaluation], tuple], times: dict[str, float],
              rounds: int = ROUNDS) -> list[tuple[DPResult, Solution, Evaluation, list[StageReport]]]:
    """The stage DP on ``costs``' table for ``problem``'s microbatches, its plan built (``build``: the stages
    sharded on their ranges), refined by the stage IP (:func:`refine_plan`) and judged by ``evaluate``; then,
    up to ``rounds`` times, the kept stages' real times put back into the table (:func:`put_back`) and the DP
    solved again while that changes its answer (no ``refiner``: the composed layouts, one round). Every plan
    found, in order; ``times`` accumulates the seconds of "dp", "stages" (building and refining) and "evaluate"."""
    from planmap.problem import Certificate

    m = problem.microbatches
    table, mesh_of = costs.table(order, subs, m)
    rows = inflight_rows(problem, m)
    boundary = [costs.boundary_time(link, sub.size) for link, sub in zip(costs.links(order, subs), subs, strict=True)]
    like = _like(costs, subs)
    out: list[tuple[DPResult, Solution, Evaluation, list[StageReport]]] = []
    seen: set[tuple] = set()
    for k in range(rounds + 1):
        if k and refiner is not None:
            refiner.stats.resolves += 1
        t0 = time.perf_counter()
        res = stage_dp(table, np.array([s.offset for s in subs]), np.array([s.size for s in subs]), len(order), m,
                       formula=formula)
        t1 = time.perf_counter()
        times["dp"] = times.get("dp", 0.0) + t1 - t0
        if res is None:
            break
        key = tuple((s.start, s.stop, s.sub, s.row) for s in res.stages)
        if key in seen:
            break
        seen.add(key)
        plans = build(res, mesh_of)
        sol = build_solution(problem, costs.groups, plans, Certificate(Status.HEURISTIC, "cluster"), microbatches=m)
        t2 = time.perf_counter()
        ev = evaluate(problem, sol)
        t3 = time.perf_counter()
        reports: list[StageReport] = []
        if refiner is not None:
            plans, sol, ev, reports = refine_plan(problem, costs.groups, plans, [rows[s.row] for s in res.stages],
                                                  sol, ev, refiner, score)
        t4 = time.perf_counter()
        times["stages"] = times.get("stages", 0.0) + (t2 - t1) + (t4 - t3)
        times["evaluate"] = times.get("evaluate", 0.0) + t3 - t2
        out.append((res, sol, ev, reports))
        if k and refiner is not None:
            refiner.stats.new_plans += 1
        if refiner is None or not put_back(table, mesh_of, res.stages, plans, rows, boundary, like):
            break
    return out


def report_text(reports: list[StageReport]) -> str:
    """The per-stage part of the certificate."""
    return "; ".join(f"stage {k}: {r.text()}" for k, r in enumerate(reports))

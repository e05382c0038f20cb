"""The ``cluster`` solver: whole-cluster throughput plans — pipeline stages × submeshes × sharding (issue 13).

Alpa's hierarchy on planmap's model. The graph is cut into layer groups (:func:`~.space.layer_groups`);
each candidate stage (a contiguous range of groups on a submesh of :func:`~.space.submeshes`) is costed
from the sharding solver's per-group layouts on every logical mesh of the submesh
(:class:`~.costs.StageCosts`); the stage DP (:func:`~.dp.stage_dp`) picks ranges, submeshes and the
mesh of each stage minimising the step time under the schedule's memory, for every microbatch count
tried and every device order (heterogeneous clusters: hosts in both orders). The stages of the best
DP answer are then sharded on their whole range (the groups' layouts composed, then the sharding IP per
stage, kept where the whole plan is no worse, and its stage costs put back for a DP re-solve: :mod:`.refine`)
and the plan is judged by :func:`planmap.evaluate.evaluate` together with the baselines — everything on one device,
pure data parallel, FSDP, Megatron tensor × data parallel, and the pipeline plan of the exact
pipeline DP (``dp``) — and every point of the practitioner's (dp, fsdp, tp, pp) grid (:mod:`.grid`; on graphs of
at most ``GRID_MAX_GROUPS`` layer groups), which are points of the same space; the best step time per microbatch
wins.

The certificate states the space searched and what is proven. The DP is optimal over contiguous ranges of the
layer groups × the submeshes × the microbatch counts given its stage costs (additive over the groups' baseline
layouts, with the refined stages' evaluated times put back), and each stage of the winner states its sharding IP's
status and gap (or "baselines only" where the IP did not run); neither is a proof under
:func:`planmap.evaluate.evaluate`. The proof is :mod:`.bound`'s: a lower bound on the time per microbatch
(step / M) of every plan of that space with *any* layout per stage, and of every candidate judged; the gap to it
gives the status (``optimal`` within :data:`~planmap.solvers.mip_result.OPTIMAL_GAP`, ``gap_reached`` within the
spec's relative gap, else ``time_limit``: a bound and a gap, the search stopped short of closing it) and the bound
is recorded on the scale of evaluate's objective (:func:`_proof`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.evaluate import Evaluation, evaluate
from planmap.microbatching import pick
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status, relative_gap
from planmap.sharding import propagate
from planmap.sharding.stage import stage_tables
from planmap.vocabulary import ObjectiveKind

from .bound import SpaceBound, space_bound
from .costs import StageCosts, inflight_rows
from .dp import DPResult
from .grid import grid_plan, grid_points, hosts_width
from .layouts import compose_layout
from .refine import REFINE_SHARE, StageRefiner, StageReport, dp_rounds, report_text
from .space import LayerGroups, StagePlan, Submesh, device_order, layer_groups, stage_meshes, submeshes

__all__ = ["Cluster", "ClusterAnswer", "plan_cluster", "BASELINE_NAMES"]

VERSION = "1"
BASELINE_NAMES = ("single", "data-parallel", "fsdp", "megatron", "dp")
# the grid's plans are built and evaluated whole (≈ 1 s per point on 8 groups, 13 s on the 48-layer model's 50):
# judged up to this many layer groups, so that large models keep their search time (a work limit: deterministic)
GRID_MAX_GROUPS = 24


@dataclass(frozen=True, eq=False)
class ClusterAnswer:
    """Everything the search found: the winner, every candidate's evaluation, and search statistics."""

    solution: Solution
    evaluation: Evaluation
    candidates: tuple[tuple[str, Solution, Evaluation], ...]
    dp: DPResult | None
    groups: LayerGroups
    stats: dict


def _score(problem: Problem, sol: Solution, ev: Evaluation) -> tuple[bool, float]:
    """(infeasible, seconds per microbatch of the step): plans with different microbatch counts compare
    by the step time divided by the microbatches (every microbatch is one run of the artifact)."""
    return (not ev.feasible, ev.step_time / max(sol.microbatches, 1))


def _orders(problem: Problem) -> list[np.ndarray]:
    """Device orders the DP lays stages out in: hosts in order, and reversed when the hosts differ in
    device type (the first stages then run on the other type)."""
    order = device_order(problem)
    types = problem.topology.device_type[order]
    if len(set(types.tolist())) > 1:
        return [order, device_order(problem, reverse_hosts=True)]
    return [order]


def _stage_plan(problem: Problem, costs: StageCosts, sub: Submesh, choice: int, start: int, stop: int,
                inflight: int) -> StagePlan:
    """A chosen stage sharded on its whole range: its groups' layouts composed (:func:`compose_layout`); the
    layout must fit ``inflight`` microbatches, else the groups' leanest layouts are taken. The stage IP
    refines it afterwards, judged on the whole plan (:func:`~.refine.refine_plan`)."""
    mesh = stage_meshes(problem, sub)[choice // 2]
    if mesh.num_devices == 1:
        return StagePlan(start, stop, sub.devices)
    tables = stage_tables(problem, costs.groups.range_ops(start, stop), mesh)
    lay = compose_layout(tables, [costs.group_layout(g, mesh, choice % 2) for g in range(start, stop)])
    if lay.base + inflight * lay.stash > tables.capacity and choice % 2 == 0:
        lean = compose_layout(tables, [costs.group_layout(g, mesh, 1) for g in range(start, stop)])
        lay = lean if lean.base + inflight * lean.stash <= tables.capacity else lay
    return StagePlan(start, stop, tuple(int(d) for d in mesh.devices), tables, lay.specs)


def megatron_hosts(problem: Problem) -> Solution:
    """Megatron as practitioners run it: tensor parallel over a whole host's devices, data parallel across
    hosts (one mesh, ``(hosts, devices per host)`` or ``(devices,)`` on one host), the argument specs of
    :func:`planmap.solvers.sharding.baselines.megatron_overrides` propagated."""
    from planmap.sharding.solution import spmd_solution, tables_cache
    from planmap.solvers.sharding.baselines import megatron_overrides, meshes_or_raise

    meshes = meshes_or_raise(problem, "megatron")
    hosts = len(set(problem.topology.device_host[meshes[0].devices].tolist()))
    per_host = meshes[0].num_devices // hosts
    want = (per_host,) if hosts == 1 else (hosts, per_host)
    mesh = next((m for m in meshes if m.axis_sizes == want), None)
    if mesh is None:
        raise SolverUnavailableError(f"megatron is not applicable to {problem.name}: no {want} mesh")
    tables = tables_cache(problem).get(mesh)
    over = megatron_overrides(tables, mesh.num_axes - 1, 0 if mesh.num_axes == 2 else None)
    return spmd_solution(problem, tables, propagate(tables, over), Certificate(Status.HEURISTIC, "megatron"))


def _baselines(problem: Problem, options: SolveOptions, names: Sequence[str]) -> list[tuple[str, Solution]]:
    """The baselines that apply to ``problem``, each skipped when it does not apply (all deterministic)."""
    from planmap.solvers.heuristics.even import SingleDevice
    from planmap.solvers.pipeline.dp import ThroughputDP
    from planmap.solvers.sharding import baselines as spmd

    direct = {"data-parallel": lambda p: spmd.data_parallel(p)[0], "fsdp": lambda p: spmd.fsdp(p)[0],
              "megatron": megatron_hosts}
    solvers: dict[str, type[SingleDevice] | type[ThroughputDP]] = {"single": SingleDevice, "dp": ThroughputDP}
    out = []
    for name in names:
        try:
            sol = direct[name](problem) if name in direct else solvers[name]().solve(problem, options)
        except PlanmapError:  # not applicable here (or not installed)
            continue
        out.append((name, sol))
    return out


def plan_cluster(problem: Problem, options: SolveOptions, *, microbatch_choices: Sequence[int] | None = None,
                 formula: str = "step", ip_groups: bool = False, refine: bool = True,
                 baselines: Sequence[str] = BASELINE_NAMES) -> ClusterAnswer:
    """The whole search (see the module doc); ``microbatch_choices`` default to the problem's candidates (the
    spec's count, or its choices: :mod:`planmap.microbatching`, whose tie-break picks the winner)."""
    t0 = time.perf_counter()
    if problem.objective is not ObjectiveKind.THROUGHPUT:
        raise SolverUnavailableError("solver 'cluster' plans throughput only")
    if problem.original.dim_maps is None or problem.original.outputs is None:
        raise SolverUnavailableError(f"solver 'cluster' needs a StableHLO graph with dimension maps; "
                                     f"{problem.name} has none (a profiled graph: use dp or ip)")
    groups = layer_groups(problem)
    choices = sorted({int(m) for m in (microbatch_choices or problem.microbatch_candidates)})
    costs = StageCosts(problem, groups, options, use_ip=ip_groups)
    progress = options.progress
    found: list[tuple[str, Solution, Evaluation]] = []
    best_dp: DPResult | None = None
    best_dp_score = float("inf")
    refiner = StageRefiner(problem, groups, options, REFINE_SHARE * float(options.time_limit)) if refine else None
    times: dict[str, float] = {}
    reports: dict[str, list[StageReport]] = {}
    for order in _orders(problem):
        subs = submeshes(problem, order)
        for m in choices:
            pm = replace(problem, microbatches=m) if m != problem.microbatches else problem
            rows = inflight_rows(problem, m)

            def build(res: DPResult, mesh_of: np.ndarray, pm: Problem = pm, rows: list[int] = rows,
                      subs: list[Submesh] = subs) -> list[StagePlan]:
                return [_stage_plan(pm, costs, subs[st.sub], int(mesh_of[st.row, st.start, st.stop, st.sub]),
                                    st.start, st.stop, rows[st.row]) for st in res.stages]

            rounds = dp_rounds(pm, costs, refiner, order, subs, formula, build,
                               lambda s, e: _score(problem, s, e), times)
            for k, (res, sol, ev, reps) in enumerate(rounds):
                name = f"stage DP (M={m}, {len(res.stages)} stage(s){', re-solved' if k else ''})"
                found.append((name, sol, ev))
                reports[name] = reps
                if best_dp is None or res.step_time / m < best_dp_score:
                    best_dp, best_dp_score = res, res.step_time / m
                if progress is not None:
                    progress(elapsed=time.perf_counter() - t0, incumbent=ev.objective, bound=None,
                             message=f"stage DP M={m}: {len(res.stages)} stage(s)")
    t_base = time.perf_counter()
    for name, sol in _baselines(problem, replace(options, progress=None), baselines):
        found.append((name, sol, evaluate(problem, sol)))
    base_time = time.perf_counter() - t_base
    t_grid = time.perf_counter()
    grid = _grid(problem, groups, choices) if groups.num_groups <= GRID_MAX_GROUPS else []
    grid_time = time.perf_counter() - t_grid
    if not found and not grid:
        raise SolverUnavailableError(f"solver 'cluster' found no plan for {problem.name}")
    name, sol, ev = pick(found + grid, key=lambda f: (*_score(problem, f[1], f[2]), f[1].microbatches))
    space = space_bound(problem, groups, choices, _orders(problem))
    proof = _proof(problem, options, sol, ev, found + grid, space)
    stats = {"groups": groups.num_groups, "distinct_groups": len(set(groups.signature)), "solves": costs.stats.solves,
             "cache_hits": costs.stats.hits, "tables_time": costs.stats.tables_time,
             "solve_time": costs.stats.solve_time, "dp_time": times.get("dp", 0.0), "baselines_time": base_time,
             "grid_time": grid_time, "grid_points": len(grid),
             "stages_time": times.get("stages", 0.0), "evaluate_time": times.get("evaluate", 0.0),
             **_refine_stats(refiner),
             "dp_states": best_dp.states if best_dp else 0,
             "dp_candidates": f"{best_dp.candidates}/{best_dp.candidates_total}" if best_dp else "",
             "statuses": dict(costs.stats.statuses), "bound_time": space.seconds, "bound_states": space.states,
             "wall_time": time.perf_counter() - t0}
    message = _message(groups, choices, costs, found, grid, name, ev, problem, refiner, reports.get(name)) + (
        f"; {proof.text}")
    sol = sol.with_certificate(status=proof.status, solver="cluster", objective=ev.objective, bound=proof.bound,
                               gap=proof.gap, version=VERSION, message=message, wall_time=stats["wall_time"],
                               options={"time_limit": options.time_limit, "rel_gap": options.rel_gap})
    return ClusterAnswer(sol, ev, tuple(found), best_dp, groups, stats)


@dataclass(frozen=True)
class _Proof:
    status: Status
    bound: float | None  # on the scale of evaluate's objective (see :func:`_proof`)
    gap: float | None
    text: str


def _proof(problem: Problem, options: SolveOptions, sol: Solution, ev: Evaluation, judged, space: SpaceBound) -> _Proof:
    """The certificate's status, bound and gap from the space's bound (:mod:`.bound`).

    Plans are ranked by the time per microbatch ``step / M``; the bound ``L`` is on that score, over the space
    and every candidate judged (``min`` of the space's bound and their best score). The certificate's objective
    is evaluate's (the bottleneck stage's time per microbatch, ``step / (M + S − 1)``), so the bound is recorded
    on that scale — ``L × objective / score`` — which makes the recorded gap exactly ``1 − L / score``: no plan
    of the space is more than that fraction faster per microbatch than this one."""
    m = max(sol.microbatches, 1)
    score = ev.step_time / m
    fits = [e.step_time / max(s.microbatches, 1) for _, s, e in judged if e.feasible]
    lower = min([space.score, *fits])
    if not ev.feasible or not np.isfinite(lower) or not np.isfinite(score) or score <= 0:
        why = "the plan does not fit memory" if not ev.feasible else "no plan of the space fits"
        return _Proof(Status.HEURISTIC, None, None, f"no bound ({why})")
    bound = lower * ev.objective / score
    gap = relative_gap(ev.objective, bound)
    from planmap.solvers.mip_result import OPTIMAL_GAP

    status = (Status.OPTIMAL if (gap or 0.0) <= OPTIMAL_GAP else Status.GAP_REACHED if (gap or 0.0) <= options.rel_gap
              else Status.BOUNDED)
    per_m = ", ".join(f"M={k} {v * 1e3:.6g} ms" for k, v in sorted(space.per_m.items()))
    if lower < space.score:
        beyond = (f"a candidate judged outside the space takes {lower * 1e3:.6g} ms, less than any plan of it: the "
                  f"bound over the space and the {len(judged)} candidates judged is {lower * 1e3:.6g} ms")
    else:
        beyond = "no candidate judged outside the space is below it"
    return _Proof(status, bound, gap,
                  f"proof: no plan of the space — contiguous ranges of the layer groups in device order × the "
                  f"submeshes above at increasing offsets × any layout of each stage on its submesh's logical meshes "
                  f"× the microbatches, under the schedule's memory — takes less than {space.score * 1e3:.6g} ms per "
                  f"microbatch (step / M; {per_m}): each op at its cheapest strategy, reshards and transfers between "
                  f"stages free, only the weights in memory, and the stage DP exact on that table; {beyond}; this "
                  f"plan takes {score * 1e3:.6g} ms per microbatch, {gap:.2%} above the bound (the bound is recorded "
                  f"on the scale of evaluate's objective, the bottleneck stage's time: × objective / (step / M))")


def _grid(problem: Problem, groups: LayerGroups, choices: list[int]) -> list[tuple[str, Solution, Evaluation]]:
    """Every (dp, fsdp, tp, pp) point of the practitioner's grid (:mod:`.grid`) at each microbatch count, judged
    by :func:`planmap.evaluate.evaluate`, so that the answer is never worse than the best hand-tuned degrees."""
    topo = problem.topology
    cache: dict = {}
    out = []
    for point in grid_points(len(topo.accelerators) or topo.num_devices, hosts_width(problem)):
        for m in choices:
            try:
                sol = grid_plan(problem, groups, point, m, cache)
            except PlanmapError:  # the point does not fit the model (e.g. a mesh axis it cannot split)
                continue
            if sol is not None:
                pm = replace(problem, microbatches=m) if m != problem.microbatches else problem
                dp, fsdp, tp, pp = point
                out.append((f"grid dp={dp} fsdp={fsdp} tp={tp} pp={pp} (M={m})", sol, evaluate(pm, sol)))
    return out


def _refine_stats(refiner: StageRefiner | None) -> dict:
    """The stage IP's share of the search statistics."""
    if refiner is None:
        return {}
    st = refiner.stats
    return {"stage_ip_solves": st.solves, "stage_ip_hits": st.hits, "stage_ip_time": st.seconds,
            "stage_ip_kept": st.kept, "stage_ip_rejected": st.rejected, "stage_ip_skipped": st.skipped,
            "dp_resolves": st.resolves, "dp_new_plans": st.new_plans}


def _message(groups: LayerGroups, choices: list[int], costs: StageCosts, found, grid, winner: str, ev: Evaluation,
             problem: Problem, refiner: StageRefiner | None, reports: list[StageReport] | None) -> str:
    """The certificate's statement of the space searched and of what is proven."""
    shapes = sorted({s.shape for o in _orders(problem) for s in submeshes(problem, o)},
                    key=lambda x: tuple(int(p) for p in x.split("x")))
    statuses = ", ".join(f"{n} {k}" for k, n in sorted(costs.stats.statuses.items()))
    clock = " (a stage IP hit its wall-clock safety net)" if costs.clock_cut else ""
    others = "; ".join(f"{n}: {e.step_time / max(s.microbatches, 1) * 1e3:.6g} ms/microbatch"
                       + ("" if e.feasible else " (infeasible)") for n, s, e in found)
    fits = [(e.step_time / max(s.microbatches, 1), n) for n, s, e in grid if e.feasible]
    if grid:
        others += (f"; grid (dp, fsdp, tp, pp) × microbatches: {len(grid)} points, {len(fits)} fit"
                   + (f", best {min(fits)[1]} at {min(fits)[0] * 1e3:.6g} ms/microbatch" if fits else ""))
    elif groups.num_groups > GRID_MAX_GROUPS:
        others += f"; grid (dp, fsdp, tp, pp) not judged: {groups.num_groups} layer groups > {GRID_MAX_GROUPS}"
    how = "best of the SPMD baselines and the sharding IP" if costs.use_ip else "best of the SPMD baselines"
    if refiner is None:
        stages = "chosen stages: group layouts composed (no stage IP)"
    else:
        st = refiner.stats
        cut = (" (a stage IP hit its wall-clock safety net)" if st.clock_cut else "") + (
            f" ({st.skipped} stage(s) left to their baselines: the IPs' time share was spent)" if st.skipped else "")
        stages = (f"chosen stages: group layouts composed, then each sharded stage solved by the stage IP on its "
                  f"submesh (work-limited, cached per range signature × mesh class: {st.solves} solves, {st.hits} "
                  f"hits{cut}), its layout kept only where evaluate says the whole plan is no worse ({st.kept} kept, "
                  f"{st.rejected} not); the kept stages' evaluated times put back into the stage table and the DP "
                  f"re-solved ({st.resolves} re-solve(s), {st.new_plans} new plan(s))")
    per_stage = report_text(reports) if reports else "baselines only (not a stage-DP plan)"
    return (f"stage DP optimal over contiguous ranges of {groups.num_groups} layer groups × submeshes "
            f"{{{', '.join(shapes)}}} × microbatches {{{', '.join(map(str, choices))}}} given its stage costs "
            f"(additive over groups; each group's sharding per mesh: {how}; {costs.stats.solves} solves, "
            f"{statuses}{clock}); {stages}; best under evaluate: {winner} ({ev.step_time * 1e3:.6g} ms per step); "
            f"its stages' sharding: {per_stage}; candidates: {others}")


class Cluster:
    """Whole-cluster throughput planner (registry name ``cluster``)."""

    name = "cluster"
    objectives = frozenset({ObjectiveKind.THROUGHPUT})

    def __init__(self, microbatch_choices: Sequence[int] | None = None, formula: str = "step") -> None:
        self.microbatch_choices = microbatch_choices
        self.formula = formula

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        return plan_cluster(problem, options, microbatch_choices=self.microbatch_choices,
                            formula=self.formula).solution

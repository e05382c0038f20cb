"""The sharding IP (issue 12): the best SPMD layout of a program on each logical mesh, and over all meshes.

:func:`solve_mesh` reduces a mesh's :class:`~planmap.sharding.ShardingTables` (:mod:`.reduce`: followers
merged, exact folds, optionally repeated layers tied), builds the integer program of :mod:`.model`,
solves it with the shared backend layer (:func:`planmap.solvers.mip.solve_model`: backend by name, time
limit, gap, threads, seed, passthrough, warm start, progress), and reads back one strategy per unit.
The answer's layout is checked with :func:`~planmap.sharding.evaluate_spmd`, whose step time is the
objective reported (it equals the MIP's incumbent at an optimum: with every spec fixed each op's
cheapest strategy is what the MIP picks). A warm start (a layout, ``{value id: spec}``) is handed to
the backend when the reductions can express it, and is returned instead of the MIP's answer when
that is not better.

:func:`solve_all` enumerates :func:`~planmap.sharding.logical_meshes` of the problem's devices, builds
their tables under one deadline, orders them by a lower bound (every unit at its cheapest strategy, no
resharding), reduces and solves them lazily in that order, skips a mesh whose bound cannot beat the
incumbent, shares the time left between the others, and returns the best.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from planmap.problem import Problem, SolveOptions, Status, relative_gap
from planmap.sharding import LogicalMesh, ShardingTables, SpmdEvaluation, evaluate_spmd, logical_meshes
from planmap.sharding.solution import tables_cache
from planmap.sharding.specs import Spec, from_assignment
from planmap.sharding.spmd import zero_tables

from .. import mip
from .matrix import choice_of, solve_sparse, sparse_model, start_vector
from .model import build_model, load_start, model_data, read_choice
from .reduce import Reduced, reduce_tables

__all__ = ["MeshAnswer", "SearchAnswer", "solve_mesh", "solve_all", "layout_of", "mesh_lower_bound",
           "problem_meshes", "tables_lower_bound"]

MIN_MESH_TIME = 1.0  # seconds: the least time left for which a mesh (or its full IP after the tied one) is started


@dataclass(frozen=True, eq=False)
class MeshAnswer:
    """The sharding IP's answer on one mesh. Times in seconds per step (× microbatches); ``incumbent``
    and ``bound`` are the MIP's (over the reduced space, ``reductions``); ``objective`` is the
    evaluated step time of ``specs`` (``None`` when no layout was found)."""

    mesh: LogicalMesh
    tables: ShardingTables
    strategies: np.ndarray | None  # (units,) strategy index of every op and argument
    specs: dict[int, Spec] | None  # every value's spec
    evaluation: SpmdEvaluation | None
    objective: float | None
    incumbent: float | None
    bound: float | None
    gap: float | None
    status: Status | None
    origin: str  # "ip" | "warm start" | ""
    rows: int
    columns: int
    build_time: float  # reductions + model (the tables are given)
    solve_time: float
    reductions: tuple[str, ...]
    mip: mip.MipResult | None = None
    notes: tuple[str, ...] = ()

    def certificate_text(self) -> str:
        """One line for a certificate: what the answer is optimal (or bounded) over."""
        words: dict[Status | None, str] = {Status.OPTIMAL: "optimal", Status.GAP_REACHED: "within the gap"}
        word = words.get(self.status, "best found")
        return f"{word} over mesh {self.mesh.shape} × per-op strategies ({'; '.join(self.reductions)})"


@dataclass(frozen=True, eq=False)
class SearchAnswer:
    """The best :class:`MeshAnswer` over the meshes of a problem, and every mesh's result (skipped meshes
    carry ``status`` None and a note)."""

    best: MeshAnswer | None
    meshes: tuple[MeshAnswer, ...]
    skipped: tuple[tuple[str, float], ...] = ()  # (mesh shape, lower bound) of meshes not solved
    wall_time: float = 0.0
    lower_bounds: dict[str, float] = field(default_factory=dict)  # per solved mesh shape: its bound before the IP
    notes: tuple[str, ...] = field(default_factory=tuple)


def layout_of(tables: ShardingTables, strategies: np.ndarray) -> dict[int, Spec]:
    """Every value's spec given one strategy per unit."""
    out: dict[int, Spec] = {}
    for u in range(tables.num_units):
        asg = tables.sets[u].out[int(strategies[u])]
        for v in tables.unit_values(u):
            out[v] = from_assignment(asg, len(tables.shapes[v]))
    return out


def _strategies_of(tables: ShardingTables, specs: dict[int, Spec], ev: SpmdEvaluation | None = None) -> np.ndarray:
    """One strategy per unit reproducing a layout: the evaluator's per-op choice (``ev``: the layout's
    evaluation, when already at hand), the argument's spec."""
    ev = ev if ev is not None else evaluate_spmd(tables, specs)
    out = np.zeros(tables.num_units, np.int64)
    out[: tables.num_ops] = ev.choice
    for pos, a in enumerate(tables.graph.args):
        u = tables.num_ops + pos
        row = tables.spec_row(u, specs[a.value])
        out[u] = int(np.flatnonzero(tables.out_index[u] == row)[0])
    return out


def mesh_lower_bound(red: Reduced) -> float:
    """Seconds per microbatch no layout of ``red`` beats: every group at its cheapest, no resharding."""
    return float(sum(float(c.min()) for c in red.cost)) + float(
        sum(float(mat.min(initial=0.0)) for mat in red.edge_matrix))


def _mesh_options(options: SolveOptions, deadline: float | None) -> SolveOptions:
    """``options`` with the time limit cut to ``deadline`` (a ``time.monotonic()`` instant)."""
    limit = float(options.time_limit)
    if deadline is not None:
        limit = min(limit, max(0.0, deadline - time.monotonic()))
    return SolveOptions(time_limit=max(limit, 1e-3), rel_gap=options.rel_gap, threads=options.threads,
                        seed=options.seed, backend=options.backend, passthrough=dict(options.passthrough),
                        progress=options.progress)


def solve_mesh(tables: ShardingTables, options: SolveOptions, *, warm_start: dict | None = None,
               deadline: float | None = None, reduced: Reduced | None = None,
               merge_followers: bool = True) -> MeshAnswer:
    """The best layout of ``tables`` on its mesh (see the module doc). ``warm_start``: a layout
    ``{value id: spec}`` (e.g. the best baseline's); ``deadline``: a ``time.monotonic()`` instant the
    solve must end by (with ``options.time_limit``, the earlier wins)."""
    t0 = time.perf_counter()
    red = reduced if reduced is not None else reduce_tables(tables, merge_followers=merge_followers)
    data = model_data(red)
    notes: list[str] = []
    start_groups, start_eval = None, None
    if warm_start is not None:
        start_eval = evaluate_spmd(tables, warm_start)
        start_units = _strategies_of(tables, warm_start, start_eval)
        start_groups = red.group_strategies(start_units)
        if start_groups is None:
            notes.append("the warm start breaks a stated reduction; given to the answer, not to the MIP")
    if (options.backend or "highs") == "highs":  # matrices straight into HiGHS: no Pyomo translation
        sm = sparse_model(data)
        build_time = time.perf_counter() - t0
        rows, columns = sm.num_rows, sm.num_cols
        res, col = solve_sparse(sm, _mesh_options(options, deadline),
                                start=None if start_groups is None else start_vector(sm, start_groups))
        group_choice = None if col is None else choice_of(sm, col)
    else:
        model = build_model(red, data=data, name=tables.graph.name)
        if start_groups is not None:
            load_start(model, start_groups)
        build_time = time.perf_counter() - t0
        rows, columns = _count(model, "Constraint"), _count(model, "Var")
        res = mip.solve_model(model, _mesh_options(options, deadline), warm_start=start_groups is not None,
                              scale=model.time_unit)
        group_choice = read_choice(model) if res.has_solution else None
    mb = tables.microbatches
    strategies = specs = ev = None
    origin = ""
    if group_choice is not None:
        strategies = red.unit_strategies(group_choice)
        specs = layout_of(tables, strategies)
        ev = evaluate_spmd(tables, specs)
        origin = "ip"
        if not ev.feasible:
            notes.append(f"the MIP's layout needs {ev.memory:.4g} B of {ev.capacity:.4g} B under evaluate_spmd")
    if warm_start is not None and start_eval is not None and start_eval.feasible and (
            ev is None or not ev.feasible or start_eval.step_time < ev.step_time):
        strategies, specs, ev, origin = start_units, dict(warm_start), start_eval, "warm start"
    status, bound, gap = res.status, None if res.bound is None else res.bound * mb, res.gap
    if status == Status.INFEASIBLE and origin:
        status, bound, gap = Status.HEURISTIC, None, None
        notes.append("the backend called the model infeasible though the warm start fits; unproven")
    objective = ev.step_time if ev is not None else None
    if bound is not None and objective is not None:
        gap = relative_gap(objective, bound)
    return MeshAnswer(mesh=tables.mesh, tables=tables, strategies=strategies, specs=specs, evaluation=ev,
                      objective=objective, incumbent=None if res.incumbent is None else res.incumbent * mb,
                      bound=bound, gap=gap, status=status, origin=origin, rows=rows, columns=columns,
                      build_time=build_time, solve_time=res.solve_time + res.translate_time,
                      reductions=red.notes, mip=res, notes=tuple(notes))


def _count(model, kind: str) -> int:
    import pyomo.environ as pyo

    comp = pyo.Constraint if kind == "Constraint" else pyo.Var
    return sum(1 for _ in model.component_data_objects(comp, active=True))


def problem_meshes(problem: Problem) -> list[LogicalMesh]:
    """Logical meshes of the problem's devices: per device type among the accelerators, the meshes of
    that type's devices (all devices when there are no accelerators)."""
    topo = problem.topology
    acc = np.asarray(topo.accelerators)
    if len(acc) == 0:
        return logical_meshes(topo, np.arange(topo.num_devices))
    out: list[LogicalMesh] = []
    for t in sorted({int(x) for x in topo.device_type[acc]}):
        out += logical_meshes(topo, acc[topo.device_type[acc] == t])
    return out


def tables_lower_bound(tables: ShardingTables) -> float:
    """Seconds per microbatch no layout on ``tables.mesh`` beats, from the tables alone (every unit at its
    cheapest strategy, no resharding): cheap enough to order meshes before any is reduced."""
    return float(sum(float(c.min()) + float(m.min()) for c, m in zip(tables.compute, tables.comm, strict=True)))


def solve_all(problem: Problem, options: SolveOptions, *, warm_starts: dict[tuple, dict] | None = None,
              meshes: list[LogicalMesh] | None = None, merge_followers: bool = True,
              deadline: float | None = None, tie_layers: bool = True, zero: int = 0) -> SearchAnswer:
    """Solve the meshes of ``problem`` within ``options.time_limit`` (and ``deadline``, a ``time.monotonic()``
    instant) overall, everything included: each mesh's tables are built (or taken from the problem's
    cache) under the deadline, meshes are ordered by :func:`tables_lower_bound`, and each is then reduced
    and solved in turn with a fair share of the time left, skipping those whose bound cannot beat the
    incumbent. Meshes the deadline leaves out are reported in ``skipped`` with their bound (0 when not
    even their tables were built). ``warm_starts``: a layout per ``mesh.key``; ``tie_layers``: see
    :func:`_solve_tied_then_free`; ``zero``: the ZeRO stage the memory rows assume (:func:`zero_tables`)."""
    t0 = time.perf_counter()
    end = time.monotonic() + float(options.time_limit)
    end = min(end, deadline) if deadline is not None else end
    cache = tables_cache(problem)
    todo = list(meshes if meshes is not None else problem_meshes(problem))
    cands: list[tuple[float, int, ShardingTables]] = []
    skipped: list[tuple[str, float]] = []
    for mesh in todo:
        if (cands or warm_starts) and time.monotonic() >= end:
            skipped.append((mesh.shape, 0.0))
            continue
        tables = zero_tables(cache.get(mesh), zero)
        cands.append((tables_lower_bound(tables) * tables.microbatches, len(cands), tables))
    cands.sort(key=lambda c: (c[0], c[1]))
    best: MeshAnswer | None = None
    done: list[MeshAnswer] = []
    lbs: dict[str, float] = {}
    reduce_time = 0.0  # the last mesh's: a mesh is started only when its reduction fits the time left
    for left, (lb, _, tables) in zip(range(len(cands), 0, -1), cands, strict=True):
        started = bool(done or warm_starts)  # with no answer at all yet, the first mesh is solved regardless
        if _beaten(best, lb, options) or (started and end - time.monotonic() < MIN_MESH_TIME + reduce_time):
            skipped.append((tables.mesh.shape, lb))
            continue
        t_red = time.monotonic()
        red = reduce_tables(tables, merge_followers=merge_followers)
        reduce_time = time.monotonic() - t_red
        lb = max(lb, mesh_lower_bound(red) * tables.microbatches)
        if _beaten(best, lb, options):
            skipped.append((tables.mesh.shape, lb))
            continue
        share = max(MIN_MESH_TIME, (end - time.monotonic()) / left)
        warm = (warm_starts or {}).get(tables.mesh.key)
        lbs[tables.mesh.shape] = lb
        ans = _solve_tied_then_free(tables, red, options, warm, min(end, time.monotonic() + share),
                                    merge_followers=merge_followers, tie_layers=tie_layers)
        done.append(ans)
        if ans.objective is not None and ans.evaluation is not None and ans.evaluation.feasible and (
                best is None or best.objective is None or ans.objective < best.objective):
            best = ans
    return SearchAnswer(best, tuple(done), tuple(skipped), time.perf_counter() - t0, lower_bounds=lbs)


def _beaten(best: MeshAnswer | None, lb: float, options: SolveOptions) -> bool:
    """Whether a mesh whose step time is at least ``lb`` cannot beat ``best`` by more than the gap."""
    return best is not None and best.objective is not None and lb >= best.objective * (1 - options.rel_gap)


def _solve_tied_then_free(tables: ShardingTables, red: Reduced, options: SolveOptions, warm: dict | None,
                          deadline: float, *, merge_followers: bool, tie_layers: bool) -> MeshAnswer:
    """One mesh by ``deadline``: where the graph has repeated layers (and ``tie_layers``), first the IP with
    them tied (small: one layer's columns) for half the time, then the full IP warm-started from that
    answer. The full IP's bound is the certificate's; the tied proof, when the full one is not reached,
    is stated with the reductions."""
    t0 = time.monotonic()
    tied = reduce_tables(tables, merge_followers=merge_followers, tie_layers=True) if tie_layers else None
    if tied is None or tied.num_groups == red.num_groups:
        return solve_mesh(tables, options, warm_start=warm, deadline=deadline, reduced=red)
    first = solve_mesh(tables, options, warm_start=warm, reduced=tied,
                       deadline=time.monotonic() + (deadline - time.monotonic()) / 2)
    if deadline - time.monotonic() < MIN_MESH_TIME + (time.monotonic() - t0) / 2:
        return first  # no time left for the full IP (about as dear to set up as the tied one): the tied answer stands
    usable = first.specs is not None and first.evaluation is not None and first.evaluation.feasible
    start = first.specs if usable else warm
    ans = solve_mesh(tables, options, warm_start=start, deadline=deadline, reduced=red)
    if (ans.status in (Status.OPTIMAL, Status.GAP_REACHED) or first.status not in (Status.OPTIMAL, Status.GAP_REACHED)
            or first.objective is None):
        return ans
    return replace(ans, reductions=(*ans.reductions, f"first {first.certificate_text()}: "
                                    f"{first.objective * 1e3 / tables.microbatches:.6g} ms per microbatch"))

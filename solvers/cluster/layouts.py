"""The sharding of one pipeline stage on one logical mesh: baselines, then the sharding IP, deterministically.

:func:`solve_stage` lays out a stage's :class:`~planmap.sharding.ShardingTables` (from
:func:`planmap.sharding.stage.stage_tables`) on its mesh: the data-parallel, FSDP and Megatron layouts
of :mod:`planmap.solvers.sharding.baselines` (on a one-device mesh: the replicated layout), then
:func:`planmap.solvers.sharding.ip.solve_mesh` warm-started from the best of them. The IP is bounded
by a *work* limit (HiGHS ``mip_max_nodes`` and ``mip_max_improving_sols``), so the same stage gives
the same layout on every run; the wall-clock limit is only a safety net, and an answer it cut short
says so (``cut_by_clock``) so that the certificate can state it. Without the IP module (no ``highspy``)
the best baseline stands, unproven.

:func:`compose_layout` makes the layout of a stage of several layer groups from the groups' own
layouts (the stage IP then refines it on the whole plan: :mod:`.refine`).
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field, replace

from planmap.problem import SolveOptions, Status
from planmap.sharding import ShardingTables, SpmdEvaluation, evaluate_spmd, propagate
from planmap.sharding.stage import stage_map
from planmap.solvers.sharding.baselines import (
    _data_specs,
    _replicated_closure,
    fsdp_overrides,
    gradient_layouts,
    megatron_overrides,
)

__all__ = ["StageLayout", "solve_stage", "WORK_LIMITS", "baseline_layouts", "compose_layout"]

# HiGHS work limits of one stage's IP: deterministic (the same nodes and iterations on every run)
WORK_LIMITS = {"mip_max_nodes": 200, "mip_max_improving_sols": 50}
SAFETY_SECONDS = 30.0  # wall clock per stage IP, a net only: hitting it is reported


@dataclass(frozen=True, eq=False)
class StageLayout:
    """A layout of a stage on a mesh and what it costs. ``origin``: the baseline's name or "ip";
    ``status``: the IP's (OPTIMAL / GAP_REACHED / TIME_LIMIT) or HEURISTIC for a baseline that no IP
    bounded; ``gap``: the IP's proven relative gap (None when none)."""

    tables: ShardingTables
    specs: dict
    evaluation: SpmdEvaluation
    origin: str
    status: Status
    gap: float | None = None
    cut_by_clock: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def time(self) -> float:
        """Seconds per microbatch."""
        return self.evaluation.microbatch_time

    @property
    def stash(self) -> float:
        """Bytes per device per microbatch in flight (activations kept for the backward pass)."""
        return float(self.evaluation.memory_parts["stash"])

    @property
    def base(self) -> float:
        """Bytes per device that do not grow with the microbatches in flight."""
        return float(self.evaluation.memory) - self.stash


def baseline_layouts(tables: ShardingTables) -> list[tuple[str, dict]]:
    """The SPMD baselines' complete layouts on ``tables.mesh`` (a one-device mesh: replicated only)."""
    mesh = tables.mesh
    if mesh.num_devices == 1:
        return [("single", propagate(tables, {}))]
    out: list[tuple[str, dict]] = []
    data = _data_specs(tables, 0)
    if data:
        out.append(("data-parallel", propagate(tables, _replicated_closure(tables, gradient_layouts(tables, data)))))
        fsdp = fsdp_overrides(tables, data)
        out.append(("fsdp", propagate(tables, _replicated_closure(tables, gradient_layouts(tables, fsdp)))))
    if mesh.scope[-1] == "intra":
        tensor = mesh.num_axes - 1
        data_axis = 0 if mesh.num_axes == 2 else None
        out.append(("megatron", propagate(tables, megatron_overrides(tables, tensor, data_axis))))
    if not out:
        out.append(("replicated", propagate(tables, {})))
    return out


def _ip_available() -> bool:
    return importlib.util.find_spec("highspy") is not None and importlib.util.find_spec(
        "planmap.solvers.sharding.ip") is not None


def solve_stage(tables: ShardingTables, options: SolveOptions, *, use_ip: bool = False) -> list[StageLayout]:
    """The fastest layout of the stage and, when another needs less memory, the leanest one (the DP
    picks by memory under the schedule's in-flight microbatches): baselines, then the IP (see the
    module doc). Infeasible layouts (over the capacity with one microbatch in flight) are kept only
    when nothing fits."""
    found: list[StageLayout] = []
    for name, specs in baseline_layouts(tables):
        ev = evaluate_spmd(tables, specs)
        found.append(StageLayout(tables, specs, ev, name, Status.HEURISTIC))
    found.sort(key=lambda x: (not x.evaluation.feasible, x.time))
    if use_ip and tables.mesh.num_devices > 1 and _ip_available():
        found.append(_ip_layout(tables, options, found[0]))
    fits = [x for x in found if x.evaluation.feasible] or found
    fastest = min(fits, key=lambda x: (x.time, x.evaluation.memory))
    if fastest.origin != "ip" and any(x.origin == "ip" for x in found):  # the IP's bound covers the baselines
        ip = next(x for x in found if x.origin == "ip")
        fastest = replace(fastest, status=ip.status, gap=ip.gap, cut_by_clock=ip.cut_by_clock)
    leanest = min(fits, key=lambda x: (x.evaluation.memory, x.time))
    return [fastest] if leanest is fastest or leanest.evaluation.memory >= fastest.evaluation.memory else [
        fastest, leanest]


def _ip_layout(tables: ShardingTables, options: SolveOptions, start: StageLayout, *,
               tie_layers: bool = False) -> StageLayout:
    from planmap.solvers.sharding.ip import solve_mesh
    from planmap.solvers.sharding.reduce import reduce_tables

    passthrough = {**WORK_LIMITS, **dict(options.passthrough)}
    opts = SolveOptions(time_limit=SAFETY_SECONDS, rel_gap=options.rel_gap, threads=1, seed=options.seed,
                        backend="highs", passthrough=passthrough)
    t0 = time.monotonic()
    reduced = reduce_tables(tables, tie_layers=True) if tie_layers else None
    ans = solve_mesh(tables, opts, warm_start=start.specs, reduced=reduced)
    cut = time.monotonic() - t0 >= SAFETY_SECONDS * 0.99
    if ans.specs is None or ans.evaluation is None:
        return replace(start, notes=("the stage IP found no layout",))
    status = ans.status if ans.status in (Status.OPTIMAL, Status.GAP_REACHED) else Status.TIME_LIMIT
    return StageLayout(tables, ans.specs, ans.evaluation, "ip" if ans.origin == "ip" else start.origin, status,
                       gap=ans.gap, cut_by_clock=cut, notes=(*ans.reductions, *ans.notes))


def compose_layout(tables: ShardingTables, parts: list[StageLayout]) -> StageLayout:
    """The layout of a stage of several layer groups on ``tables`` (the whole range's tables) made of each
    group's own layout (``parts``, on meshes of the same shape): every op result and argument takes the
    spec its group gave it (a value a group received from another group of the range keeps its
    producer's), the rest follows by propagation; costed by :func:`~planmap.sharding.evaluate_spmd`
    (reshards between the groups included)."""
    smap = stage_map(tables.graph)
    over: dict[int, tuple] = {}
    if smap is None:
        raise ValueError("compose_layout needs stage tables (planmap.sharding.stage.stage_tables)")
    received = set(smap.received.tolist())
    for part in parts:
        pmap = stage_map(part.tables.graph)
        if pmap is None:
            raise ValueError("compose_layout needs stage tables for every part")
        got = set(pmap.received.tolist())
        for v, spec in part.specs.items():
            w = smap.value_of(int(pmap.values[v]))
            if w is None or w in over:
                continue
            if v in got and w not in received:  # produced inside the range: its producer's spec governs
                continue
            over[w] = spec
    specs = propagate(tables, over)
    ev = evaluate_spmd(tables, specs)
    worst = Status.HEURISTIC if any(p.status is Status.HEURISTIC for p in parts) else max(
        (p.status for p in parts), key=lambda x: [Status.OPTIMAL, Status.GAP_REACHED, Status.TIME_LIMIT].index(x))
    return StageLayout(tables, specs, ev, "+".join(sorted({p.origin for p in parts})), worst,
                       gap=max((p.gap or 0.0 for p in parts), default=None),
                       cut_by_clock=any(p.cut_by_clock for p in parts))

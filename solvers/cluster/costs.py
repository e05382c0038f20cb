"""Stage costs for the stage DP: per (layer range, submesh), seconds per microbatch and memory.

A candidate stage is layer groups ``[i, j)`` on a submesh. Its sharding is solved on every logical mesh
of the submesh (:func:`~.layouts.solve_stage` on :func:`planmap.sharding.stage.stage_tables`) and the
best mesh that fits the memory kept. Solving every range would be O(L²) sharding problems per mesh;
instead costs are built from *group* solves, cached by the group's signature and the mesh's *class*
(axis sizes, device type, link costs, capacity — the same for every submesh of one shape on a
homogeneous cluster), so a transformer of L identical layers costs a handful of solves:

* time of a range = the sum of its groups' times (each group's best layout on the mesh) + the transfers
  across the stage boundary (bytes produced outside the range and read inside, and the reverse, per
  device over the link to the neighbouring submesh in device order, paid by both ends as the pipeline
  evaluator charges them);
* memory of a range = the sum of its groups' parameter, data and stash bytes + the largest working set.

This *additive* model ignores reshards between the layouts of two groups in one stage (none when they
agree, as for repeated layers); the solver re-solves the stages it picks on their whole range and
judges the plan with :func:`planmap.evaluate.evaluate`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planmap.problem import Problem, SolveOptions, Status
from planmap.sharding import LogicalMesh
from planmap.sharding.stage import stage_tables
from planmap.vocabulary import Mode, Schedule

from .layouts import StageLayout, solve_stage
from .space import LayerGroups, Submesh, stage_meshes

__all__ = ["GroupCost", "CostStats", "StageCosts", "boundary_bytes", "inflight_rows"]


@dataclass(frozen=True)
class GroupCost:
    """One group's best layout on one mesh class: seconds per microbatch, bytes per device (``base``:
    parameters + data; ``stash`` per microbatch in flight; ``working`` the peak working set)."""

    time: float
    base: float
    stash: float
    working: float
    status: Status
    gap: float | None
    cut_by_clock: bool


@dataclass
class CostStats:
    """What building the table took: sharding solves, cache hits, seconds."""

    solves: int = 0
    hits: int = 0
    tables_time: float = 0.0
    solve_time: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


def mesh_class(problem: Problem, mesh: LogicalMesh) -> tuple:
    """What a mesh's costs depend on besides the ops: sizes, device type, link costs, capacity."""
    topo = problem.topology
    d = mesh.devices
    return (mesh.axis_sizes, int(topo.device_type[d[0]]), mesh.latency, mesh.inv_bw, mesh.scope,
            float(problem.capacity[d].min()))


def boundary_bytes(problem: Problem, groups: LayerGroups) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) (G+1, G+1): bytes a stage of groups [i, j) exchanges per microbatch with the groups
    before ``i`` and with those from ``j`` on (received and sent, each value once per direction)."""
    g = problem.graph
    G = groups.num_groups
    ng = groups.node_group.astype(np.int64)
    prod = np.where(g.value_node >= 0, ng[np.maximum(g.value_node, 0)], -1)
    before = np.zeros((G + 1, G + 1))
    after = np.zeros((G + 1, G + 1))
    cons: dict[int, set[int]] = {}
    for v, d in zip(g.edge_value.tolist(), g.edge_dst.tolist(), strict=True):
        if prod[v] >= 0 and ng[d] != prod[v]:
            cons.setdefault(v, set()).add(int(ng[d]))
    ii, jj = np.meshgrid(np.arange(G + 1), np.arange(G + 1), indexing="ij")
    valid = ii < jj
    for v, cs in cons.items():
        p, b = int(prod[v]), float(g.value_bytes[v])
        inside_p = (ii <= p) & (p < jj)
        c = np.asarray(sorted(cs))
        # a consumer inside [i, j): some c with i <= c < j
        pos_lo = np.searchsorted(c, ii)
        has_in = (pos_lo < len(c)) & (c[np.minimum(pos_lo, len(c) - 1)] < jj)
        has_before = c.min() < ii
        has_after = c.max() >= jj
        recv = valid & ~inside_p & has_in
        before += np.where(recv & (p < ii), b, 0.0)
        after += np.where(recv & (p >= jj), b, 0.0)
        before += np.where(valid & inside_p & has_before, b, 0.0)
        after += np.where(valid & inside_p & has_after, b, 0.0)
    return before, after


def inflight_rows(problem: Problem, microbatches: int) -> list[int]:
    """Microbatches in flight for each row of the DP's time table: under 1F1B training row r is a stage
    with r stages after it (``min(M, r + 1)``); GPipe training one row of M; inference one row of 1."""
    m = max(int(microbatches), 1)
    if problem.mode is not Mode.TRAINING:
        return [1]
    if problem.schedule is Schedule.ONE_F_ONE_B:
        return list(range(1, m + 1))
    return [m]


class StageCosts:
    """Group costs per mesh class, and the DP's time table built from them (see the module doc)."""

    def __init__(self, problem: Problem, groups: LayerGroups, options: SolveOptions, *, use_ip: bool = False) -> None:
        self.problem, self.groups, self.options = problem, groups, options
        self.use_ip = use_ip
        self.stats = CostStats()
        self._group: dict[tuple, list[GroupCost]] = {}
        self._layouts: dict[tuple, list[StageLayout]] = {}
        self.before, self.after = boundary_bytes(problem, groups)

    def group_costs(self, g: int, mesh: LogicalMesh) -> list[GroupCost]:
        """Group ``g``'s layouts on ``mesh`` (the fastest, and the leanest when it differs), cached by
        (signature, mesh class)."""
        key = (self.groups.signature[g], mesh_class(self.problem, mesh))
        hit = self._group.get(key)
        if hit is not None:
            self.stats.hits += 1
            return hit
        t0 = time.perf_counter()
        tables = stage_tables(self.problem, self.groups.ops[g], mesh)
        t1 = time.perf_counter()
        layouts = solve_stage(tables, self.options, use_ip=self.use_ip)
        self.stats.tables_time += t1 - t0
        self.stats.solve_time += time.perf_counter() - t1
        self.stats.solves += 1
        out = []
        for lay in layouts:
            parts = lay.evaluation.memory_parts
            out.append(GroupCost(lay.time, float(parts["params"] + parts["data"]), float(parts["stash"]),
                                 float(parts["working"]), lay.status, lay.gap, lay.cut_by_clock))
            self.stats.statuses[str(lay.status)] = self.stats.statuses.get(str(lay.status), 0) + 1
        self._group[key] = out
        self._layouts[key] = layouts
        return out

    def group_layout(self, g: int, mesh: LogicalMesh, variant: int) -> StageLayout:
        """Group ``g``'s layout on a mesh of ``mesh``'s class: variant 0 the fastest, 1 the leanest."""
        self.group_costs(g, mesh)
        lays = self._layouts[(self.groups.signature[g], mesh_class(self.problem, mesh))]
        return lays[min(variant, len(lays) - 1)]

    @property
    def clock_cut(self) -> bool:
        """Whether a group's IP stopped at its wall-clock safety net (the answer may vary between runs)."""
        return any(c.cut_by_clock for cs in self._group.values() for c in cs)

    def table(self, order: np.ndarray, subs: list[Submesh], microbatches: int,
              max_axes: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """(time, choice) (R, G+1, G+1, S): seconds per microbatch of groups [i, j) on ``subs[s]`` under row
        r's in-flight microbatches (:func:`inflight_rows`), inf where no mesh fits; and the choice that
        achieves it, ``2 × mesh index + variant`` (the mesh among :func:`~.space.stage_meshes` of the
        submesh; variant 0: every group's fastest layout, 1: every group's leanest)."""
        G, S = self.groups.num_groups, len(subs)
        rows = inflight_rows(self.problem, microbatches)
        R = len(rows)
        best_t = np.full((R, G + 1, G + 1, S), np.inf)
        best_m = np.full((R, G + 1, G + 1, S), -1, np.int64)
        link = self.links(order, subs)
        for s, sub in enumerate(subs):
            cap = float(self.problem.capacity[list(sub.devices)].min())
            for mi, mesh in enumerate(stage_meshes(self.problem, sub, max_axes)):
                per = [self.group_costs(g, mesh) for g in range(G)]
                fastest, leanest = [p[0] for p in per], [p[-1] for p in per]
                for variant, chosen in enumerate([fastest] if leanest == fastest else [fastest, leanest]):
                    self._fill(best_t, best_m, s, 2 * mi + variant, chosen, rows, cap, link[s], sub.size)
        return best_t, best_m

    def _fill(self, best_t, best_m, s: int, mi: int, chosen: list[GroupCost], rows: list[int], cap: float,
              link: tuple[float, float], size: int) -> None:
        G = len(chosen)
        t = np.concatenate([[0.0], np.cumsum([c.time for c in chosen])])
        base = np.concatenate([[0.0], np.cumsum([c.base for c in chosen])])
        stash = np.concatenate([[0.0], np.cumsum([c.stash for c in chosen])])
        work = np.array([c.working for c in chosen])
        ii, jj = np.meshgrid(np.arange(G + 1), np.arange(G + 1), indexing="ij")
        valid = ii < jj
        span_t = np.where(valid, t[jj] - t[ii], np.inf)
        peak = np.zeros((G + 1, G + 1))
        for i in range(G):
            peak[i, i + 1:] = np.maximum.accumulate(work[i:])
        span_t = span_t + self.boundary_time(link, size)
        for r, f in enumerate(rows):
            mem = base[jj] - base[ii] + f * (stash[jj] - stash[ii]) + peak
            tt = np.where(valid & (mem <= cap * (1 + 1e-12)), span_t, np.inf)
            better = tt < best_t[r, :, :, s]
            best_t[r, :, :, s] = np.where(better, tt, best_t[r, :, :, s])
            best_m[r, :, :, s] = np.where(better, mi, best_m[r, :, :, s])

    def boundary_time(self, link: tuple[float, float], size: int) -> np.ndarray:
        """(G+1, G+1) seconds per microbatch a stage of groups [i, j) on ``size`` devices spends receiving and
        sending its boundary bytes over ``link`` (seconds per byte before and after, :meth:`links`)."""
        ibw_before, ibw_after = link  # the stage receives and sends its boundary bytes, sharded over its devices
        return (self.before * ibw_before + self.after * ibw_after) / size

    def links(self, order: np.ndarray, subs: list[Submesh]) -> list[tuple[float, float]]:
        """Seconds per byte to the neighbour before and after each submesh in device order (the slowest
        path between the adjacent devices; the slowest in the order at either end)."""
        topo = self.problem.topology
        ibw = topo.path_ibw
        worst = float(ibw[np.ix_(order, order)].max()) if len(order) > 1 else 0.0
        out = []
        for sub in subs:
            a, b = sub.offset, sub.offset + sub.size
            prev = float(ibw[order[a - 1], order[a]]) if a > 0 else worst
            nxt = float(ibw[order[b - 1], order[b]]) if b < len(order) else worst
            out.append((prev, nxt))
        return out

"""The decision space of whole-cluster plans: layer groups × submeshes × logical meshes, and the Solution.

A whole-cluster plan (issue 13, the shared contract) is a pipeline of stages, each a contiguous range
of *layer groups* on its own *submesh*, sharded SPMD over a *logical mesh* of that submesh. This module
names the pieces so that every planner over this space (the stage DP of :mod:`.dp`, the DQN agent)
builds the same kind of plan:

* :func:`layer_groups`: contiguous groups of the problem's (coarsened) graph in pipeline order, one per
  run of nodes of the same front-end layer (``graph.layer``); in training a layer's backward nodes go
  with its forward ones (through the pipeline *units* of :mod:`planmap.solvers.pipeline.stage_units`,
  which pair them by colocation class). Each group carries its original op ids and a *signature*
  (identical repeated layers share one, so their costs are computed once).
* :func:`device_order` and :func:`submeshes`: the devices in (host, index) order and the device ranges a
  stage may take, Alpa-style — inside one host 1, 2, 4, … devices (never straddling a host), or whole
  hosts across the network — always of one device type (heterogeneous clusters: per type).
* :func:`stage_meshes`: the logical meshes (1–2 axes, host hierarchy respected) of a submesh.
* :func:`build_solution`: a :class:`~planmap.problem.Solution` in the contract's form from the chosen
  ranges, submeshes and per-stage shardings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from planmap.problem import Certificate, Problem, Solution, Stage
from planmap.sharding import LogicalMesh, ShardingTables, logical_meshes, propagate
from planmap.sharding.solution import spmd_solution
from planmap.sharding.stage import stage_tables
from planmap.sharding.stage_layout import stages_solution
from planmap.solvers.pipeline.stage_units import build_units

__all__ = ["LayerGroups", "Submesh", "StagePlan", "layer_groups", "device_order", "submeshes", "stage_meshes",
           "build_solution", "MAX_GROUPS"]

MAX_GROUPS = 64  # more runs than this are merged into neighbours (the DP is quadratic in groups)


@dataclass(frozen=True, eq=False)
class LayerGroups:
    """Contiguous groups of ``problem.graph`` in pipeline order.

    ``node_group`` (n,) the group of each node; ``ops[g]`` the sorted original op ids of group ``g``
    (``problem.original``); ``signature[g]`` equal for groups with identical ops (kinds, result types,
    dimension maps, in order): the repeated layers of a transformer; ``names[g]`` a label for people.
    """

    node_group: np.ndarray
    ops: tuple[np.ndarray, ...]
    signature: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def num_groups(self) -> int:
        return len(self.ops)

    def range_ops(self, i: int, j: int) -> np.ndarray:
        """Sorted original op ids of groups ``i .. j-1``."""
        return np.sort(np.concatenate(self.ops[i:j])) if j > i else np.zeros(0, np.int64)

    def range_signature(self, i: int, j: int) -> tuple[str, ...]:
        """The signatures of groups ``i .. j-1``: ranges with equal tuples cost the same on equal meshes."""
        return self.signature[i:j]


def _unit_labels(problem: Problem, unit_of: np.ndarray, num_units: int, contig: np.ndarray) -> np.ndarray:
    """The front-end layer of each unit: that of its contiguity nodes (forward in training), -1 if none."""
    layer = problem.graph.layer.astype(np.int64)
    label = np.full(num_units, -1, np.int64)
    nodes = np.flatnonzero(contig & (layer >= 0))
    # the most common layer id among a unit's forward nodes (lowest on ties): deterministic
    for u in np.unique(unit_of[nodes]).tolist():
        ids, counts = np.unique(layer[nodes[unit_of[nodes] == u]], return_counts=True)
        label[u] = int(ids[np.argmax(counts)])
    return label


def _runs(label: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs [a, b) of equal labels."""
    if not len(label):
        return []
    cut = np.flatnonzero(label[1:] != label[:-1]) + 1
    bounds = [0, *cut.tolist(), len(label)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _merge_runs(runs: list[tuple[int, int]], weight: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Merge adjacent runs (the pair of least combined weight first) until at most ``limit`` remain."""
    runs = list(runs)
    while len(runs) > limit:
        w = [float(weight[a:b].sum()) for a, b in runs]
        k = min(range(len(runs) - 1), key=lambda x: (w[x] + w[x + 1], x))
        runs[k: k + 2] = [(runs[k][0], runs[k + 1][1])]
    return runs


def _merge_empty(problem: Problem, unit_of: np.ndarray, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs whose ops a stage would not run (only recomputed constants, which the stages reading them
    rebuild: :func:`planmap.sharding.stage.stage_ops`) merged into the next run (the last into the one
    before): a stage of them alone would be empty."""
    from planmap.frontend.recompute import recomputed_nodes

    g, original = problem.graph, problem.original
    recomputed = recomputed_nodes(original)
    real = []
    for a, b in runs:
        nodes = np.flatnonzero((unit_of >= a) & (unit_of < b))
        ops = np.concatenate([g.members_of(int(i)) for i in nodes]) if len(nodes) else np.zeros(0, np.int64)
        real.append(bool(len(ops)) and not bool(recomputed[ops].all()))
    out: list[tuple[int, int]] = []
    carry = None
    for (a, b), ok in zip(runs, real, strict=True):
        start = a if carry is None else carry
        if ok:
            out.append((start, b))
            carry = None
        else:
            carry = start
    if carry is not None:
        if out:
            out[-1] = (out[-1][0], runs[-1][1])
        else:
            out.append((carry, runs[-1][1]))
    return out


def _signature(problem: Problem, ops: np.ndarray) -> str:
    """A digest of a group's original ops in order (kind, result types, dimension map)."""
    g = problem.original
    outs = g.outputs
    maps = g.dim_maps
    h = hashlib.sha256()
    for i in ops.tolist():
        h.update(g.kind[i].encode())
        h.update(repr(outs[i] if outs is not None else g.out_bytes[i]).encode())
        h.update(repr(maps[i] if maps is not None else None).encode())
    return h.hexdigest()[:16]


def layer_groups(problem: Problem, max_groups: int = MAX_GROUPS) -> LayerGroups:
    """The layer groups of ``problem`` (see the module doc). Nodes without a layer id (embedding, head,
    loss) form groups of their own between the layers; more than ``max_groups`` runs are merged, the
    lightest adjacent pair first (by forward compute on the fastest device)."""
    units = build_units(problem)
    label = _unit_labels(problem, units.unit_of, units.num_units, units.contig)
    weight = np.zeros(units.num_units)
    np.add.at(weight, units.unit_of, problem.cost.compute.min(axis=1))
    runs = _merge_runs(_runs(label), weight, max_groups)
    runs = _merge_empty(problem, units.unit_of, runs)
    unit_group = np.zeros(units.num_units, np.int64)
    for k, (a, b) in enumerate(runs):
        unit_group[a:b] = k
    node_group = unit_group[units.unit_of].astype(np.int32)
    g = problem.graph
    ops, sigs, names = [], [], []
    for k in range(len(runs)):
        nodes = np.flatnonzero(node_group == k)
        members = np.sort(np.concatenate([g.members_of(int(i)) for i in nodes])) if len(nodes) else np.zeros(0)
        ops.append(members.astype(np.int64))
        sigs.append(_signature(problem, ops[-1]))
        labels = sorted({int(x) for x in label[runs[k][0]: runs[k][1]]})
        names.append("/".join("other" if x < 0 else f"layer{x}" for x in labels))
    node_group.setflags(write=False)
    return LayerGroups(node_group, tuple(ops), tuple(sigs), tuple(names))


# ------------------------------------------------------------------------------------- devices
def device_order(problem: Problem, *, reverse_hosts: bool = False) -> np.ndarray:
    """The devices a stage may use (the accelerators, or every device of a CPU-only cluster) sorted by
    (host, index); ``reverse_hosts`` puts the last host first (on a heterogeneous cluster the first
    stages then run on the other device type)."""
    topo = problem.topology
    pool = topo.accelerators if len(topo.accelerators) else np.arange(topo.num_devices)
    usable = np.asarray(problem.allowed.any(axis=0), bool)
    devs = [int(d) for d in pool.tolist() if usable[int(d)]]
    host = topo.device_host
    key = (lambda d: (-int(host[d]), d)) if reverse_hosts else (lambda d: (int(host[d]), d))
    return np.asarray(sorted(devs, key=key), np.int64)


@dataclass(frozen=True)
class Submesh:
    """A stage's devices: ``order[offset : offset + size]`` of a :func:`device_order`."""

    offset: int
    size: int
    devices: tuple[int, ...]
    hosts: int  # hosts it spans (1 for a submesh inside one host)

    @property
    def shape(self) -> str:
        """Alpa's notation: ``hosts×devices per host``."""
        return f"{self.hosts}x{self.size // self.hosts}"


def _host_blocks(problem: Problem, order: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each host's run in ``order``."""
    host = problem.topology.device_host[order]
    return _runs(np.asarray(host))


def submeshes(problem: Problem, order: np.ndarray) -> list[Submesh]:
    """Every submesh a stage may take in ``order``: inside a host, ``2**k`` consecutive devices (and the
    whole host) that do not straddle it; across hosts, runs of whole consecutive hosts of equal size.
    Every submesh is of one device type. Sorted by (offset, size)."""
    topo = problem.topology
    dtype = topo.device_type[order]
    blocks = _host_blocks(problem, order)
    out: dict[tuple[int, int], Submesh] = {}
    for a, b in blocks:
        d = b - a
        sizes = sorted({1 << k for k in range(d.bit_length()) if 1 << k <= d} | {d})
        for s in sizes:
            for o in range(a, b - s + 1):
                if len(set(dtype[o:o + s].tolist())) == 1:
                    out[(o, s)] = Submesh(o, s, tuple(int(x) for x in order[o:o + s]), 1)
    for k, (a, _) in enumerate(blocks):
        end = a
        for h in range(k, len(blocks)):
            s0, e0 = blocks[h]
            if e0 - s0 != blocks[k][1] - blocks[k][0] or len(set(dtype[a:e0].tolist())) != 1:
                break
            end = e0
            if h > k:
                out[(a, end - a)] = Submesh(a, end - a, tuple(int(x) for x in order[a:end]), h - k + 1)
    return [out[key] for key in sorted(out)]


def stage_meshes(problem: Problem, sub: Submesh, max_axes: int = 2) -> list[LogicalMesh]:
    """The logical meshes of a submesh (1 to ``max_axes`` axes, inner axes inside a host); one device:
    the trivial mesh (axis of size 1)."""
    meshes = logical_meshes(problem.topology, np.asarray(sub.devices))
    return [m for m in meshes if m.num_axes <= max_axes]


# ------------------------------------------------------------------------------------ solution
@dataclass(frozen=True, eq=False)
class StagePlan:
    """One stage of a plan: layer groups ``[start, stop)`` on ``devices``; a sharded stage also has its
    stage tables (:func:`planmap.sharding.stage.stage_tables` of the range's ops on the stage's mesh,
    whose devices are the stage's in row-major order) and a complete layout ``{sub value id: spec}``."""

    start: int
    stop: int
    devices: tuple[int, ...]
    tables: ShardingTables | None = None
    specs: dict | None = None


def build_solution(problem: Problem, groups: LayerGroups, stages: Sequence[StagePlan], certificate: Certificate,
                   *, microbatches: int, schedule: str | None = None) -> Solution:
    """The :class:`~planmap.problem.Solution` of a whole-cluster plan (the shared contract's form).

    Stages must cover the groups ``0 .. G-1`` in order with contiguous ranges. One sharded stage:
    today's SPMD form (:func:`~planmap.sharding.solution.spmd_solution`). Several stages, some sharded:
    :func:`~planmap.sharding.stage_layout.stages_solution` (one Shardings dict in the owners' axis names).
    No stage sharded: a pipeline of single devices, as the pipeline solvers write it."""
    if not stages or stages[0].start != 0 or stages[-1].stop != groups.num_groups or any(
            a.stop != b.start or a.stop <= a.start for a, b in zip(stages[:-1], stages[1:], strict=True)):
        raise ValueError(f"build_solution requires contiguous stages covering groups 0..{groups.num_groups - 1}, "
                         f"but got {[(s.start, s.stop) for s in stages]}")
    stage_of_group = np.zeros(groups.num_groups, np.int32)
    for k, s in enumerate(stages):
        stage_of_group[s.start:s.stop] = k
    assignment = stage_of_group[groups.node_group]
    sched = schedule or problem.schedule
    sharded = [s for s in stages if s.tables is not None and s.tables.mesh.num_devices > 1]
    if not sharded:
        return Solution(assignment, tuple(Stage(s.devices) for s in stages), certificate, schedule=sched,
                        microbatches=int(microbatches))
    layouts: list[tuple[ShardingTables, dict]] = []
    for s in stages:
        if s.tables is None or s.specs is None:
            mesh = LogicalMesh.build(problem.topology, (1,), list(s.devices))
            tables = stage_tables(problem, groups.range_ops(s.start, s.stop), mesh)
            layouts.append((tables, propagate(tables, {})))
        else:
            layouts.append((s.tables, s.specs))
    if len(stages) == 1:
        sol = spmd_solution(problem, layouts[0][0], layouts[0][1], certificate)
        return replace(sol, microbatches=int(microbatches))
    return stages_solution(problem, assignment, layouts, certificate, schedule=sched, microbatches=int(microbatches))

"""The practitioner's grid: MaxText/Megatron-style (dp, fsdp, tp, pp) layouts as whole-cluster plans.

Users tune these degrees by hand (MaxText's ``ici_*``/``dcn_*`` parallelism, Megatron's TP×PP×DP), so every
point is a plan ``cluster`` must never lose to: :func:`grid_points` lists the points whose product is the device
count (tensor parallelism inside a host; data parallelism and FSDP not both), and :func:`grid_plan` builds one as a
plan in the contract's form — ``pp`` stages of equal layer-group counts on consecutive submeshes of
``dp·fsdp·tp`` devices in the cluster's device order, each a (data, tensor) mesh whose groups take the
data-parallel, FSDP (the leanest layout) or Megatron layout of :func:`~.layouts.baseline_layouts`. The solver
judges these plans with :func:`planmap.evaluate.evaluate` next to its own (and bench/cluster.py uses the same
builder, so the bench's grid is exactly what the solver compared against).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from planmap.problem import Certificate, Problem, Solution, Status
from planmap.sharding import LogicalMesh, evaluate_spmd
from planmap.sharding.stage import stage_tables

from .layouts import StageLayout, baseline_layouts, compose_layout
from .space import LayerGroups, StagePlan, build_solution, device_order

__all__ = ["grid_points", "grid_plan", "hosts_width"]

GridPoint = tuple[int, int, int, int]


def grid_points(num_devices: int, per_host: int) -> list[GridPoint]:
    """(dp, fsdp, tp, pp) with product ``num_devices``: tp inside a host; dp and fsdp not both > 1."""
    divisors = [d for d in range(1, num_devices + 1) if num_devices % d == 0]
    return [(dp, fsdp, tp, pp) for dp, fsdp, tp, pp in itertools.product(divisors, repeat=4)
            if dp * fsdp * tp * pp == num_devices and per_host % tp == 0 and (dp == 1 or fsdp == 1)]


def hosts_width(problem: Problem) -> int:
    """The most accelerators on one host (the bound on a tensor-parallel degree)."""
    topo = problem.topology
    hosts = [int(topo.device_host[d]) for d in topo.accelerators]
    return max((hosts.count(h) for h in set(hosts)), default=1)


def grid_plan(problem: Problem, groups: LayerGroups, point: GridPoint, m: int, cache: dict) -> Solution | None:
    """The grid point's plan at ``m`` microbatches; None where the point does not divide the layer groups or the
    devices are of more than one type. ``cache`` keeps each group's layout per mesh across points."""
    dp, fsdp, tp, pp = point
    G = groups.num_groups
    if pp > G:
        return None
    order = device_order(problem)
    size = dp * fsdp * tp
    if len(set(problem.topology.device_type[order].tolist())) > 1 or size * pp > len(order):
        return None
    pm = replace(problem, microbatches=m) if m != problem.microbatches else problem
    bounds = [round(k * G / pp) for k in range(pp + 1)]
    want = "megatron" if tp > 1 else ("fsdp" if fsdp > 1 else "data-parallel")
    plans = []
    for k in range(pp):
        devs = tuple(int(d) for d in order[k * size:(k + 1) * size])
        if size == 1:
            plans.append(StagePlan(bounds[k], bounds[k + 1], devs))
            continue
        mesh = LogicalMesh.build(problem.topology, tuple(s for s in (dp * fsdp, tp) if s > 1) or (1,), devs)
        tables = stage_tables(pm, groups.range_ops(bounds[k], bounds[k + 1]), mesh)
        parts = []
        for g in range(bounds[k], bounds[k + 1]):
            key = (g, mesh.key, want, m)
            if key not in cache:
                gt = stage_tables(pm, groups.ops[g], mesh)
                lays = dict(baseline_layouts(gt))
                specs = lays.get(want) or lays.get("data-parallel") or next(iter(lays.values()))
                cache[key] = StageLayout(gt, specs, evaluate_spmd(gt, specs), want, Status.HEURISTIC)
            parts.append(cache[key])
        plans.append(StagePlan(bounds[k], bounds[k + 1], devs, tables, compose_layout(tables, parts).specs))
    return build_solution(pm, groups, plans, Certificate(Status.HEURISTIC, "grid"), microbatches=m)

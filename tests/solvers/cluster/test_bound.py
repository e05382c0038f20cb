"""The ``cluster`` solver's lower bound (solvers/cluster/bound.py) against brute force: on a 3-layer MLP training
step over 2 hosts × 2 H100, every plan of the stated space that the enumeration reaches — every contiguous split
of the layer groups, every placement on submeshes in device order, every logical mesh of each submesh and each
SPMD baseline layout of each stage, at every microbatch count — is scored by evaluate, and the bound is below
them all and below the planner's plan; the certificate records it consistently."""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from planmap.evaluate import evaluate
from planmap.problem import Certificate, SolveOptions, Status, relative_gap
from planmap.sharding import propagate
from planmap.sharding.stage import stage_tables
from planmap.solvers.cluster.bound import BoundTable, space_bound
from planmap.solvers.cluster.layouts import baseline_layouts
from planmap.solvers.cluster.solver import plan_cluster
from planmap.solvers.cluster.space import (
    StagePlan,
    build_solution,
    device_order,
    layer_groups,
    stage_meshes,
    submeshes,
)

ROOT = Path(__file__).resolve().parents[3]
CHOICES = (1, 2)


@cache
def mlp_2x2(tmp: Path):
    """A 3-layer MLP training step (batch 256, hidden 1024), 1F1B, 2 microbatches, on 2 hosts × 2 H100."""
    from planmap.cluster import Topology
    from planmap.spec.loader import load_cluster
    from tests.solvers.cluster.test_cluster import heavy_mlp_problem

    text = (ROOT / "specs" / "clusters" / "h100-2x8.yaml").read_text()
    (tmp / "h100-2x2.yaml").write_text(text.replace("count: 8}", "count: 2}").replace("h100-2x8", "h100-2x2"))
    topo = Topology.from_spec(load_cluster(tmp / "h100-2x2.yaml").spec)
    return heavy_mlp_problem(tmp, layers=3, hidden=1024, batch=256, topo=topo, microbatches=2)


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    return mlp_2x2(tmp_path_factory.mktemp("bound"))


def _splits(G: int):
    """Every split of groups 0..G-1 into contiguous ranges."""
    for cuts in itertools.product([False, True], repeat=G - 1):
        bounds = [0, *[k + 1 for k, c in enumerate(cuts) if c], G]
        yield list(zip(bounds[:-1], bounds[1:], strict=True))


def _placements(subs, S: int):
    """Every sequence of S submeshes at increasing, disjoint offsets."""
    for combo in itertools.combinations(range(len(subs)), S):
        seq = sorted(combo, key=lambda k: subs[k].offset)
        if all(subs[a].offset + subs[a].size <= subs[b].offset for a, b in zip(seq[:-1], seq[1:], strict=True)):
            yield [subs[k] for k in seq]


def _random_layout(tables, rng) -> dict:
    """The default propagation from a random result spec on about a third of the ops (any strategy's)."""
    from planmap.sharding.specs import from_assignment

    over = {}
    for i in range(tables.num_ops):
        vals = tables.unit_values(i)
        if vals and rng.random() < 0.3:
            row = int(rng.integers(len(tables.out_specs[i])))
            over[vals[0]] = from_assignment(tables.out_specs[i][row], len(tables.shapes[vals[0]]))
    return propagate(tables, over)


def _stage_options(pm, groups, start, stop, sub, rng):
    """Every (mesh, layout) of a stage as StagePlans: each SPMD baseline, and two random layouts, per mesh."""
    if sub.size == 1:
        return [StagePlan(start, stop, sub.devices)]
    out = []
    for mesh in stage_meshes(pm, sub):
        tables = stage_tables(pm, groups.range_ops(start, stop), mesh)
        layouts = [specs for _, specs in baseline_layouts(tables)] + [_random_layout(tables, rng) for _ in range(2)]
        out += [StagePlan(start, stop, tuple(int(d) for d in mesh.devices), tables, specs) for specs in layouts]
    return out


def brute_force(p):
    """The score (step / M under evaluate) of every enumerated plan that fits, and how many were judged."""
    from dataclasses import replace

    groups = layer_groups(p)
    subs = submeshes(p, device_order(p))
    scores, judged = [], 0
    rng = np.random.default_rng(0)
    for m in CHOICES:
        pm = replace(p, microbatches=m)
        for split in _splits(groups.num_groups):
            for place in _placements(subs, len(split)):
                options = [_stage_options(pm, groups, a, b, sub, rng) for (a, b), sub in zip(split, place, strict=True)]
                for stages in itertools.product(*options):
                    sol = build_solution(pm, groups, list(stages), Certificate(Status.HEURISTIC, "brute"),
                                         microbatches=m)
                    ev = evaluate(pm, sol)
                    judged += 1
                    if ev.feasible:
                        scores.append(ev.step_time / m)
    return scores, judged


def test_bound_is_below_every_plan_of_the_space_and_the_planners(problem):
    p = problem
    groups = layer_groups(p)
    space = space_bound(p, groups, CHOICES, [device_order(p)])
    scores, judged = brute_force(p)
    assert judged > 250 and scores
    best = min(scores)
    assert np.isfinite(space.score) and 0 < space.score <= best * (1 + 1e-9)
    for m in CHOICES:
        assert space.per_m[m] <= best * (1 + 1e-9) or space.per_m[m] >= space.score
    ans = plan_cluster(p, SolveOptions(time_limit=60), microbatch_choices=CHOICES)
    sol, ev = ans.solution, ans.evaluation
    mine = ev.step_time / sol.microbatches
    assert space.score <= mine * (1 + 1e-9)
    cert = sol.certificate
    assert cert.status in (Status.OPTIMAL, Status.GAP_REACHED, Status.BOUNDED)
    assert cert.bound is not None and cert.bound <= cert.objective == ev.objective
    assert cert.gap == pytest.approx(relative_gap(cert.objective, cert.bound))
    assert cert.gap == pytest.approx(1 - min(space.score, mine) / mine, abs=1e-9)  # the gap is on step / M
    assert "proof: no plan of the space" in cert.message and f"{cert.gap:.2%} above the bound" in cert.message


def test_one_device_floor_covers_the_plain_pipeline_and_memory_cuts_only_what_cannot_fit(problem):
    """A stage on one device is bounded by the lesser of its ops' floors and its coarse nodes' compute (the plain
    pipeline evaluator's); a submesh whose capacity is below the weights alone is cut, no other."""
    from dataclasses import replace

    p = problem
    groups = layer_groups(p)
    subs = submeshes(p, device_order(p))
    table = BoundTable(p, groups).table(subs, 1)
    G = groups.num_groups
    one = next(k for k, s in enumerate(subs) if s.size == 1)
    nodes = float(p.cost.device_compute[:, subs[one].devices[0]].sum())
    assert 0 < table[0, 0, G, one] <= nodes * (1 + 1e-9)
    assert np.isinf(table[0, 1, 0, one]) and np.isfinite(table[0, 0, G]).all()
    weights = float(p.original.value_bytes[p.original.param_values].sum())
    memory = float(p.topology.memory.min())  # capacities under the weights on one device, above them on two
    tight = replace(p, memory_headroom=1 - weights * 0.75 / memory)
    cut = BoundTable(tight, groups).table(subs, 1)
    sizes = np.array([s.size for s in subs])
    assert np.isinf(cut[0, 0, G, sizes == 1]).all() and np.isfinite(cut[0, 0, G, sizes >= 2]).all()

"""The pipeline DP (``dp``) and PipeDream's planner against exhaustive enumeration under ``evaluate``.

The reference enumerates every assignment of (forward) nodes to devices at once with numpy —
convexity from the transitive closure, the pipeline order from a boolean closure of the stage
graph, loads and memory straight from the paper's definitions — and its optimum is then checked
with :func:`planmap.evaluate.evaluate` itself, so it shares no code with the DP. Cases with an
order-dependent memory (1F1B) or replicated stages are enumerated through ``evaluate`` directly.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planmap.errors import PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Stage, Status
from planmap.solvers.pipeline.dp import ThroughputDP, prepare
from planmap.solvers.pipeline.pipedream import PipeDream
from planmap.workloads.graphs import layered_dag, paper_topology, profiled_graph
from planmap.workloads.pipelines import Layers, pipeline_graph, tight_memory, workload

REL = 1e-9


# ------------------------------------------------------------------------------------ instances
def wide_dag(n: int, seed: int, p: float = 0.35, training: bool = False):
    """A random DAG without a backbone (many ideals), profiled like the paper's graphs; with
    ``training`` every node gets a mirrored backward twin in its colocation class."""
    rng = np.random.default_rng(seed)
    edges = [(i, j) for j in range(1, n) for i in range(j) if rng.random() < p]
    acc = rng.lognormal(0, 0.6, n)
    cpu = acc * rng.lognormal(np.log(6), 0.4, n)
    comm = rng.lognormal(np.log(0.3), 0.5, n)
    size = rng.lognormal(0, 0.5, n) * 1e6
    out = (size / 10).astype(np.int64)
    if not training:
        return profiled_graph(edges, cpu, acc, comm, size=size, out_bytes=out)
    return with_backward_twins(edges, cpu, acc, comm, size, out)


def with_backward_twins(edges, cpu, acc, comm, size, out, layer=None):
    """A training graph of a profiled forward DAG, like the paper's: node ``i`` gets the backward twin
    ``2n-1-i`` (twice the time, same class) that reads ``i``'s output; gradients flow back. ``layer``: the
    forward nodes' layer ids (the backward twins are in none)."""
    n = len(cpu)
    N = 2 * n
    back_edges = [(N - 1 - v, N - 1 - u) for u, v in edges] + [(i, N - 1 - i) for i in range(n)]
    mirror = lambda a, r=1.0: np.concatenate([a, a[::-1] * r])  # noqa: E731
    return profiled_graph(sorted(set(edges + back_edges)), mirror(cpu, 2), mirror(acc, 2), mirror(comm),
                          size=np.concatenate([size, np.zeros(n)]), out_bytes=mirror(out).astype(np.int64),
                          colocation=np.concatenate([np.arange(n), np.arange(n)[::-1]]),
                          backward=np.concatenate([np.zeros(n, bool), np.ones(n, bool)]),
                          layer=None if layer is None else np.concatenate([layer, np.full(n, -1)]))


def small_layers(n: int, seed: int) -> Layers:
    """A random forward DAG with parameters (for replication: gradient all-reduce)."""
    rng = np.random.default_rng(seed)
    g = Layers.empty()
    for i in range(n):
        preds = [j for j in range(i) if rng.random() < 0.5] or ([i - 1] if i else [])
        g.add(f"n{i}", preds, float(rng.lognormal(0, 0.5)), params=float(rng.integers(1, 5)) * 1e6)
    return g


# ------------------------------------------------------------------------------------ reference
def closure(n: int, edges) -> np.ndarray:
    r = np.zeros((n, n), bool)
    for a, b in edges:
        r[a, b] = True
    for k in range(n):
        r |= r[:, [k]] & r[[k], :]
    return r


def enumerate_optimum(p: Problem) -> tuple[float, np.ndarray]:
    """Min over every assignment of forward nodes to single devices of the max load (or max fw +
    max bw), among those whose stages are convex, form a pipeline and fit memory — from the paper's
    definitions, for profiled graphs on the paper's cluster, memory order-independent."""
    g, topo = p.graph, p.topology
    n, D = g.num_nodes, p.num_devices
    train = p.mode == "training" and g.backward.any()
    fwd = np.flatnonzero(~g.backward) if train else np.arange(n)
    partner = np.arange(n)
    if train:
        for i in np.flatnonzero(g.backward):
            partner[i] = fwd[g.colocation[fwd] == g.colocation[i]][0]
    A = np.array(list(itertools.product(range(D), repeat=len(fwd))), np.int64)
    dev = np.zeros((len(A), n), np.int64)
    dev[:, fwd] = A
    dev = dev[:, partner]
    s, d = g.node_edges
    mask = ~g.backward if train else np.ones(n, bool)
    keep = mask[s] & mask[d]
    reach = closure(n, zip(s[keep].tolist(), d[keep].tolist(), strict=True)).astype(np.int64)
    ok = np.ones(len(A), bool)
    t = p.cost.device_compute
    fw = np.zeros((len(A), D))
    bw = np.zeros((len(A), D))
    mem = np.zeros((len(A), D))
    quot = np.zeros((len(A), D, D), bool)
    for a, b in zip(s[keep].tolist(), d[keep].tolist(), strict=True):
        quot[np.arange(len(A)), dev[:, a], dev[:, b]] = True
    for k in range(D):
        on = (dev == k) & mask
        down, up = (on @ reach) > 0, (on @ reach.T) > 0
        ok &= ~(down & up & ~on & mask).any(axis=1)
        allon = dev == k
        fw[:, k] = (allon & ~g.backward) @ np.nan_to_num(t[:, k], posinf=1e9)
        bw[:, k] = (allon & g.backward) @ np.nan_to_num(t[:, k], posinf=1e9)
        mem[:, k] = allon @ g.state_bytes + np.where(allon, p.cost.working_set, 0).max(axis=1)
        if train:
            mem[:, k] += (allon @ p.cost.stash_bytes) * p.in_flight(0, 1)
    quot[:, np.arange(D), np.arange(D)] = False
    c = quot.copy()
    for _ in range(D):
        c = c | (np.einsum("aij,ajk->aik", c.astype(int), c.astype(int)) > 0)
    ok &= ~c[:, np.arange(D), np.arange(D)].any(axis=1)
    # transfers: a value leaves its producer's device once, enters each consuming device once
    ev_, ed_ = g.edge_value, g.edge_dst
    vals = np.unique(ev_[g.edge_src >= 0])
    for v in vals.tolist():
        prod = int(g.value_node[v])
        cons = np.unique(ed_[ev_ == v])
        cost = float(g.value_time[v])
        side = fw if not g.backward[prod] else bw
        pd = dev[:, prod]
        sent = np.zeros(len(A), bool)
        for k in range(D):
            into = ((dev[:, cons] == k).any(axis=1)) & (pd != k)
            sent |= into
            if not topo.is_cpu[k]:
                side[:, k] += cost * into
        out_paid = ~topo.is_cpu[pd]
        side[np.arange(len(A)), pd] += cost * (sent & out_paid)
    ok &= (mem <= p.capacity[None, :] * (1 + 1e-12)).all(axis=1)
    if p.variant == "max-fw-plus-max-bw":
        obj = fw.max(axis=1) + bw.max(axis=1)
    else:
        obj = (fw + bw).max(axis=1)
    obj = np.where(ok, obj, np.inf)
    best = int(np.argmin(obj))
    return float(obj[best]), dev[best]


def as_solution(p: Problem, dev: np.ndarray) -> Solution:
    return Solution.from_devices(p, dev, Certificate(Status.HEURISTIC, "reference"), schedule=p.schedule,
                                 microbatches=max(p.microbatches, 1))


def evaluate_all_orders(p: Problem, replication: bool = False) -> float:
    """Exhaustive through evaluate: every assignment of forward nodes to device groups (every set
    partition of the devices when replication is allowed) and every listing order of the stages."""
    g = p.graph
    n, D = g.num_nodes, p.num_devices
    train = p.mode == "training" and g.backward.any()
    fwd = np.flatnonzero(~g.backward) if train else np.arange(n)

    def partitions(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for part in partitions(rest):
            for i in range(len(part)):
                yield part[:i] + [[first] + part[i]] + part[i + 1:]
            yield [[first]] + part

    groupings = list(partitions(list(range(D)))) if replication else [[[d] for d in range(D)]]
    best = math.inf
    for part in groupings:
        for assign in itertools.product(range(len(part)), repeat=len(fwd)):
            grp = np.zeros(n, np.int64)
            grp[fwd] = assign
            if train:
                for i in np.flatnonzero(g.backward):
                    grp[i] = grp[fwd[g.colocation[fwd] == g.colocation[i]][0]]
            used = sorted(set(grp.tolist()))
            for order in itertools.permutations(used):
                pos = {k: j for j, k in enumerate(order)}
                sol = Solution(np.array([pos[k] for k in grp]), tuple(Stage(tuple(part[k])) for k in order),
                               Certificate(Status.HEURISTIC, "reference"), schedule=p.schedule,
                               microbatches=max(p.microbatches, 1))
                ev = evaluate(p, sol)
                if ev.feasible:
                    best = min(best, ev.objective)
    return best


def solve_dp(p: Problem, **passthrough) -> tuple[Solution, object]:
    sol = ThroughputDP().solve(p, SolveOptions(passthrough=passthrough))
    ev = evaluate(p, sol)
    assert ev.feasible, ev.violations
    claim = sol.certificate.objective
    assert abs(claim - ev.objective) <= 1e-6 * ev.objective, (claim, ev.objective)
    return sol, ev


# ------------------------------------------------------------------------------------ tests
CASES = [  # (nodes, seed, accelerators, memory, training, variant)
    (8, 0, 2, None, False, "max-load"),
    (9, 1, 3, None, False, "max-load"),
    (8, 2, 2, 2.6e6, False, "max-load"),
    (9, 3, 3, 3.5e6, False, "max-load"),
    (10, 4, 2, 4e6, False, "max-load"),
    (5, 5, 2, None, True, "max-load"),
    (5, 6, 3, 4e6, True, "max-load"),
    (5, 7, 2, None, True, "max-fw-plus-max-bw"),
    (5, 8, 2, 3e6, True, "max-fw-plus-max-bw"),
]


@pytest.mark.parametrize("n,seed,k,memory,training,variant", CASES)
def test_dp_equals_exhaustive_enumeration(n, seed, k, memory, training, variant):
    g = wide_dag(n, seed, training=training)
    kw = dict(mode="training", schedule="gpipe", microbatches=2, variant=variant) if training else {}
    p = Problem.from_graph(g, paper_topology(k, memory=memory or 1e15), **kw)
    ref, dev = enumerate_optimum(p)
    ev_ref = evaluate(p, as_solution(p, dev))
    assert ev_ref.feasible and abs(ev_ref.objective - ref) <= REL * ref  # the reference agrees with evaluate
    sol, ev = solve_dp(p)
    assert ev.objective == pytest.approx(ref, rel=REL)
    assert sol.certificate.status == Status.OPTIMAL and sol.certificate.bound == pytest.approx(ref, rel=REL)


def test_many_ideals_and_memory_actually_bind():
    """The cases above are not chains and memory changes their optimum (the tests can fail)."""
    g = wide_dag(9, 3)
    assert prepare(Problem.from_graph(g, paper_topology(3))).num_ideals > 3 * g.num_nodes
    loose = enumerate_optimum(Problem.from_graph(g, paper_topology(3)))[0]
    tight = enumerate_optimum(Problem.from_graph(g, paper_topology(3, memory=3.5e6)))[0]
    assert tight > loose * 1.01


@pytest.mark.parametrize("seed,share,schedule", [(10, 0.55, "1f1b"), (11, 0.7, "1f1b"), (14, 0.7, "1f1b"),
                                                  (12, 0.55, "gpipe")])
def test_pipeline_schedule_memory_matches_exhaustive(seed, share, schedule):
    """The schedule's in-flight microbatches bind memory (these cases: the optimum is worse than without
    a memory limit, and GPipe's is worse than 1F1B's); with 1F1B the first stages hold more microbatches,
    so the order of the stages matters."""
    g = wide_dag(4, seed, p=0.5, training=True)
    kw = dict(mode="training", microbatches=3)
    p0 = Problem.from_graph(g, paper_topology(2, memory=1e15), schedule=schedule, **kw)
    one = Problem.from_graph(g, p0.topology, schedule="1f1b", **kw)  # one stage: one microbatch in flight
    full = evaluate(one, as_solution(one, np.full(g.num_nodes, 1))).memory[1]
    p = Problem.from_graph(g, paper_topology(2, memory=share * full), schedule=schedule, **kw)
    ref = evaluate_all_orders(p)
    assert ref > evaluate_all_orders(p0) * 1.001
    _, ev = solve_dp(p)
    assert ev.objective == pytest.approx(ref, rel=REL)
    if schedule == "1f1b":
        _, ev_gpipe = solve_dp(Problem.from_graph(g, p.topology, schedule="gpipe", **kw))
        assert ev_gpipe.objective > ev.objective * 1.001


@pytest.mark.parametrize("seed,training,memory", [(0, False, None), (1, True, None), (2, True, 3.2e7)])
def test_replicated_stages_match_exhaustive(seed, training, memory):
    g = pipeline_graph(small_layers(4, seed), name="rep", seed=seed, training=training, time_scale=1.0,
                       act_scale=1e5, comm_ratio=0.6)
    kw = dict(mode="training", schedule="1f1b", microbatches=2) if training else {}
    p = Problem.from_graph(g, paper_topology(3, cpus=0, memory=memory or 1e15), replication=True, **kw)
    ref = evaluate_all_orders(p, replication=True)
    sol, ev = solve_dp(p)
    assert ev.objective == pytest.approx(ref, rel=REL)
    unreplicated = Problem.from_graph(g, p.topology, replication=False, **kw)
    _, ev1 = solve_dp(unreplicated)
    assert ev.objective <= ev1.objective * (1 + REL)


def test_replication_wins_when_compute_dominates():
    g = pipeline_graph(small_layers(3, 5), name="dp-win", seed=5, time_scale=1.0, act_scale=1e3, comm_ratio=0.01)
    p = Problem.from_graph(g, paper_topology(4, cpus=0), replication=True)
    sol, ev = solve_dp(p)
    assert max(s.replicas for s in sol.stages) > 1
    _, ev1 = solve_dp(Problem.from_graph(g, p.topology))
    assert ev.objective < ev1.objective


def test_training_keeps_forward_backward_pairs_and_variant_definition():
    g = layered_dag(6, 3, seed=1, training=True)
    for variant in ("max-load", "max-fw-plus-max-bw"):
        p = Problem.from_graph(g, paper_topology(3), mode="training", variant=variant, schedule="1f1b",
                               microbatches=4)
        sol, ev = solve_dp(p)
        stage = sol.assignment
        for c in np.unique(g.colocation):
            assert len(np.unique(stage[g.colocation == c])) == 1, f"class {c} split"
        if variant == "max-fw-plus-max-bw":
            groups = [list(s.devices) for s in sol.stages]
            fw = max(ev.fw_load[d[0]] for d in groups)
            bw = max(ev.bw_load[d[0]] for d in groups)
            assert sol.certificate.objective == pytest.approx(fw + bw, rel=1e-9)
        else:
            assert sol.certificate.objective == pytest.approx(float(ev.load.max()), rel=1e-9)


def test_variant_never_exceeds_max_load_plan():
    """max fw + max bw <= max(fw + bw) of the max-load optimum is not implied, but the variant's optimum
    is at most the variant's value of the max-load plan (both are feasible)."""
    g = wide_dag(5, 21, training=True)
    kw = dict(mode="training", schedule="gpipe", microbatches=2)
    p_var = Problem.from_graph(g, paper_topology(2), variant="max-fw-plus-max-bw", **kw)
    p_max = Problem.from_graph(g, paper_topology(2), **kw)
    sol_max, _ = solve_dp(p_max)
    _, ev_var = solve_dp(p_var)
    assert ev_var.objective <= evaluate(p_var, sol_max).objective * (1 + REL)


def test_bench_workload_and_baselines_under_evaluate():
    g = workload("bert3-ops", training=True)
    kw = dict(mode="training", schedule="1f1b", microbatches=4)
    p = Problem.from_graph(g, paper_topology(3, memory=tight_memory(g, 3, **kw)), **kw)
    sol, ev = solve_dp(p)
    assert sol.certificate.status == Status.OPTIMAL
    for granularity in ("layer", "unit"):
        pd = PipeDream().solve(p, SolveOptions(passthrough={"granularity": granularity}))
        ev_pd = evaluate(p, pd)
        assert ev_pd.feasible
        assert pd.certificate.objective == pytest.approx(ev_pd.objective, rel=1e-6)
        assert ev_pd.objective >= ev.objective * (1 - 1e-9)


def test_deterministic():
    g = wide_dag(9, 30)
    p = Problem.from_graph(g, paper_topology(3, memory=4e6))
    a, _ = solve_dp(p)
    b, _ = solve_dp(p)
    assert np.array_equal(a.assignment, b.assignment) and a.stages == b.stages


def test_too_many_ideals_is_a_clear_error():
    g = layered_dag(4, 6, seed=0)
    p = Problem.from_graph(g, paper_topology(2))
    with pytest.raises(PlanmapError, match="ideals"):
        ThroughputDP().solve(p, SolveOptions(passthrough={"max_ideals": 50}))


def test_time_limit_returns_incumbent_with_proven_bound():
    g = layered_dag(8, 4, seed=2)
    p = Problem.from_graph(g, paper_topology(3))
    assert prepare(p).num_ideals > 300
    sol = ThroughputDP().solve(p, SolveOptions(time_limit=1e-9))
    ev = evaluate(p, sol)
    c = sol.certificate
    assert ev.feasible and c.status == Status.TIME_LIMIT
    assert c.bound is not None and c.bound <= ev.objective


def test_dp_refuses_clusters_where_charges_depend_on_both_ends(tmp_path):
    from planmap.cluster import Topology
    from planmap.spec.models import ClusterBody

    body = ClusterBody.model_validate({
        "deviceTypes": [
            {"name": "cpu", "kind": "cpu", "memoryBandwidth": "100GB/s",
             "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]},
            {"name": "gpu", "kind": "gpu", "memory": "16GiB", "memoryBandwidth": "1TB/s",
             "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"}]}],
        "hosts": [{"name": "h", "devices": [{"name": "cpu", "type": "cpu", "count": 1},
                                            {"name": "gpu", "type": "gpu", "count": 2}],
                   "intraHost": {"bandwidth": "300GB/s"}}],
        "links": {"hostDevice": {"bandwidth": "16GB/s"}},
    })
    g = wide_dag(5, 1)
    g2 = profiled_graph([(int(a), int(b)) for a, b in zip(*g.node_edges, strict=True)], g.measured["cpu"],
                        g.measured["accelerator"], np.nan, size=1e6)
    p = Problem.from_graph(g2, Topology.from_spec(body))
    with pytest.raises(PlanmapError, match="depend only on the paying device"):
        ThroughputDP().solve(p, SolveOptions())


def test_pipedream_contracts_biconnected_blocks_into_a_layer_chain():
    """A diamond (a -> b, a -> c, b -> d, c -> d) followed by d -> e: the tails a, b, c of the diamond's
    edges form one layer, then d and e, so PipeDream sees a chain of three layers."""
    g = profiled_graph([(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)], [10.0] * 5, [1.0] * 5, 0.1)
    p = Problem.from_graph(g, paper_topology(2))
    sol = PipeDream().solve(p, SolveOptions())
    assert "chain of 3 layers" in sol.certificate.message
    dev = sol.node_device()
    assert dev[0] == dev[1] == dev[2]


@pytest.mark.parametrize("seed", [40, 41])
def test_pipedream_is_feasible_and_never_beats_the_dp(seed):
    g = wide_dag(9, seed, p=0.3)
    p = Problem.from_graph(g, paper_topology(3, memory=4e6))
    _, ev_dp = solve_dp(p)
    sol = PipeDream().solve(p, SolveOptions())
    ev = evaluate(p, sol)
    assert ev.feasible and sol.certificate.objective == pytest.approx(ev.objective, rel=1e-6)
    assert ev.objective >= ev_dp.objective * (1 - 1e-9)


def layered_training(n: int, seed: int, per_layer: int = 2):
    """A training graph like :func:`with_backward_twins` whose forward nodes form repeated layers of
    ``per_layer`` nodes (what activation checkpointing recomputes) and whose activations outweigh the state."""
    rng = np.random.default_rng(seed)
    edges = [(i, j) for j in range(1, n) for i in range(j) if rng.random() < 0.5]
    acc = rng.lognormal(0, 0.6, n)
    cpu = acc * rng.lognormal(np.log(6), 0.4, n)
    comm = rng.lognormal(np.log(0.3), 0.5, n)
    size = rng.lognormal(0, 0.5, n) * 1e5
    out = (rng.lognormal(0, 0.5, n) * 1e6).astype(np.int64)
    return with_backward_twins(edges, cpu, acc, comm, size, out, layer=np.arange(n) // per_layer)


def evaluate_all_choices(p: Problem) -> float:
    """Exhaustive through evaluate: every assignment of forward nodes to single devices, every order of the
    stages and every activation-checkpointing choice per stage."""
    g = p.graph
    fwd = np.flatnonzero(~g.backward)
    best = math.inf
    for assign in itertools.product(range(p.num_devices), repeat=len(fwd)):
        grp = np.zeros(g.num_nodes, np.int64)
        grp[fwd] = assign
        for i in np.flatnonzero(g.backward):
            grp[i] = grp[fwd[g.colocation[fwd] == g.colocation[i]][0]]
        used = sorted(set(grp.tolist()))
        for order in itertools.permutations(used):
            pos = {k: j for j, k in enumerate(order)}
            for choice in itertools.product((False, True), repeat=len(used)):
                sol = Solution(np.array([pos[k] for k in grp]),
                               tuple(Stage((k,), remat=c) for k, c in zip(order, choice, strict=True)),
                               Certificate(Status.HEURISTIC, "reference"), schedule=p.schedule,
                               microbatches=p.microbatches)
                ev = evaluate(p, sol)
                if ev.feasible:
                    best = min(best, ev.objective)
    return best


@pytest.mark.parametrize("seed,share,variant", [(0, 0.6, "max-load"), (2, 0.4, "max-fw-plus-max-bw")])
def test_remat_choice_per_stage_matches_exhaustive(seed, share, variant):
    """``remat: auto``: the DP is exact over splits x per-stage checkpointing, and here strictly better than
    both the best plan without checkpointing and the best with it on every stage."""
    from dataclasses import replace

    g = layered_training(4, seed)
    kw = dict(mode="training", microbatches=3, schedule="1f1b", variant=variant)
    free = Problem.from_graph(g, paper_topology(2, memory=1e15), **kw)
    whole = Solution(np.zeros(g.num_nodes, np.int32), (Stage((1,)),), Certificate(Status.HEURISTIC, "one"),
                     schedule="1f1b", microbatches=3)
    p = Problem.from_graph(g, paper_topology(2, memory=share * evaluate(free, whole).memory[1]), remat_choice=True,
                           **kw)
    sol, ev = solve_dp(p)
    assert ev.objective == pytest.approx(evaluate_all_choices(p), rel=REL)
    assert sol.certificate.status == Status.OPTIMAL and sol.certificate.options["remat"] == "per-stage"
    assert {st.remat for st in sol.stages} == {False, True}  # a mixed plan
    _, plain = solve_dp(replace(p, remat_choice=False))
    _, every = solve_dp(replace(p, remat_choice=False, cost=p.cost.with_remat(True)))
    assert ev.objective < min(plain.objective, every.objective) * 0.999

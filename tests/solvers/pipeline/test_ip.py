"""The throughput IP (real HiGHS solves): contiguous optimum = DP optimum, non-contiguous <= contiguous,
pipeline order (not just convexity), colocation, memory, the max-fw + max-bw variant, warm start."""

from __future__ import annotations

import numpy as np
import pytest

from planmap import solvers
from planmap.errors import InfeasibleError, SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Problem, SolveOptions, Status
from planmap.solvers.pipeline.dp import ThroughputDP
from planmap.solvers.pipeline.ip import ThroughputIP
from planmap.solvers.pipeline.ip_data import prepare
from planmap.solvers.pipeline.ip_model import build_model
from planmap.workloads.graphs import layered_dag, paper_topology, profiled_graph

from .test_dp import solve_dp, wide_dag

EXACT = dict(rel_gap=1e-9, time_limit=60)


def solve_ip(p: Problem, start: str = "none", **opts):
    sol = ThroughputIP().solve(p, SolveOptions(passthrough={"start": start}, **{**EXACT, **opts}))
    ev = evaluate(p, sol)
    assert ev.feasible, ev.violations
    c = sol.certificate
    assert abs(c.objective - ev.objective) <= 1e-6 * ev.objective
    assert c.bound is not None and c.bound <= ev.objective * (1 + 1e-9)
    return sol, ev


SAMPLE = [  # (nodes, seed, accelerators, memory, training, schedule, variant)
    (8, 0, 3, None, False, None, "max-load"),
    (8, 2, 3, 3.5e6, False, None, "max-load"),
    (8, 20, 2, 3.5e6, False, None, "max-load"),
    (5, 1, 3, None, True, "1f1b", "max-load"),
    (5, 3, 2, 3e6, True, "1f1b", "max-load"),
    (5, 5, 3, None, True, "gpipe", "max-fw-plus-max-bw"),
]


@pytest.mark.parametrize("n,seed,k,memory,training,schedule,variant", SAMPLE)
def test_contiguous_ip_equals_dp_and_noncontiguous_is_no_worse(n, seed, k, memory, training, schedule, variant):
    g = wide_dag(n, seed, training=training)
    kw = dict(mode="training", schedule=schedule, microbatches=3, variant=variant) if training else {}
    topo = paper_topology(k, memory=memory or 1e15)
    p = Problem.from_graph(g, topo, **kw)
    _, ev_dp = solve_dp(p)
    sol, ev = solve_ip(p)
    assert sol.certificate.status == Status.OPTIMAL
    assert ev.objective == pytest.approx(ev_dp.objective, rel=1e-6)
    _, ev_nc = solve_ip(Problem.from_graph(g, topo, contiguous=False, **kw))
    assert ev_nc.objective <= ev.objective * (1 + 1e-9)


def test_noncontiguous_can_be_strictly_better():
    g = wide_dag(8, 20, p=0.3)
    topo = paper_topology(2, memory=3.5e6)
    _, ev_c = solve_ip(Problem.from_graph(g, topo))
    _, ev_nc = solve_ip(Problem.from_graph(g, topo, contiguous=False))
    assert ev_nc.objective < 0.9 * ev_c.objective


def test_contiguity_means_a_pipeline_order_not_only_convex_stages():
    """Stages {0, 3} and {1, 2} are both convex, but 0 -> 2 and 1 -> 3 make them depend on each other.
    The paper's convexity rows accept this split; evaluate (and this IP) do not."""
    g = profiled_graph([(0, 2), (1, 3)], [10.0] * 4, [1.0] * 4, 0.1)
    topo = paper_topology(2, cpus=0)
    allowed = np.array([[1, 0], [0, 1], [0, 1], [1, 0]], bool)
    with pytest.raises(InfeasibleError):
        ThroughputIP().solve(Problem.from_graph(g, topo, allowed=allowed), SolveOptions(passthrough={"start": "none"}))
    sol, ev = solve_ip(Problem.from_graph(g, topo, allowed=allowed, contiguous=False))
    assert sorted(map(sorted, [np.flatnonzero(sol.node_device() == d) for d in (0, 1)])) == [[0, 3], [1, 2]]


def test_training_pairs_stay_together_and_variant_definition():
    g = layered_dag(3, 2, seed=4, training=True)
    for variant in ("max-load", "max-fw-plus-max-bw"):
        p = Problem.from_graph(g, paper_topology(2), mode="training", variant=variant, schedule="1f1b",
                               microbatches=2, contiguous=False)
        sol, ev = solve_ip(p, start="dp", time_limit=30)
        dev = sol.node_device()
        for c in np.unique(g.colocation):
            assert len(np.unique(dev[g.colocation == c])) == 1
        if variant == "max-fw-plus-max-bw":
            used = [s.device for s in sol.stages]
            assert sol.certificate.objective == pytest.approx(ev.fw_load[used].max() + ev.bw_load[used].max(), rel=1e-9)


def test_memory_limit_binds():
    g = wide_dag(8, 25)
    loose = solve_ip(Problem.from_graph(g, paper_topology(2), contiguous=False))[1]
    tight_p = Problem.from_graph(g, paper_topology(2, memory=3.5e6), contiguous=False)
    tight = solve_ip(tight_p)[1]
    assert tight.objective > 1.5 * loose.objective
    assert (tight.memory <= tight_p.capacity * (1 + 1e-9)).all()


def test_warm_start_from_dp_is_accepted_and_registry_dispatches():
    g = wide_dag(8, 2)
    p = Problem.from_graph(g, paper_topology(3, memory=3.5e6))
    sol = solvers.get("ip").solve(p, SolveOptions(**EXACT))
    assert "warm start dp" in sol.certificate.message and "(accepted)" in sol.certificate.message
    assert sol.certificate.objective == pytest.approx(ThroughputDP().solve(p, SolveOptions()).certificate.objective,
                                                      rel=1e-6)


def test_replication_is_left_to_the_dp():
    p = Problem.from_graph(wide_dag(5, 0), paper_topology(2), replication=True)
    with pytest.raises(SolverUnavailableError, match="replicated"):
        ThroughputIP().solve(p, SolveOptions())


def test_model_follows_the_pyomo_conventions():
    import pyomo.environ as pyo

    p = Problem.from_graph(wide_dag(5, 1, training=True), paper_topology(2, memory=3e6), mode="training",
                           schedule="1f1b", microbatches=3)
    m = build_model(p, data=prepare(p))
    names = {c.name for c in m.component_objects(pyo.Constraint)}
    assert {"assign", "receives", "sends", "memory", "pipeline", "transitive", "in_flight", "stash_extra"} <= names
    assert all(c.doc for c in m.component_objects((pyo.Constraint, pyo.Var, pyo.Set)))
    assert len(list(m.component_objects(pyo.Objective))) == 1


def test_max_stages_is_respected_by_dp_and_ip():
    g = wide_dag(8, 0)
    free = Problem.from_graph(g, paper_topology(3))
    capped = Problem.from_graph(g, paper_topology(3), max_stages=2)
    _, ev_free = solve_dp(free)
    dp_sol, ev_dp = solve_dp(capped)
    ip_sol, ev_ip = solve_ip(capped)
    assert dp_sol.num_stages <= 2 and ip_sol.num_stages <= 2
    assert ev_ip.objective == pytest.approx(ev_dp.objective, rel=1e-6)
    assert ev_dp.objective > ev_free.objective * 1.01


def nvlink_cluster():
    """2 GPUs with a direct link plus the host CPU: what a GPU pays depends on the other end."""
    from planmap.cluster import Topology
    from planmap.spec.models import ClusterBody

    return Topology.from_spec(ClusterBody.model_validate({
        "deviceTypes": [
            {"name": "cpu", "kind": "cpu", "memoryBandwidth": "100GB/s",
             "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]},
            {"name": "gpu", "kind": "gpu", "memory": "16GiB", "memoryBandwidth": "1TB/s",
             "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"}]}],
        "hosts": [{"name": "h", "devices": [{"name": "cpu", "type": "cpu", "count": 1},
                                            {"name": "gpu", "type": "gpu", "count": 2}],
                   "intraHost": {"bandwidth": "2GB/s", "latency": "50us"}}],
        "links": {"hostDevice": {"bandwidth": "8GB/s", "latency": "10us"}},
    }))


@pytest.mark.parametrize("contiguous", [True, False])
def test_charges_that_depend_on_both_ends_match_exhaustive(contiguous):
    from .test_dp import evaluate_all_orders

    g0 = wide_dag(6, 7, p=0.4)
    s, d = g0.node_edges
    acc = g0.measured["accelerator"] * 1e-3
    g = profiled_graph(list(zip(s.tolist(), d.tolist(), strict=True)), acc * 1.5, acc, np.nan,
                       out_bytes=(np.arange(6) + 1) * 200_000)
    p = Problem.from_graph(g, nvlink_cluster(), contiguous=contiguous)
    sol, ev = solve_ip(p)
    assert ev.objective == pytest.approx(evaluate_all_orders(p), rel=1e-6)
    assert sol.certificate.status == Status.OPTIMAL
    assert ev.load[0] > 0 and (ev.load[1:] > 0).all()  # the CPU and both GPUs work: mixed charges matter

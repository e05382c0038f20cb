"""Lossless reductions before the DP's ideal enumeration: zero-cost leaves merged into their neighbour.

The DP with the reductions must find the same optimum as without them and as exhaustive enumeration
(memory binding, training twins, both variants), while enumerating far fewer ideals; a GNMT-style
graph with 17 zero-cost sinks goes from millions of ideals to the base graph's count.
"""

from __future__ import annotations

import numpy as np
import pytest

from planmap.problem import Problem, SolveOptions, Status
from planmap.solvers.pipeline.dp import ThroughputDP, prepare
from planmap.solvers.pipeline.ideals import TooManyIdeals
from planmap.workloads.graphs import paper_topology, profiled_graph
from planmap.workloads.pipelines import workload

from .test_dp import REL, enumerate_optimum, solve_dp, with_backward_twins


def with_free_leaves(n: int, sources: int, sinks: int, seed: int, training: bool = False):
    """A random DAG of ``n`` costed nodes plus zero-cost leaves: ``sources`` feeding one node each
    (ids first) and ``sinks`` read from one node each (ids last); transfers of the leaves still cost."""
    rng = np.random.default_rng(seed)
    base = [(sources + i, sources + j) for j in range(1, n) for i in range(j) if rng.random() < 0.35]
    hosts = rng.integers(0, n, sources + sinks)
    edges = base + [(s, sources + int(hosts[s])) for s in range(sources)]
    edges += [(sources + int(hosts[sources + k]), sources + n + k) for k in range(sinks)]
    N = sources + n + sinks
    free = np.zeros(N, bool)
    free[:sources] = free[sources + n:] = True
    acc = np.where(free, 0.0, rng.lognormal(0, 0.6, N))
    cpu = acc * rng.lognormal(np.log(6), 0.4, N)
    comm = rng.lognormal(np.log(0.3), 0.5, N)
    size = np.where(free, 0.0, rng.lognormal(0, 0.5, N) * 1e6)
    out = np.where(np.arange(N) >= sources + n, 0, (rng.lognormal(0, 0.5, N) * 1e5)).astype(np.int64)
    if not training:
        return profiled_graph(edges, cpu, acc, comm, size=size, out_bytes=out)
    return with_backward_twins(edges, cpu, acc, comm, size, out)


CASES = [  # (costed nodes, sources, sinks, seed, accelerators, memory, training, variant)
    (6, 1, 3, 0, 2, None, False, "max-load"),
    (6, 2, 2, 1, 2, 3.0e6, False, "max-load"),
    (5, 1, 2, 2, 3, 2.5e6, False, "max-load"),
    (4, 1, 2, 3, 2, None, True, "max-load"),
    (4, 1, 2, 4, 2, 3.5e6, True, "max-fw-plus-max-bw"),
]


@pytest.mark.parametrize("n,sources,sinks,seed,k,memory,training,variant", CASES)
def test_reduced_dp_equals_unreduced_and_exhaustive(n, sources, sinks, seed, k, memory, training, variant):
    g = with_free_leaves(n, sources, sinks, seed, training)
    kw = dict(mode="training", schedule="gpipe", microbatches=2, variant=variant) if training else {}
    p = Problem.from_graph(g, paper_topology(k, memory=memory or 1e15), **kw)
    reduced, unreduced = prepare(p), prepare(p, reduce=False)
    free = sinks if training else sources + sinks  # in training a source stashes its output: memory, kept
    assert reduced.merged == free and reduced.num_units == unreduced.num_units - free
    assert reduced.num_ideals < unreduced.num_ideals
    sol, ev = solve_dp(p)
    _, ev_plain = solve_dp(p, reduce=False)
    ref, _ = enumerate_optimum(p)
    assert abs(ev.objective - ev_plain.objective) <= REL * ref and abs(ev.objective - ref) <= REL * ref
    assert f"{free} zero-cost leaf unit(s) merged" in sol.certificate.message


def test_a_leaf_that_costs_or_holds_memory_is_kept():
    g = with_free_leaves(5, 0, 2, 7)
    times = np.asarray(g.measured["accelerator"]).copy()
    times[-1] = 0.1  # the last sink now computes something: merging it could overload its neighbour
    costly = profiled_graph(list(zip(*g.node_edges, strict=True)), g.measured["cpu"], times,
                            g.value_time, size=g.state_bytes, out_bytes=g.out_bytes)
    assert prepare(Problem.from_graph(costly, paper_topology(2))).merged == 1


def test_gnmt_with_zero_cost_sinks_is_solved_exactly_over_few_ideals():
    g = workload("gnmt-sinks-layers", training=True)
    p = Problem.from_graph(g, paper_topology(4), mode="training", schedule="1f1b", microbatches=4)
    prep = prepare(p)
    assert prep.merged == 17 and prep.num_ideals == prepare(Problem.from_graph(
        workload("gnmt-layers", training=True), paper_topology(4), mode="training")).num_ideals
    with pytest.raises(TooManyIdeals):  # 2^17 times more ideals without the reduction
        prepare(p, max_ideals=100_000, reduce=False)
    sol = ThroughputDP().solve(p, SolveOptions())
    assert sol.certificate.status == Status.OPTIMAL

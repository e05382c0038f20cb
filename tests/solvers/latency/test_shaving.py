"""Branching probes (solvers/latency/shaving.py): a latency that a feasible placement reaches is never
refuted (exhaustive optima of small graphs), and on ResNet-50 layers branching refutes a latency that
propagation alone does not."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.problem import Problem  # noqa: E402
from planmap.solvers.latency.cuts import refutes  # noqa: E402
from planmap.solvers.latency.data import prepare  # noqa: E402
from planmap.solvers.latency.shaving import branch_refutes  # noqa: E402
from planmap.workloads.nets import net_topology, resnet50  # noqa: E402
from tests.solvers.latency.cases import optimum  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance  # noqa: E402
from tests.solvers.latency.test_probing import _bounds_of  # noqa: E402


@pytest.mark.parametrize("seed,n,q", [(0, 5, 1), (3, 5, 1), (5, 5, 1), (11, 4, 2)])
def test_branching_never_refutes_a_latency_some_placement_reaches(seed, n, q):
    p = any_instance(seed, n, q)
    opt = optimum(p)
    assert math.isfinite(opt)
    dt = prepare(p, opt * 1.5, probe_seconds=0)
    assert not branch_refutes(dt.allowed, opt / dt.time_scale, _bounds_of(p, dt), p.topology.is_cpu, rounds=12,
                              deadline=math.inf, nodes=n)


@pytest.mark.slow
def test_branching_refutes_what_propagation_cannot_on_resnet_layers():
    """ResNet-50 layers, 1 CPU + 4 accelerators, memory 70% full (best known 139.04 ms, sweep bound 106.7 ms):
    110 ms survives propagation, but some layer can run neither on the CPU nor on an accelerator within it."""
    g = resnet50(granularity="layer")
    p = Problem.from_graph(g, net_topology(g, 4, fill=0.7), objective="latency", max_subgraphs=2,
                           contiguous=False)
    dt = prepare(p, 0.13904, probe_seconds=0)
    level = 0.110 / dt.time_scale
    bounds_of = _bounds_of(p, dt)
    assert not refutes(dt.allowed, level, bounds_of, 12, math.inf)
    assert branch_refutes(dt.allowed, level, bounds_of, p.topology.is_cpu, rounds=12, deadline=math.inf, nodes=5)

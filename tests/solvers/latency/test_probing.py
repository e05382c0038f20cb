"""The probing lower bound: never above any feasible placement's latency (exhaustive on small graphs),
and above the sweep bound where propagation refutes a latency the sweep allows."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.problem import Problem  # noqa: E402
from planmap.solvers.latency.cuts import memory_buckets, probe_lower_bound, time_bounds  # noqa: E402
from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.workloads.nets import net_topology, resnet50  # noqa: E402
from tests.solvers.latency.cases import optimum  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance  # noqa: E402

CASES = [(0, 6, 1), (1, 5, 2), (3, 6, 1), (5, 6, 1), (11, 5, 2)]


def _bounds_of(p, dt):
    size = memory_buckets(_own_bytes(dt.node_mem, dt.param_use, dt.param_bytes), dt.capacity, dt.buckets)

    def bounds_of(a):
        return time_bounds(dt.t, a, p.topology.is_cpu, dt.q, dt.val_prod, dt.pair_val, dt.pair_cons, dt.recv,
                           dt.send, size, dt.buckets)
    return bounds_of


@pytest.mark.parametrize("seed,n,q", CASES)
def test_probing_never_passes_the_optimum(seed, n, q):
    p = any_instance(seed, n, q)
    opt = optimum(p)
    assert math.isfinite(opt)
    dt = prepare(p, opt * 1.5)
    sweep = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max())
    assert sweep - 1e-9 <= dt.lower <= opt / dt.time_scale * (1 + 1e-7)
    # probing up to the optimum itself gets as close as bisection allows, never past it
    tight = probe_lower_bound(dt.allowed, sweep, opt / dt.time_scale, _bounds_of(p, dt), probes=12)
    assert tight <= opt / dt.time_scale * (1 + 1e-7)


@pytest.mark.slow
def test_probing_raises_the_bound_of_a_resnet_layer_graph():
    """ResNet-50 layers on 1 CPU + 4 accelerators (memory 70% full): the sweep bound is 106.7 ms (90.3 ms
    before a call held the nodes between a producer and its consumer, 82.3 ms with memory in 256 buckets
    per device), the best placement known 139.0 ms; assuming a latency of 108 ms, propagation leaves some
    layer no device, so probing up to there raises the bound."""
    g = resnet50(granularity="layer")
    p = Problem.from_graph(g, net_topology(g, 4, fill=0.7), objective="latency", max_subgraphs=2,
                           contiguous=False)
    dt = prepare(p, 0.139, probe_seconds=0)
    u = dt.time_scale
    sweep = float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max())
    assert dt.buckets == 4096
    assert sweep * u == pytest.approx(0.10666, rel=1e-3)
    raised = probe_lower_bound(dt.allowed, sweep, 0.108 / u, _bounds_of(p, dt), probes=1)
    assert raised * u == pytest.approx(sweep * u + (0.108 - sweep * u) / 16, rel=1e-9)

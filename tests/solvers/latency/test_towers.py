"""The articulation-chain bound (solvers/latency/towers.py): it never passes the optimum of small graphs of
parallel towers between articulation nodes (exhaustive, under ``evaluate``), and where memory forces a
module's towers apart from its input it sees the transfers a per-path bound misses."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.solvers.latency.data import _own_bytes, prepare  # noqa: E402
from planmap.solvers.latency.towers import articulation_chain, tower_bound  # noqa: E402
from planmap.workloads.graphs import paper_topology, profiled_graph  # noqa: E402
from tests.solvers.latency.cases import gpu_cluster, optimum, problem  # noqa: E402


def towers_edges(rng: np.random.Generator, n_max: int) -> list[tuple[int, int]]:
    """A source, then modules of 1-3 towers (1-2 nodes each) joined by a concat, up to ``n_max`` nodes."""
    edges: list[tuple[int, int]] = []
    x, nxt = 0, 1
    while True:
        towers = [int(rng.integers(1, 3)) for _ in range(int(rng.integers(1, 4)))]
        if nxt + sum(towers) + 1 > n_max:
            break
        ends = []
        for length in towers:
            prev = x
            for _ in range(length):
                edges.append((prev, nxt))
                prev, nxt = nxt, nxt + 1
            ends.append(prev)
        edges += [(e, nxt) for e in ends]
        x, nxt = nxt, nxt + 1
    if not edges:
        edges = [(0, 1)]
    return sorted(set(edges))


def towers_instance(seed: int, n_max: int, q: int):
    """Random towers with transfers comparable to compute and memory for about half the graph per
    accelerator (so the chain must cut), on the paper's cluster or on link-dependent GPUs."""
    rng = np.random.default_rng(seed)
    edges = towers_edges(rng, n_max)
    n = max(b for _, b in edges) + 1
    acc = rng.lognormal(0, 0.5, n)
    out = (rng.lognormal(0, 0.8, n) * 3e6).astype(np.int64)
    g = profiled_graph(edges, acc * rng.lognormal(np.log(5), 0.4, n), acc, rng.lognormal(np.log(0.5), 0.8, n),
                       size=rng.lognormal(0, 0.4, n) * 1e6, out_bytes=out)
    memory = float(g.state_bytes.sum()) * 0.55 + 4 * float(out.max())
    if seed % 3 == 2:
        return problem(g, gpu_cluster(memory), q)
    return problem(g, paper_topology(2, 1, memory=memory), q)


def modules_edges(rng: np.random.Generator, n_max: int) -> list[tuple[int, int]]:
    """A source, then (up to ``n_max`` nodes) a stem node (one in three) or a module of 2-3 towers joined by a
    concat: a tower is one node, a chain of two, or a fork of two (both read the module's input, one reads
    the other), so some towers are not chains."""
    edges: list[tuple[int, int]] = []
    x, nxt = 0, 1
    while nxt + 1 < n_max:
        if rng.random() < 1 / 3 or nxt + 3 > n_max:
            edges.append((x, nxt))
            x, nxt = nxt, nxt + 1
            continue
        ends = []
        for _ in range(int(rng.integers(2, 4))):
            kind = int(rng.integers(0, 3)) if nxt + 3 < n_max else 0
            if kind == 0:
                edges.append((x, nxt))
                ends.append(nxt)
            else:
                edges += [(x, nxt), (nxt, nxt + 1)] + ([(x, nxt + 1)] if kind == 2 else [])
                ends.append(nxt + 1)
            nxt += 1 + (kind > 0)
            if nxt + 1 >= n_max:
                break
        edges += [(e, nxt) for e in ends]
        x, nxt = nxt, nxt + 1
    return sorted(set(edges)) or [(0, 1)]


def modules_instance(seed: int, n_max: int = 8):
    """Random modules (:func:`modules_edges`) on one CPU 2-10x slower than the accelerators, transfers 0.3-4
    times a node's compute, memory for 15-60% of the graph per accelerator; q = 2 on one accelerator or
    q = 1 on two (three units either way, so every placement can be enumerated)."""
    rng = np.random.default_rng(seed)
    edges = modules_edges(rng, n_max)
    n = max(b for _, b in edges) + 1
    acc = rng.lognormal(0, 0.5, n)
    comm, slower, fill, q = rng.uniform(0.3, 4), rng.uniform(2, 10), rng.uniform(0.15, 0.6), int(rng.integers(1, 3))
    out = (rng.lognormal(0, 0.8, n) * 3e6).astype(np.int64)
    g = profiled_graph(edges, acc * slower * rng.uniform(0.5, 1.5, n), acc, rng.lognormal(np.log(comm), 0.8, n),
                       size=rng.lognormal(0, 0.6, n) * 1e6, out_bytes=out)
    memory = float(g.state_bytes.sum()) * fill + 4 * float(out.max())
    return problem(g, paper_topology(1 if q == 2 else 2, 1, memory=memory), q)


def _tower(p, dt) -> float:
    return tower_bound(dt.t, dt.allowed, p.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val, dt.pair_cons,
                       dt.recv, dt.send, _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes), dt.capacity,
                       None if dt.bounds is None else dt.bounds.ef) * dt.time_scale


def test_articulation_chain_follows_modules():
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (3, 5), (4, 6), (5, 6)]
    n = 7
    desc = [0] * n
    for a, b in sorted(edges, reverse=True):
        desc[a] |= desc[b] | (1 << b)
    src, dst = np.array([a for a, _ in edges]), np.array([b for _, b in edges])
    assert articulation_chain(n, src, dst, desc) == [0, 3, 6]


@pytest.mark.parametrize("seed,n,q", [(0, 7, 1), (1, 7, 1), (2, 7, 1), (3, 8, 1), (4, 6, 2), (5, 6, 2), (7, 7, 1),
                                      (8, 6, 2)])
def test_tower_bound_never_passes_the_optimum(seed, n, q):
    p = towers_instance(seed, n, q)
    opt = optimum(p)
    assert math.isfinite(opt)
    for bounds in (False, True):  # alone, and with the sweeps' chain points as a floor
        dt = prepare(p, bounds=bounds, probe_seconds=0)
        assert _tower(p, dt) <= opt * (1 + 1e-9)
    dt = prepare(p, opt, probe_seconds=0)  # with presolve at the optimum (as the IP calls it)
    assert _tower(p, dt) <= opt * (1 + 1e-9)
    assert dt.lower * dt.time_scale <= opt * (1 + 1e-7)


def test_tower_bound_charges_the_cut_between_modules():
    """Two modules of four 1-MB towers on two accelerators of 4.5 MB (no CPU): a module fits one call, two
    do not, so every placement cuts between them and pays a transfer (0.5 s each end). A path with one
    other branch per join holds 4.3 MB and fits: the sweeps see 0.7 s (with the call bound, prepare had
    1.8 s); the chain bound sees the cut and proves the optimum, 2.1 s."""
    edges = [(0, v) for v in range(1, 5)] + [(v, 5) for v in range(1, 5)]
    edges += [(5, v) for v in range(6, 10)] + [(v, 10) for v in range(6, 10)]
    size = np.array([0.1 if v in (0, 5, 10) else 1.0 for v in range(11)]) * 1e6
    g = profiled_graph(edges, [10.0] * 11, [0.1] * 11, 0.5, size=size, out_bytes=1)
    p = problem(g, paper_topology(2, 1, memory=4.5e6), q=1)
    allowed = p.allowed.copy()
    allowed[:, p.topology.is_cpu] = False  # keeps the enumeration small (2^11 placements)
    p = replace(p, allowed=allowed)
    opt = optimum(p)
    dt = prepare(p, probe_seconds=0)
    sweep = max(float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()) * dt.time_scale, 0.0)
    assert sweep == pytest.approx(0.7, abs=1e-6)
    assert opt == pytest.approx(2.1, abs=1e-6)
    assert _tower(p, dt) == pytest.approx(2.1, abs=1e-6)
    assert dt.lower * dt.time_scale == pytest.approx(2.1, abs=1e-6)  # prepare takes it


@pytest.mark.parametrize("seed", [53, 67, 76, 96, 114, 123, 124, 134, 225])
def test_cpu_ends_never_pass_the_optimum(seed):
    """Instances of :func:`modules_instance` where a CPU end's towers (:mod:`.tower_ends`), a tower in a third
    unit between two calls, or a side part's shortest path over the CPU and accelerator units raise the bound."""
    p = modules_instance(seed)
    opt = optimum(p)
    assert math.isfinite(opt)
    for bounds in (False, True):
        assert _tower(p, prepare(p, bounds=bounds, probe_seconds=0)) <= opt * (1 + 1e-9)
    assert _tower(p, prepare(p, opt, probe_seconds=0)) <= opt * (1 + 1e-9)


def test_cpu_end_charges_the_towers():
    """A module whose towers a call full of the stem cannot hold, before a concat on the CPU: they run on
    the CPU (2-10x slower) or in another call (a receive and a send each). Charging them proves the optimum
    (7.997 s; 6.900 s when they could sit in the call for free)."""
    p = modules_instance(225)
    dt = prepare(p, probe_seconds=0)
    assert optimum(p) == pytest.approx(7.9971, abs=1e-4)
    assert _tower(p, dt) == pytest.approx(7.9971, abs=1e-4)


def test_third_unit_waits_between_calls():
    """Two accelerators with one call each (q = 1): a chain tower neither call holds runs in a third unit
    after the first call and before the second, which the split between two calls now charges: 6.63 s
    before, the optimum 7.712 s now."""
    p = modules_instance(123)
    dt = prepare(p, probe_seconds=0)
    assert optimum(p) == pytest.approx(7.7119, abs=1e-4)
    assert _tower(p, dt) == pytest.approx(7.7119, abs=1e-4)


def test_side_part_pays_its_switches():
    """A tower beside a call at a CPU end runs on the CPU or in accelerator units that receive the value entering
    them and send the one leaving: charged along the chain (not the cheapest value anywhere in the tower), the
    bound rises from 4.858 s to the optimum, 6.255 s."""
    p = modules_instance(139)
    dt = prepare(p, probe_seconds=0)
    assert optimum(p) == pytest.approx(6.2547, abs=1e-4)
    assert _tower(p, dt) == pytest.approx(6.2547, abs=1e-4)


def test_split_charges_the_run_between_calls():
    """Between two calls a tower's nodes outside both are a run of it, after the first call and before the second,
    costing its shortest path over the CPU and accelerator units, while each call holds its part's memory and
    compute: the bound rises from 8.740 s (one node's time, no memory) to the optimum, 10.298 s."""
    p = modules_instance(277)
    dt = prepare(p, probe_seconds=0)
    assert optimum(p) == pytest.approx(10.2977, abs=1e-4)
    assert _tower(p, dt) == pytest.approx(10.2977, abs=1e-4)

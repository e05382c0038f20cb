"""What a contiguous pipeline solver plans on: *units* (nodes that must share a stage) and *device classes*.

:func:`planmap.evaluate.evaluate` judges a contiguous throughput plan on the **contiguity graph**
(the forward graph in training, the whole graph otherwise): every stage must be convex there and
the stages must form a pipeline order. Nodes outside it (backward nodes in training) only have to
follow their colocation class. So a stage is a union of units:

* each colocation class's contiguity nodes form one unit, and nodes that every convex set holding a
  class must also hold are fused with it (strongly connected components after contraction — exact,
  as in Tarnawski et al.'s ``fuseStronglyConnectedComponentsInForward``);
* a follower node (backward) joins the unit of its class;
* an *orphan* follower (no class, or a class without contiguity nodes) becomes a unit of its own,
  ordered by mirrored backward edges (the paper's artificial forward nodes). This is the one place
  where the solvers search less than ``evaluate`` allows: evaluate lets orphans go anywhere.

Devices are grouped into *classes* of interchangeable devices (same type, host, memory, allowed
nodes and transfer charges). The exact solvers need each device's transfer charges to depend only
on the paying device — true in the paper's setting (all transfers through host memory, CPUs free)
and on single-host clusters without CPUs in the plan; :func:`device_classes` says why when not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from planmap.errors import PlanmapError
from planmap.graph import topological_order
from planmap.problem import Problem
from planmap.vocabulary import Mode

__all__ = ["Units", "DeviceClasses", "build_units", "unit_memory", "remat_problem", "strong_components",
           "device_classes", "allreduce_times"]


@dataclass(frozen=True, eq=False)
class Units:
    """Nodes grouped into units, numbered in a topological order of the contracted contiguity graph.

    ``unit_of`` (n,) unit of each node; ``edges`` (E, 2) unit edges (pipeline direction, low -> high);
    ``contig`` (n,) the node counts for contiguity (forward in training).
    """

    unit_of: np.ndarray
    num_units: int
    edges: np.ndarray
    contig: np.ndarray

    def members(self) -> list[np.ndarray]:
        order = np.argsort(self.unit_of, kind="stable")
        bounds = np.searchsorted(self.unit_of[order], np.arange(self.num_units + 1))
        return [order[bounds[u]: bounds[u + 1]] for u in range(self.num_units)]


def contiguity_mask(problem: Problem) -> np.ndarray:
    """The nodes evaluate checks convexity on: the forward graph in training, else every node."""
    g = problem.graph
    if problem.mode is Mode.TRAINING and g.backward.any():
        return ~g.backward
    return np.ones(g.num_nodes, bool)


def build_units(problem: Problem) -> Units:
    g = problem.graph
    n = g.num_nodes
    contig = contiguity_mask(problem)
    cls = g.colocation.astype(np.int64)
    big = int(cls.max()) + 1 if n else 0
    key = np.where(cls >= 0, cls, big + np.arange(n))  # a classless node is its own class
    has_contig = np.zeros(big + n, bool)
    has_contig[key[contig]] = True
    # followers of a class with contiguity nodes join it; orphans keep their own key
    _, unit_of = np.unique(key, return_inverse=True)
    unit_of = unit_of.astype(np.int64)
    orphan = ~has_contig[key]
    s, d = g.node_edges
    s, d = s.astype(np.int64), d.astype(np.int64)
    both_c = contig[s] & contig[d]
    both_f = ~contig[s] & ~contig[d] & (orphan[s] | orphan[d])
    ea = np.concatenate([unit_of[s[both_c]], unit_of[d[both_f]]])
    eb = np.concatenate([unit_of[d[both_c]], unit_of[s[both_f]]])  # mirrored backward edges
    keep = ea != eb
    ea, eb = ea[keep], eb[keep]
    m = int(unit_of.max()) + 1 if n else 0
    # fuse strongly connected components (exact for classes: a convex set holding two nodes holds every path)
    ncomp, comp = strong_components(m, ea, eb)
    ca, cb = comp[ea], comp[eb]
    keep = ca != cb
    pairs = np.unique(np.stack([ca[keep], cb[keep]], 1), axis=0) if keep.any() else np.zeros((0, 2), np.int64)
    first_node = np.full(ncomp, n, np.int64)
    np.minimum.at(first_node, comp[unit_of], np.arange(n))
    order = topological_order(ncomp, pairs, first_node)
    rank = np.empty(ncomp, np.int64)
    rank[order] = np.arange(ncomp)
    node_unit = rank[comp[unit_of]]
    e = rank[pairs] if len(pairs) else pairs
    return Units(node_unit, ncomp, e.reshape(-1, 2), contig)


def strong_components(k: int, ea: np.ndarray, eb: np.ndarray) -> tuple[int, np.ndarray]:
    """Strongly connected components of the graph on ``k`` items with edges ``ea[i] -> eb[i]``: their
    number and each item's label. An acyclic graph (the usual case) is its own answer, found without
    scipy, whose import alone costs more than a small solve."""
    if topological_order(k, zip(np.asarray(ea).tolist(), np.asarray(eb).tolist(), strict=True)) is not None:
        return k, np.arange(k)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(ea)), (ea, eb)), shape=(k, k)).tocsr()
    ncomp, comp = connected_components(graph, directed=True, connection="strong")
    return int(ncomp), comp


def remat_problem(problem: Problem) -> Problem:
    """``problem`` with every stage recomputing its layers' forward (the other choice of ``remat: auto``)."""
    return replace(problem, cost=problem.cost.with_remat(True), remat_choice=False)


def unit_memory(problem: Problem, unit_of: np.ndarray, num_units: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per unit: state bytes, activation bytes stashed per in-flight microbatch (training only) and
    the largest working set — the memory terms a stage of units adds up (state, stash) or maximises
    (working set), as :func:`planmap.evaluate.evaluate` charges them. Parameters are not here: a
    parameter shared by several units is counted once per stage, which each exact solver encodes
    its own way."""
    g, cost = problem.graph, problem.cost
    state = np.zeros(num_units)
    np.add.at(state, unit_of, g.state_bytes.astype(float))
    stash = np.zeros(num_units)
    if problem.mode is Mode.TRAINING:
        np.add.at(stash, unit_of, cost.stash_bytes.astype(float))
    ws = np.zeros(num_units)
    np.maximum.at(ws, unit_of, cost.working_set.astype(float))
    return state, stash, ws


# ------------------------------------------------------------------------------------ devices
@dataclass(frozen=True, eq=False)
class DeviceClasses:
    """Interchangeable devices. ``devices[t]`` lists class ``t``'s devices (ascending); ``recv``/``send``
    (T, m) the charge a class-``t`` device pays to receive/send each value from/to another device."""

    devices: tuple[tuple[int, ...], ...]
    is_cpu: np.ndarray
    capacity: np.ndarray
    recv: np.ndarray
    send: np.ndarray
    allowed: np.ndarray  # (n, T)

    @property
    def num_classes(self) -> int:
        return len(self.devices)

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(d) for d in self.devices], np.int64)


class NonUniformCharges(PlanmapError):
    """A device's transfer charges depend on the other end, which the pipeline DP cannot model."""


def device_classes(problem: Problem) -> DeviceClasses:
    """Group the devices a plan may use; raise PlanmapError when charges depend on both ends."""
    topo, cost, g = problem.topology, problem.cost, problem.graph
    cand = np.flatnonzero(problem.allowed.any(axis=0))
    if problem.max_stages is not None and problem.max_stages < 1:
        raise PlanmapError("maxStages must be at least 1")
    mats = [(topo.recv_paid, topo.recv_lat, topo.recv_ibw), (topo.send_paid, topo.send_lat, topo.send_ibw)]
    for side, (paid, lat, ibw) in enumerate(mats):
        for a in cand.tolist():
            others = cand[cand != a]
            if not len(others):
                continue
            idx = (others, a) if side == 0 else (a, others)
            p, la, ib = paid[idx], np.where(paid[idx], lat[idx], 0.0), np.where(paid[idx], ibw[idx], 0.0)
            if p.min() != p.max() or la.min() != la.max() or ib.min() != ib.max():
                what = "receive" if side == 0 else "send"
                raise NonUniformCharges(
                    f"the exact pipeline solvers need transfer charges that depend only on the paying device, but "
                    f"what {topo.names[a]} pays to {what} a tensor depends on the other end (e.g. a direct link "
                    "to some devices and host memory to others); use solver 'ip' or 'local-search', or pin "
                    "the model to devices of one kind")
    values = np.arange(g.num_values)
    keys: dict[tuple, list[int]] = {}
    for d in cand.tolist():
        other = int(cand[cand != d][0]) if len(cand) > 1 else d
        sig = (int(topo.device_type[d]), int(topo.device_host[d]), bool(topo.is_cpu[d]), float(topo.memory[d]),
               problem.allowed[:, d].tobytes(), bool(topo.recv_paid[other, d]), float(topo.recv_lat[other, d]),
               float(topo.recv_ibw[other, d]), bool(topo.send_paid[d, other]), float(topo.send_lat[d, other]),
               float(topo.send_ibw[d, other]))
        keys.setdefault(sig, []).append(d)
    devs = tuple(tuple(v) for v in sorted(keys.values(), key=lambda v: v[0]))
    reps = [v[0] for v in devs]
    recv = np.zeros((len(devs), g.num_values))
    send = np.zeros((len(devs), g.num_values))
    for t, d in enumerate(reps):
        others = cand[cand != d]
        if len(others):
            recv[t] = cost.recv_cost(values, int(others[0]), d)
            send[t] = cost.send_cost(values, d, int(others[0]))
    return DeviceClasses(devs, topo.is_cpu[reps].copy(), problem.capacity[reps].copy(), recv, send,
                         problem.allowed[:, reps].copy())


def allreduce_times(problem: Problem, devices: tuple[int, ...], nbytes: np.ndarray) -> np.ndarray:
    """``Topology.allreduce_time`` over ``devices`` for many byte counts at once (same arithmetic)."""
    p = len(devices)
    nbytes = np.asarray(nbytes, float)
    if p <= 1:
        return np.zeros_like(nbytes)
    d = np.asarray(devices, np.int32)
    nxt = np.roll(d, -1)
    topo = problem.topology
    lat, ibw = float(topo.path_lat[d, nxt].max()), float(topo.path_ibw[d, nxt].max())
    ring = 2 * (p - 1) / p * nbytes * ibw + 2 * (p - 1) * lat
    tree = 2 * math.ceil(math.log2(p)) * (lat + nbytes * ibw)
    return np.where(nbytes > 0, np.minimum(ring, tree), 0.0)

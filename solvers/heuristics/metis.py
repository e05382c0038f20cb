"""``metis``: a graph partitioner baseline — the "Scotch" baseline of Tarnawski et al.

A general-purpose partitioner knows nothing of schedules: it splits the operator graph (as an
undirected graph) into one part per accelerator, balancing compute and cutting as little transfer
time as it can. That is what the papers compare against. Here:

* vertices are operators, with each colocation class (forward + backward of a layer) contracted
  into one vertex, weighted by accelerator time (integer-scaled);
* edges carry the transfer time of the values crossing them (send + receive between two
  accelerators), summed per vertex pair;
* target part weights follow device speed, so a faster device gets a larger part;
* parts become devices (within a device type, in order of where their work sits in the graph),
  operators a device cannot run move to the fastest one that can, and the partition is made
  structurally valid: convex subgraph calls for latency (at most q per device, repaired when METIS's
  parts need more), convex stages for contiguous pipelines. When the compute balance overflows a
  device's memory, the partition is redone balancing bytes instead, and the better plan is kept.

Deterministic: METIS runs with ``options.seed``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status

from ..node_memory import add_param_bytes
from ..repair import best_effort, repair, supported
from ..segments import solution_from_devices

__all__ = ["Metis", "metis_partition"]

VERSION = "1"
_SCALE = 1 << 20  # integer weights are scaled to about this total per constraint


def _targets(problem: Problem) -> list[int]:
    topo = problem.topology
    devs = [int(d) for d in (topo.accelerators if len(topo.accelerators) else topo.cpus)]
    if problem.objective == "throughput" and problem.max_stages is not None:
        devs = devs[: problem.max_stages]
    return devs


def _vertices(problem: Problem) -> tuple[np.ndarray, int]:
    """Vertex id of each node: colocation classes contracted."""
    cls = problem.graph.colocation.astype(np.int64)
    n = len(cls)
    key = np.where(cls >= 0, cls, (cls.max() + 1 if n else 0) + np.arange(n))
    _, vid = np.unique(key, return_inverse=True)
    vid = vid.ravel()
    return vid, int(vid.max()) + 1 if n else 0


@contextlib.contextmanager
def _quiet_c_output():
    """Silence METIS's own C-level prints (e.g. "***Cannot bisect a graph with 0 vertices!" when a
    part of a recursive bisection is empty — harmless: the partition is still returned)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _scaled(w: np.ndarray) -> np.ndarray:
    total = float(w.sum())
    if total <= 0 or not np.isfinite(total):
        return np.ones(len(w), np.int64)
    return np.maximum(1, np.round(w * (_SCALE / total))).astype(np.int64)


def metis_partition(problem: Problem, seed: int = 0, balance: str = "compute") -> np.ndarray:
    """Device of each node from a METIS k-way partition (before any structural repair)."""
    import pymetis

    g, cost = problem.graph, problem.cost
    n = g.num_nodes
    devs = _targets(problem)
    k = len(devs)
    if n == 0:
        return np.zeros(0, np.int32)
    if k == 1:
        return np.full(n, devs[0], np.int32)
    vid, V = _vertices(problem)
    ref = devs[0]
    # vertex weights: accelerator time (or bytes) of the members
    if balance == "compute":
        t = cost.device_compute[:, ref]
        t = np.where(np.isfinite(t), t, np.nanmin(np.where(problem.allowed, cost.device_compute, np.nan), axis=1))
        node_w = np.nan_to_num(t, nan=0.0)
    else:
        node_w = add_param_bytes(problem, g.state_bytes.astype(float) + cost.stash_bytes)
    vw = np.zeros(V)
    np.add.at(vw, vid, node_w)
    # edge weights: transfer time of the distinct values between two vertices
    src = g.edge_src
    keep = src >= 0
    val, dst = g.edge_value[keep], g.edge_dst[keep]
    a, b = vid[g.value_node[val]], vid[dst]
    cross = a != b
    val, a, b = val[cross], a[cross], b[cross]
    if len(val):
        trip = np.unique(np.stack([val, np.minimum(a, b), np.maximum(a, b)], 1), axis=0)
        other = devs[1]
        c = cost.send_cost(trip[:, 0], ref, other) + cost.recv_cost(trip[:, 0], ref, other)
        c = np.where(c > 0, c, 1e-12 + g.value_bytes[trip[:, 0]] * 1e-15)
        pair, inv = np.unique(trip[:, 1:], axis=0, return_inverse=True)
        ew = np.zeros(len(pair))
        np.add.at(ew, inv.ravel(), c)
        u = np.concatenate([pair[:, 0], pair[:, 1]])
        v = np.concatenate([pair[:, 1], pair[:, 0]])
        w = np.concatenate([ew, ew])
    else:
        u = v = np.zeros(0, np.int64)
        w = np.zeros(0)
    order = np.lexsort((v, u))
    u, v, w = u[order], v[order], w[order]
    xadj = np.zeros(V + 1, np.int64)
    np.add.at(xadj, u + 1, 1)
    xadj = np.cumsum(xadj)
    # target part weights: device speed over the nodes all devices can run
    common = problem.allowed[:, devs].all(axis=1)
    speed = np.array([1.0 / max(float(cost.device_compute[common, d].sum()), 1e-30) for d in devs])
    tp = speed / speed.sum()
    opts = pymetis.Options(seed=int(seed))
    graph = pymetis.CSRAdjacency(xadj.astype(np.int32).tolist(), v.astype(np.int32).tolist())
    with _quiet_c_output():
        _, parts = pymetis.part_graph(k, graph, vweights=_scaled(vw).tolist(),
                                      eweights=_scaled(w).tolist() if len(w) else None, tpwgts=tp.tolist(),
                                      options=opts)
    parts = np.asarray(parts, np.int64)
    # within one device type, parts go to devices in the order of where their work sits
    mean_pos = np.full(k, np.inf)
    node_part = parts[vid]
    for j in range(k):
        members = np.flatnonzero(node_part == j)
        if len(members):
            mean_pos[j] = members.mean()
    part_dev = np.empty(k, np.int64)
    types = problem.topology.device_type[devs]
    for t_ in np.unique(types):
        idx = np.flatnonzero(types == t_)
        part_dev[idx[np.argsort(mean_pos[idx], kind="stable")]] = np.asarray(devs)[idx]
    return part_dev[node_part].astype(np.int32)


class Metis:
    """METIS k-way partition over the accelerators, made valid for the problem's structure."""

    name = "metis"
    objectives = frozenset({"latency", "throughput"})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        import pymetis  # noqa: F401 - fail early (SolverUnavailableError via the registry) when missing

        t0 = time.perf_counter()
        cert = Certificate(Status.HEURISTIC, self.name, version=VERSION)
        best = None
        for balance in ("compute", "memory"):
            device_of = repair(problem, supported(problem, metis_partition(problem, options.seed, balance)))
            sol = solution_from_devices(problem, device_of, cert)
            ev = evaluate(problem, sol)
            if best is None or (not ev.feasible, ev.objective) < (not best[1].feasible, best[1].objective):
                best = (sol, ev)
            if ev.feasible and balance == "compute" and not _memory_tight(ev):
                break
        return best_effort(problem, *best, cert, options, t0)


def _memory_tight(ev) -> bool:
    """Whether some device is within 5% of its capacity (a memory-balanced partition may do better)."""
    cap = ev.capacity
    finite = np.isfinite(cap)
    return bool((ev.memory[finite] > 0.95 * cap[finite]).any())

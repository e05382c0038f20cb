"""The numbers a latency IP is built from.

:func:`prepare` turns a :class:`~planmap.problem.Problem` into numpy arrays in well-conditioned
model time units (transfer charges per value and pair of devices exactly as
:func:`planmap.evaluate.evaluate` charges them, min-time longest paths, memory terms, colocation
pairs, interchangeable devices). The placements the model starts from come from :mod:`.baselines`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from planmap.crossings import crossings
from planmap.problem import Problem
from planmap.vocabulary import Mode

from .blocks import block_lower_bound
from .calls import call_lower_bound
from .chains import contracted_block_bound
from .cuts import (
    BUCKETS,
    PROBE_ROUNDS,
    TimeBounds,
    bucket_count,
    fits_alone,
    memory_buckets,
    probe_lower_bound,
    reduce_allowed,
    time_bounds,
)
from .frontier import frontier_search
from .lastcall import last_call_bound
from .loads import contention_bound
from .shaving import branch_refutes
from .towers import tower_bound

__all__ = ["LatencyData", "prepare", "interchangeable_devices", "charge_levels", "MEMORY_MARGIN"]

MEMORY_MARGIN = 1e-6  # share of each device's memory kept free of backend tolerances
PROBE_SECONDS = 5.0  # default time for the probing lower bound (:func:`.cuts.probe_lower_bound`)
FRONTIER_SECONDS = 5.0  # default time for the frontier DP (:mod:`.frontier`)
BRANCH_MIN_SECONDS = 30.0  # probing branches (:mod:`.shaving`) only with this much time: a branch costs two
# propagations; with less it gains nothing, and its time comes out of the model build's time box


# --------------------------------------------------------------------------------------- data
@dataclass(frozen=True, eq=False)
class LatencyData:
    """The numbers of one latency problem, as numpy arrays in model time (``time_scale`` seconds each).

    Units are where nodes run: accelerator subgraph slots ``0..S-1`` (``q`` per accelerator, run in
    slot order) followed by one unit per CPU device. Values are the node outputs some other node
    consumes; ``pairs`` are the distinct (value, consumer) uses.
    """

    n: int
    q: int
    time_scale: float  # seconds per model time unit
    horizon: float  # upper bound on the latency, model units
    unit_dev: np.ndarray  # (U,) device of each unit
    num_slots: int
    slot_pos: np.ndarray  # (S,) position of each slot on its device
    t: np.ndarray  # (n, D) compute, model units (inf where not allowed)
    allowed: np.ndarray  # (n, D)
    val_prod: np.ndarray  # (V,) producer node of each value
    pair_val: np.ndarray  # (P,) value index (into val_prod) of each use
    pair_cons: np.ndarray  # (P,) consumer node of each use
    recv: np.ndarray  # (V, D, D) [j, a, b]: receiver on b pays for a producer on a (a == b: other unit)
    send: np.ndarray  # (V, D, D) [j, a, b]: sender on a pays for a consumer on b
    edges: tuple[np.ndarray, np.ndarray]  # unique node edges (src, dst)
    head: np.ndarray  # (n,) lower bound on each node's finish time, model units
    node_mem: np.ndarray  # (n,) bytes resident wherever the node runs (state, stash)
    working_set: np.ndarray  # (n,) bytes
    param_use: tuple[np.ndarray, np.ndarray]  # distinct (param value, consumer node)
    param_bytes: np.ndarray  # (m,) bytes per value (x param factor)
    capacity: np.ndarray  # (D,) bytes
    colocated: tuple[tuple[int, int], ...]  # consecutive members of each colocation class
    classes: tuple[tuple[int, ...], ...]  # interchangeable devices (symmetry breaking)
    bounds: TimeBounds | None = None  # placement-aware time bounds (see .cuts)
    lat_ub: np.ndarray | None = None  # (n,) upper bound on each node's finish time, model units
    lower: float = 0.0  # lower bound on the latency, model units (sweep bound, raised by probing)
    buckets: int = BUCKETS  # memory resolution of ``bounds`` (see :func:`.cuts.bucket_count`)

    @property
    def num_units(self) -> int:
        return len(self.unit_dev)


def interchangeable_devices(problem: Problem) -> list[tuple[int, ...]]:
    """Groups of devices that any placement may permute without changing anything evaluate sees:
    same type and memory, same allowed nodes, and transfer charges invariant under the swap."""
    topo = problem.topology
    mats = (topo.send_lat, topo.send_ibw, topo.recv_lat, topo.recv_ibw, topo.send_paid, topo.recv_paid)
    D = topo.num_devices
    classes: list[list[int]] = []
    for d in range(D):
        for cls in classes:
            r = cls[0]
            if (topo.signature(r) != topo.signature(d) or topo.memory[r] != topo.memory[d]
                    or topo.host_io[r] != topo.host_io[d]
                    or not np.array_equal(problem.allowed[:, r], problem.allowed[:, d])):
                continue
            perm = np.arange(D)
            perm[r], perm[d] = d, r
            if all(np.array_equal(M[np.ix_(perm, perm)], M) for M in mats):
                cls.append(d)
                break
        else:
            classes.append([d])
    return [tuple(c) for c in classes if len(c) > 1]


def _head(n: int, pred: tuple[np.ndarray, np.ndarray], tmin: np.ndarray) -> np.ndarray:
    indptr, ids = pred
    head = np.zeros(n)
    for v in range(n):
        p = ids[indptr[v]: indptr[v + 1]]
        head[v] = tmin[v] + (head[p].max() if len(p) else 0.0)
    return head


def _trivial_horizon(problem: Problem) -> float:
    """A latency no placement exceeds: every compute and every charge paid one after another."""
    cost, g = problem.cost, problem.graph
    t = np.where(problem.allowed, cost.device_compute, 0.0)
    total = float(t.max(axis=1).sum()) if g.num_nodes else 0.0
    src = g.edge_src
    vals = g.edge_value[src >= 0]
    if len(vals):
        D = problem.num_devices
        a, b = np.meshgrid(np.arange(D), np.arange(D), indexing="ij")
        worst = max(float(cost.recv_cost(vals[:, None, None], a[None], b[None]).max()),
                    float(cost.host_io_cost(vals).max()))
        worst += max(float(cost.send_cost(vals[:, None, None], a[None], b[None]).max()),
                     float(cost.host_io_cost(vals).max()))
        total += worst * len(vals)
    return total


def _own_bytes(node_mem: np.ndarray, param_use, param_bytes: np.ndarray) -> np.ndarray:
    """Bytes a node brings to any device it runs on, whatever else runs there: its state and the
    parameters no other node uses (shared ones are held once, so they are left out)."""
    pv, pn = param_use
    own = node_mem.astype(float).copy()
    if len(pv):
        users = np.bincount(pv, minlength=len(param_bytes))
        solo = users[pv] == 1
        own += np.bincount(pn[solo], weights=param_bytes[pv[solo]], minlength=len(own))
    return own


def _colocated_allowed(allowed: np.ndarray, colocation: np.ndarray) -> np.ndarray:
    """A colocation class runs on one device: only where every member may run."""
    out = allowed.copy()
    for c in np.unique(colocation[colocation >= 0]).tolist():
        members = np.flatnonzero(colocation == c)
        out[members] = out[members].all(axis=0)
    return out


def prepare(problem: Problem, horizon: float | None = None, *, bounds: bool = True,
            probe_seconds: float = PROBE_SECONDS, frontier_seconds: float = FRONTIER_SECONDS) -> LatencyData:
    """The model's data; ``horizon`` (seconds) bounds the latency of solutions worth finding.

    With ``bounds`` (the default), placement-aware time bounds (:mod:`.cuts`) tighten the
    node time windows and rule out devices no placement under the horizon can use, so the model
    never creates their columns; without, the model is the plain formulation (tests compare both).
    With a horizon, up to ``frontier_seconds`` go to the frontier DP (:mod:`.frontier`, the horizon as its
    upper bound) and up to ``probe_seconds`` to raising the latency's lower bound by probing (branching on the
    device kind from ``BRANCH_MIN_SECONDS`` on).
    """
    g, topo, cost = problem.graph, problem.topology, problem.cost
    n, D = g.num_nodes, topo.num_devices
    q = max(1, int(problem.max_subgraphs))
    acc = np.flatnonzero(~topo.is_cpu)
    cpus = np.flatnonzero(topo.is_cpu)
    slot_dev = np.repeat(acc, q)
    slot_pos = np.tile(np.arange(q), len(acc))
    unit_dev = np.concatenate([slot_dev, cpus]).astype(np.int64)
    h = _trivial_horizon(problem) if horizon is None else float(horizon)
    time_scale = 10.0 ** (math.floor(math.log10(h)) - 2) if h > 0 and math.isfinite(h) else 1.0
    allowed = problem.allowed.copy()
    t = np.where(allowed, cost.device_compute, np.inf) / time_scale
    # values that cross: (value, consumer) uses of node outputs
    reads = crossings(g, np.arange(n))  # every (value, reading node) pair may cross
    vals = reads.values
    a, b = np.meshgrid(np.arange(D), np.arange(D), indexing="ij")
    recv = cost.recv_cost(vals[:, None, None], a[None], b[None]).astype(float)
    send = cost.send_cost(vals[:, None, None], a[None], b[None]).astype(float)
    io = cost.host_io_cost(vals) if len(vals) else np.zeros(0)
    for d in np.flatnonzero(topo.host_io):
        recv[:, d, d] = io
        send[:, d, d] = io
    tmin = np.where(allowed, cost.device_compute, np.inf).min(axis=1) / time_scale if n else np.zeros(0)
    node_mem = g.state_bytes.astype(float)
    if problem.mode is Mode.TRAINING:
        node_mem = node_mem + cost.stash_bytes
    pv, pn = cost.param_use
    puse = np.unique(np.stack([pv, pn], 1), axis=0) if len(pv) else np.zeros((0, 2), np.int64)
    cls = g.colocation
    order = np.lexsort((np.arange(n), cls))
    c_sorted = cls[order]
    same = (c_sorted[1:] == c_sorted[:-1]) & (c_sorted[1:] >= 0)
    colocated = tuple((int(order[i]), int(order[i + 1])) for i in np.flatnonzero(same))
    H = h / time_scale * (1 + 1e-9) + 1e-9
    head = _head(n, g.pred, np.where(np.isfinite(tmin), tmin, 0.0))
    val_prod = reads.producer[reads.starts]
    pair_val, pair_cons = reads.value_index, reads.consumer_group
    recv, send = recv / time_scale, send / time_scale
    working_set = cost.working_set.astype(float)
    param_use, param_bytes = (puse[:, 0], puse[:, 1]), g.value_bytes.astype(float) * cost.param_factor
    capacity = problem.capacity.astype(float)
    tb, lat_ub, lower = None, None, 0.0
    buckets = bucket_count(n, D)
    if bounds and n:
        ok = _colocated_allowed(allowed & fits_alone(node_mem, working_set, param_use, param_bytes, capacity, -1e-12),
                                cls)
        if ok.any(axis=1).all():  # else the memory precheck or the MIP says why
            allowed = ok

        own = _own_bytes(node_mem, param_use, param_bytes)
        size = memory_buckets(own, capacity, buckets)

        def bounds_of(a):
            return time_bounds(t, a, topo.is_cpu, q, val_prod, pair_val, pair_cons, recv, send, size, buckets)

        if horizon is not None:
            reduced = _colocated_allowed(reduce_allowed(allowed, H, bounds_of)[0], cls)
            if reduced.any(axis=1).all():  # else nothing beats the horizon: the MIP proves it
                allowed = reduced
        tb = bounds_of(allowed)

        def load_of(a, b):
            return contention_bound(t, a, topo.is_cpu, b)

        lower = max(float(np.where(allowed, tb.through, np.inf).min(axis=1).max()), load_of(allowed, tb),
                    call_lower_bound(t, allowed, topo.is_cpu, q, g.node_edges, val_prod, pair_val, pair_cons, recv,
                                     send, own, capacity, tb.tail_fin),
                    block_lower_bound(t, allowed, topo.is_cpu, q, g.node_edges, val_prod, pair_val, pair_cons, recv,
                                      send, own, working_set, capacity),
                    contracted_block_bound(t, allowed, topo.is_cpu, q, g.node_edges, val_prod, pair_val, pair_cons,
                                           recv, send, own, working_set, capacity, g.colocation),
                    tower_bound(t, allowed, topo.is_cpu, q, g.node_edges, val_prod, pair_val, pair_cons, recv,
                                send, own, capacity, tb.ef, working_set),
                    last_call_bound(t, allowed, topo.is_cpu, q, g.node_edges, val_prod, pair_val, pair_cons, recv,
                                    send, own, capacity))
        if horizon is not None and frontier_seconds > 0 and math.isfinite(lower) and lower < h / time_scale:
            # the frontier DP: exact on the calls' order, so at the horizon it closes small graphs outright; where its
            # labels outgrow their cap it proves what it can below the horizon (:func:`.frontier.frontier_search`)
            lower = max(lower, min(h / time_scale, frontier_search(
                t, allowed, topo.is_cpu, q, g.node_edges, val_prod, pair_val, pair_cons, recv, send, own, capacity,
                lower=lower, horizon=H, seconds=frontier_seconds)))
        if horizon is not None and probe_seconds > 0 and math.isfinite(lower):
            def refute(a, level, deadline):
                return branch_refutes(a, level, bounds_of, topo.is_cpu, rounds=PROBE_ROUNDS, deadline=deadline,
                                      load_of=load_of)

            lower = probe_lower_bound(allowed, lower, H, bounds_of, deadline=time.perf_counter() + probe_seconds,
                                      load_of=load_of, refute=refute if probe_seconds >= BRANCH_MIN_SECONDS else None)
        fin = np.where(allowed, tb.finish, np.inf).min(axis=1)
        head = np.maximum(head, np.where(np.isfinite(fin), fin, head))
        after = np.where(allowed, tb.tail_fin, np.inf).min(axis=1)
        lat_ub = np.maximum(H * (1 + 1e-9) - np.where(np.isfinite(after), after, 0.0), head)
    return LatencyData(
        n=n, q=q, time_scale=time_scale, horizon=H, unit_dev=unit_dev, num_slots=len(slot_dev),
        slot_pos=slot_pos, t=t, allowed=allowed, val_prod=val_prod, pair_val=pair_val, pair_cons=pair_cons,
        recv=recv, send=send,
        edges=(np.asarray(g.node_edges[0], np.int64), np.asarray(g.node_edges[1], np.int64)),
        head=head, node_mem=node_mem, working_set=working_set, param_use=param_use, param_bytes=param_bytes,
        capacity=capacity, colocated=colocated, classes=tuple(interchangeable_devices(problem)),
        bounds=tb, lat_ub=lat_ub, lower=lower, buckets=buckets,
    )


def charge_levels(charges: np.ndarray, where: np.ndarray) -> tuple[float | None, list[tuple[float, np.ndarray]]]:
    """Charges over the possible positions of the other end: (the one charge, []) when uniform,
    else (None, [(level, positions paying at least that level)]) for each positive level."""
    c = charges[where]
    if len(c) == 0:
        return 0.0, []
    if np.all(c == c[0]):
        return float(c[0]), []
    return None, [(float(lv), where & (charges >= lv)) for lv in np.unique(c[c > 0])]

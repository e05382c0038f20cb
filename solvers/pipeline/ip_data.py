"""The data the throughput IP is built from: units, charges, memory terms, contiguity edges.

Kept apart from :mod:`planmap.solvers.pipeline.ip` (the model) so the model reads as a list of
constraints. Units are colocation classes (a classless node is its own unit); transfer charges
come from :func:`planmap.solvers.pipeline.stage_units.device_classes` when each device's charge depends only
on itself (one number per value and device); otherwise per (sender, receiver) pair, from the cost
model, and the model charges a receiver at its sender's rate and a sender at its dearest receiver's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.errors import PlanmapError
from planmap.problem import Problem

from .stage_units import contiguity_mask, crossing_values, device_classes, unit_memory

__all__ = ["IPData", "prepare", "interchangeable"]


@dataclass(frozen=True, eq=False)
class IPData:
    """Arrays the model is built from. Units are colocation classes (a classless node is its own)."""

    unit_of: np.ndarray  # (n,)
    U: int
    D: int
    allowed: np.ndarray  # (U, D)
    tf: np.ndarray  # (U, D) forward compute, seconds
    tb: np.ndarray  # (U, D) backward compute
    val_prod: np.ndarray  # (V,) producer unit
    val_cons: list[np.ndarray]  # consumer units (producer's excluded)
    val_back: np.ndarray  # (V,) produced by a backward node
    recv: np.ndarray  # (V, D) charge a device pays to receive the value (max over senders)
    send: np.ndarray  # (V, D) charge a device pays to send it (max over receivers)
    pair_recv: np.ndarray | None  # (V, D, D) [value, sender, receiver] when charges depend on both ends
    pair_send: np.ndarray | None  # (V, D, D) [value, sender, receiver]
    params: list[tuple[float, np.ndarray]]  # (bytes x factor, user units)
    state: np.ndarray  # (U,) bytes
    stash: np.ndarray  # (U,) bytes per in-flight microbatch
    ws: np.ndarray  # (U,) largest working set
    capacity: np.ndarray  # (D,)
    edges: np.ndarray  # (E, 2) unit edges of the contiguity graph
    classes: tuple[tuple[int, ...], ...]  # interchangeable devices
    in_flight: float  # microbatches held by every stage (when not 1F1B-dependent)
    one_f_one_b: bool  # in-flight depends on the stage's place in the pipeline (modelled exactly)
    relaxed: bool  # 1F1B in non-contiguous mode: one microbatch in flight (a relaxation; see ThroughputIP)
    microbatches: int
    ordered: bool  # order variables (contiguous mode)
    unit: float  # seconds per model time unit


def prepare(problem: Problem, unit: float | None = None) -> IPData:
    g, cost = problem.graph, problem.cost
    n, D = g.num_nodes, problem.num_devices
    cls = g.colocation.astype(np.int64)
    big = int(cls.max()) + 1 if n else 0
    _, unit_of = np.unique(np.where(cls >= 0, cls, big + np.arange(n)), return_inverse=True)
    unit_of = unit_of.astype(np.int64)
    U = int(unit_of.max()) + 1 if n else 0
    try:
        dc = device_classes(problem)
    except PlanmapError:  # charges depend on both ends: per (sender, receiver) charges below
        dc = None
    allowed = np.ones((U, D), bool)
    np.logical_and.at(allowed, unit_of, problem.allowed & np.isfinite(cost.device_compute))
    t = np.where(np.isfinite(cost.device_compute), cost.device_compute, 0.0)
    tf, tb = np.zeros((U, D)), np.zeros((U, D))
    np.add.at(tf, unit_of[~g.backward], t[~g.backward])
    np.add.at(tb, unit_of[g.backward], t[g.backward])
    pairs, vals, starts = crossing_values(problem, unit_of)
    ends = np.append(starts[1:], len(pairs)).astype(np.int64)
    cons = [pairs[a:b, 1] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    pair_recv = pair_send = None
    if dc is not None:
        class_of = np.full(D, -1)
        for k, devs in enumerate(dc.devices):
            class_of[list(devs)] = k
        recv = np.zeros((len(vals), D))
        send = np.zeros((len(vals), D))
        for d in range(D):
            if class_of[d] >= 0:
                recv[:, d] = dc.recv[class_of[d], vals]
                send[:, d] = dc.send[class_of[d], vals]
        classes = tuple(tuple(c) for c in dc.devices if len(c) > 1)
    else:
        src, dst = np.meshgrid(np.arange(D), np.arange(D), indexing="ij")
        off = src != dst
        pair_recv = np.where(off, cost.recv_cost(vals[:, None, None], src[None], dst[None]), 0.0)
        pair_send = np.where(off, cost.send_cost(vals[:, None, None], src[None], dst[None]), 0.0)
        recv, send = pair_recv.max(axis=1), pair_send.max(axis=2)
        classes = interchangeable(problem)
    pv, pn = cost.param_use
    params = []
    if len(pv):
        pp = np.unique(np.stack([pv, unit_of[pn]], 1), axis=0)
        for v in np.unique(pp[:, 0]).tolist():
            b = float(g.value_bytes[v]) * cost.param_factor
            if b > 0:
                params.append((b, pp[pp[:, 0] == v, 1]))
    state, stash, ws = unit_memory(problem, unit_of, U)
    mask = contiguity_mask(problem)
    s, d = g.node_edges
    s, d = s.astype(np.int64), d.astype(np.int64)
    k = mask[s] & mask[d] & (unit_of[s] != unit_of[d])
    edges = np.unique(np.stack([unit_of[s[k]], unit_of[d[k]]], 1), axis=0) if k.any() else np.zeros((0, 2), np.int64)
    m = max(problem.microbatches, 1)
    stash_binds = problem.mode == "training" and stash.any() and np.isfinite(problem.capacity).any()
    varying = stash_binds and problem.schedule == "1f1b" and m > 1
    fb = varying and problem.contiguous
    relaxed = varying and not problem.contiguous
    in_flight = 1.0 if varying else float(problem.in_flight(0, max(D, 1)))
    if unit is None:
        unit = float(max(tf.sum(0).max() + tb.sum(0).max(), 1e-30)) / max(D, 1)
    return IPData(unit_of, U, D, allowed, tf, tb, unit_of[g.value_node[vals]] if len(vals) else np.zeros(0, np.int64),
                  cons, g.backward[g.value_node[vals]] if len(vals) else np.zeros(0, bool), recv, send, pair_recv,
                  pair_send, params, state,
                  stash, ws, problem.capacity.copy(), edges, classes,
                  in_flight, bool(fb), bool(relaxed), m, bool(problem.contiguous), unit)




def interchangeable(problem: Problem) -> tuple[tuple[int, ...], ...]:
    """Devices that can swap places in any plan: same type, host, memory and allowed nodes, and
    every transfer charge to and from third devices the same (so the symmetry rows stay valid)."""
    t = problem.topology
    mats = (t.send_lat, t.send_ibw, t.recv_lat, t.recv_ibw, t.send_paid, t.recv_paid, t.path_lat, t.path_ibw)
    groups: dict[tuple, list[int]] = {}
    for d in range(problem.num_devices):
        key = (int(t.device_type[d]), int(t.device_host[d]), float(t.memory[d]), problem.allowed[:, d].tobytes())
        groups.setdefault(key, []).append(d)
    out = []
    for devs in groups.values():
        keep = [devs[0]]
        for e in devs[1:]:
            d = keep[0]
            others = [x for x in range(problem.num_devices) if x not in (d, e)]
            if all(np.array_equal(m[d, others], m[e, others]) and np.array_equal(m[others, d], m[others, e])
                   and m[d, e] == m[e, d] for m in mats):
                keep.append(e)
        if len(keep) > 1:
            out.append(tuple(keep))
    return tuple(sorted(out))

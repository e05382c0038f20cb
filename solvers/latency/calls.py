"""A latency bound from calls being all-or-nothing, with at most ``q`` calls per accelerator.

A call (a convex subgraph run on one accelerator) receives all its inputs, computes every node, then
sends; the sweeps of :mod:`.cuts` follow one path through a call and charge only that path's compute,
so a grid of cells that a wavefront could run in parallel (GNMT's encoder) looks as fast as its
critical path. This bound charges a call's whole compute before anything it feeds starts.

Let ``P(m)`` be ``m`` and its ancestors, and ``C`` the call that runs ``m``. By convexity ``U = C ∩
P(m)`` is an upper set of ``P(m)`` (a node of ``P(m)`` between two nodes of ``C`` is in ``C``), and every
other node of ``P(m)`` finishes (its call finishes) before ``C`` starts: it reaches ``m`` through a
producer of ``C``. Follow any path ``v_0 -> ... -> v_L = m``: ``U`` holds a suffix ``v_i .. v_L``, so ``C``
computes the whole cone ``{y : v_i <= y <= m}`` (an upper set contains everything above its nodes),
and when ``i > 0`` it starts after the call of ``v_{i-1}`` has sent that value and ``C`` has received it.
No call that meets ``P(v_{i-1})`` is ``C``, so at most ``c - 1`` of the ``c`` calls that meet ``P(m)`` do:

    B(m, c) >= max over paths into m of min over i of [Bout(v_{i-1}, c - 1) + recv + work(cone(v_i, m))]

(``i = 0``: the whole path in ``C``, from time 0), where ``B(m, c)`` bounds the finish of ``m``'s call
over every placement in which at most ``c`` calls meet ``P(m)`` and ``Bout`` adds the send of the value
that leaves. A cone heavier than the device's memory (each node's own bytes) cannot be in one call.
A CPU node takes its compute after its producers' values arrive and uses no call. The max over paths
and min over cuts is one pass over the graph per cut budget (:func:`call_bounds`); at the top ``c`` is
``q`` times the number of accelerators, and the latency is at least ``B(m) + tail_fin(m)`` for any node.

The paths choose their cuts independently (the real ``U`` is one set); a second family looks at every
node at once (:func:`_late_sets`): if ``C`` starts at ``s``, each node of ``P(m)`` whose bound exceeds ``s``
is in ``C``, with everything above it. Both see that a call leaving a staircase of cells behind computes
all of them, and a chain of ``L`` calls costs ``L`` transfers. Neither sees that a shared ancestor sits in
one call only: each branch's bound may put it in its own call (GNMT's embedding, which feeds both encoder
chains). Each set a call is charged with (a cone, a late set) also brings its outside producers, each
computed in the call or received (:mod:`.entries`). Tests check every bound against every feasible placement of
small graphs (tests/solvers/latency/test_calls.py); figures in ``docs/notes/latency-bounds.md``.
"""

from __future__ import annotations

import numpy as np

from .entries import cone_entries, producer_terms, set_entries, value_feeds

__all__ = ["call_bounds", "call_bound", "call_lower_bound", "CALLS_MAX_NODES", "CALLS_MAX_CELLS"]

CALLS_MAX_NODES = 400  # the cone tables are n x n x D: beyond, the bound is skipped
CALLS_MAX_CELLS = 40_000_000  # nodes² x devices x call budgets the passes may touch


def _reach(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """(n, n) bool: ``R[x, y]`` when ``x == y`` or a path runs from ``x`` to ``y`` (nodes in topological order)."""
    R = np.eye(n, dtype=bool)
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        succ[a].append(b)
    for v in range(n - 1, -1, -1):
        for w in succ[v]:
            R[v] |= R[w]
    return R


def _cones(t: np.ndarray, allowed: np.ndarray, own: np.ndarray, capacity: np.ndarray, R: np.ndarray,
           acc: np.ndarray) -> np.ndarray:
    """(n, n, A): the compute of ``cone(x, m) = {y : x <= y <= m}`` on each accelerator, ``inf`` where a
    node of the cone may not run there, the cone's own bytes exceed the device's memory, or ``x !<= m``."""
    Rf = R.astype(float)
    out = np.full((len(t), len(t), int(acc.sum())), np.inf)
    mem = (Rf * own[None, :]) @ Rf
    for i, d in enumerate(np.flatnonzero(acc)):
        ok = allowed[:, d]
        work = (Rf * np.where(ok, t[:, d], 0.0)[None, :]) @ Rf
        bad = (Rf * (~ok).astype(float)[None, :]) @ Rf
        fits = mem <= capacity[d] * (1 + 1e-12) if np.isfinite(capacity[d]) else np.ones_like(R)
        out[:, :, i] = np.where(R & (bad < 0.5) & fits, work, np.inf)
    return out


def _edge_charges(n: int, src, dst, val_prod, pair_val, pair_cons, recv, send, D: int):
    """Per node edge, the least receive (E, D, D) and per node the least send (n, D, D) of its value;
    edges that carry no value are free."""
    key = {(int(a), int(b)): e for e, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}
    er = np.zeros((len(src), D, D))
    seen = np.zeros(len(src), bool)
    ns = np.full((n, D, D), np.inf)
    for j, c in zip(pair_val.tolist(), pair_cons.tolist(), strict=True):
        p = int(val_prod[j])
        ns[p] = np.minimum(ns[p], send[j])
        e = key.get((p, c))
        if e is None:
            continue
        er[e] = np.minimum(er[e], recv[j]) if seen[e] else recv[j]
        seen[e] = True
    return er, np.where(np.isfinite(ns), ns, 0.0)


def call_bounds(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                capacity: np.ndarray, entries: bool = True) -> np.ndarray | None:
    """(n, D) ``B(m, Q)`` of the module docstring in model units (``inf`` where ``m`` may not run), or
    None when the graph is too large for the cone tables. Arguments as in :class:`.data.LatencyData`;
    ``own`` (n,) the bytes a node brings to any device. With ``entries`` (the default) each call also pays
    for the outside producers of what it holds (:mod:`.entries`)."""
    n, D = t.shape
    cpu = np.asarray(is_cpu, bool)
    acc = ~cpu
    A = int(acc.sum())
    Q = max(1, int(q)) * A
    if n == 0 or n > CALLS_MAX_NODES or n * n * D * (Q + 1) > CALLS_MAX_CELLS:
        return None
    src, dst = (np.asarray(e, np.int64) for e in edges)
    t = np.where(allowed, t, np.inf)
    cross = np.ones((D, D), bool)
    if q <= 1:
        cross[np.diag_indices(D)] = ~acc
    er, ns = _edge_charges(n, src, dst, val_prod, pair_val, pair_cons, recv, send, D)
    # what the producer's unit pays to send: accelerator calls only, at the cheapest destination
    out_charge = np.where(acc[None, :], np.where(cross[None], ns, np.inf).min(axis=2), 0.0)  # (n, D)
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for e, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        preds[b].append((a, e))
    R = _reach(n, src, dst)
    W = _cones(t, allowed, own, capacity, R, acc)  # (n, n, A)
    acc_ids = np.flatnonzero(acc)
    # a call also receives (or computes) every outside producer of what it holds (:mod:`.entries`)
    F = value_feeds(n, val_prod, pair_val, pair_cons)
    term, received = producer_terms(t, allowed, val_prod, recv, cross, acc_ids)
    tables = cone_entries(R, F, term, received, src, dst) if entries else None
    if tables is not None:
        W = W + tables[0]
    paid = term if tables is not None else np.zeros_like(term)  # a cut pays its producer's entry itself
    above = tables[1] if tables is not None else np.zeros((len(src), n, A))

    def arrival(sent: np.ndarray, e: int) -> np.ndarray:
        """(D,): the earliest a value sent at ``sent`` (D,) (by device) is at a unit of each device."""
        return np.where(cross, sent[:, None] + er[e], np.inf).min(axis=0)

    def cpu_pass(B: np.ndarray) -> None:
        for v in range(n):
            ready = np.zeros(D)
            for p, e in preds[v]:
                ready = np.maximum(ready, arrival(B[p] + out_charge[p], e))
            B[v, cpu] = ready[cpu] + t[v, cpu]

    B = np.full((n, D), np.inf)  # budget 0: no call, CPU only
    cpu_pass(B)
    for _ in range(Q):
        bout = B + out_charge
        new = np.full((n, D), np.inf)
        psi: list[np.ndarray] = []  # psi[x][m, i]: paths into x, cut after or at x (nodes in topological order)
        for x in range(n):
            if not preds[x]:
                best = W[x]
            else:
                best = np.full((n, A), -np.inf)
                for p, e in preds[x]:
                    cut = arrival(bout[p], e)[acc_ids][None, :] + W[x] - paid[p] * F[p, x] + above[e]
                    best = np.maximum(best, np.minimum(cut, psi[p]))
            psi.append(best)
            new[x, acc_ids] = best[x]
        new[:, acc_ids] = np.maximum(new[:, acc_ids], _late_sets(B, t, allowed, own, capacity, R, acc_ids,
                                                                        (F, term) if entries else None))
        cpu_pass(new)
        B = new
    return np.where(allowed, B, np.inf)


def _late_sets(B: np.ndarray, t: np.ndarray, allowed: np.ndarray, own: np.ndarray, capacity: np.ndarray,
               R: np.ndarray, acc_ids: np.ndarray, entries: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(n, A): the start-time bound of the module docstring over every node at once. Every node ``x`` of
    ``P(m)`` outside ``m``'s call ``C`` has finished when ``C`` starts, so if ``C`` starts at ``s``, every
    ``x <= m`` with ``B(x) > s`` (the previous budget's bound) is in ``C``, and with it everything between
    it and ``m``: ``fin(C) >= min_s [s + work({y <= m : some late x <= y} + m)]`` over ``s`` in 0 and the
    distinct ``B`` values (between two of them the late set only shrinks). With ``entries`` (``F``, ``term``
    of :mod:`.entries`) the call also pays for each outside producer of the late set."""
    n = len(t)
    beta = np.where(allowed, B, np.inf).min(axis=1)
    beta = np.where(np.isfinite(beta), beta, np.inf)
    Rf = R.astype(float)
    ta = np.where(allowed[:, acc_ids], t[:, acc_ids], 0.0)  # (n, A)
    bad = (~allowed[:, acc_ids]).astype(float)
    cap = capacity[acc_ids]
    best = np.full((n, len(acc_ids)), np.inf)
    for s in np.unique(np.concatenate([[0.0], beta[np.isfinite(beta)]])).tolist():
        late = beta > s
        up = (R[late].any(axis=0)).astype(float)  # descendants of the late nodes, themselves included
        own_m = (1.0 - up)[:, None]  # m itself when it is not late
        work = Rf.T @ (up[:, None] * ta) + own_m * ta  # (n, A) over m: Σ_{y <= m, y up} t(y) (+ t(m))
        if entries is not None:
            work = work + set_entries(Rf.T, up > 0.5, *entries)
        mem = Rf.T @ (up * own) + (1.0 - up) * own
        nbad = Rf.T @ (up[:, None] * bad) + own_m * bad
        ok = (nbad < 0.5) & (mem[:, None] <= np.where(np.isfinite(cap), cap, np.inf)[None, :] * (1 + 1e-12))
        best = np.minimum(best, np.where(ok, s + work, np.inf))
    return best


def call_bound(bounds_by_node: np.ndarray | None, allowed: np.ndarray, tail_fin: np.ndarray | None) -> float:
    """The latency bound from :func:`call_bounds`: ``max_m min_a B(m, a) + tail_fin(m, a)`` (0 without)."""
    if bounds_by_node is None or not len(bounds_by_node):
        return 0.0
    tail = np.zeros_like(bounds_by_node) if tail_fin is None else np.where(np.isfinite(tail_fin), tail_fin, 0.0)
    per = np.where(allowed, bounds_by_node + tail, np.inf).min(axis=1)
    per = per[np.isfinite(per)]
    return float(per.max()) if len(per) else 0.0


def call_lower_bound(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                     pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                     capacity: np.ndarray, tail_fin: np.ndarray | None = None) -> float:
    """The latency bound of the module docstring in model units (0 when the graph is too large)."""
    B = call_bounds(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity)
    return call_bound(B, allowed, tail_fin)

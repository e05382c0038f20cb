"""A latency bound exact on the calls' order: a DP over ideals that remembers when each frontier node finished.

The last-call DP of :mod:`.lastcall` bounds the two sides of its recursion separately, so the nodes both
sides share (GNMT's first layer, each step of its grid) are placed twice, each time as suits that side.
This DP builds placements forward instead and keeps what the future depends on.

Take a placement: its units (accelerator calls, and CPU nodes, each its own unit) are acyclic, so they
can be listed in an order where each unit follows every unit it reads from. After the first ``i`` units
their nodes form an ideal ``I``; the next unit ``X`` is ``I2 \\ I`` for an ideal ``I2 ⊋ I`` (every
difference of two nested ideals is convex). ``X`` starts when every unit holding a producer of one of its
nodes has finished, that is at the largest finish time among the nodes of ``I`` with an edge into ``X``,
and a call finishes after receiving each value that enters it, computing its nodes and sending each value
read outside it (:func:`planmap.evaluate.evaluate`'s latency model; a CPU node finishes after its compute,
its receive delay left out). Every node finishes with its unit. So the state ``(I, calls used, the finish
time of each node of I with a consumer outside I, the latest finish of a unit holding a sink)`` determines
everything that follows, and the least latency is the least sink finish over the states of the whole
graph reached with at most ``q`` x accelerators calls. The DP keeps, per ideal, the labels
``(calls, sink finish, frontier finish times)`` no other label dominates (no more calls, no later
anywhere).

Relaxed (so the result is a lower bound, not the optimum): calls of one device neither wait for each other
nor share its memory or its ``q`` slots (only the total ``q`` x accelerators counts), each call runs on
whichever accelerator its nodes fit (its own bytes, :func:`.data._own_bytes`) and is fastest, transfers cost the
least any pair of devices could charge, and where the ideals are too many the cheapest nodes are deleted
as in :mod:`.lastcall` (:func:`.lastcall._fit`; a deleted node's edges join its producers to its consumers
at no cost, any placement restricted to the kept nodes is a placement of the reduced graph no slower).

With an upper bound ``upper`` (a latency some placement reaches), a label is dropped when a frontier node's
finish time plus the least compute on the longest path through one of its consumers outside the ideal (on the
fastest device, no transfers) reaches ``upper``: those nodes are not placed yet, so they run after it, and every
completion of the label is no faster; the result ``min(DP, upper)`` is still a lower bound. (Paths through
consumers inside the ideal do not count: they may sit in the frontier node's own call, already finished.)
A deadline or a cap on the labels makes the DP give up (return 0: no bound), never return a wrong one.
"""

from __future__ import annotations

import time

import numpy as np

from .lastcall import fit_reduced

__all__ = ["frontier_bound", "FRONTIER_MAX_LABELS"]

FRONTIER_MAX_LABELS = 400_000  # labels alive at once across the ideals; past it the DP gives up


def _dominated(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(len(B), len(A)) bool: row ``a`` of ``A`` <= row ``b`` of ``B`` everywhere (column by column: numpy
    reduces a short last axis slowly)."""
    out = A[None, :, 0] <= B[:, None, 0]
    for c in range(1, A.shape[1]):
        out &= A[None, :, c] <= B[:, None, c]
    return out


def _pareto(Z: np.ndarray, block: int = 512) -> np.ndarray:
    """Rows of ``Z`` that no other row dominates (<= everywhere), duplicates once. A dominating row has
    the smaller sum, and dominance is transitive, so rows in order of their sum need comparing only with
    the rows kept before them and the earlier rows of their block."""
    if len(Z) <= 1:
        return Z
    Z = np.unique(Z, axis=0)
    Z = Z[np.argsort(Z.sum(axis=1), kind="stable")]
    kept = Z[:0]
    lower = np.tri(block, k=-1, dtype=bool)
    for s in range(0, len(Z), block):
        B = Z[s:s + block]
        dead = np.zeros(len(B), bool)
        for s2 in range(0, len(kept), 2048):
            dead |= _dominated(kept[s2:s2 + 2048], B).any(axis=1)
        live = np.flatnonzero(~dead)
        B = B[live]
        dead = (_dominated(B, B) & lower[:len(B), :len(B)]).any(axis=1)
        kept = np.concatenate([kept, B[~dead]])
    return kept


def frontier_bound(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                   pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                   capacity: np.ndarray, *, upper: float = np.inf, deadline: float | None = None,
                   max_labels: int = FRONTIER_MAX_LABELS, quantum: float = 0.0) -> float:
    """The DP of the module docstring in model units; 0 when the graph is too large or time runs out."""
    fit = fit_reduced(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity)
    if fit is None:
        return 0.0
    M, rp, d = fit
    cpu = np.asarray(is_cpu, bool)
    nk = len(d.kept)
    N = len(M)
    S = max(1, int(q)) * int((~cpu).sum())
    E = np.zeros((nk, nk), bool)
    for v, ps in enumerate(rp):
        E[ps, v] = True
    Ef = E.astype(float)
    Mf = M.astype(float)
    front = M & (((1.0 - Mf) @ Ef.T) > 0.5)  # (N, nk): in I, a consumer outside I
    sink: np.ndarray = np.asarray(~E.any(axis=1))
    # the least compute on every path from a node to a sink (the node's own included), and per ideal the longest
    # such path that starts at a consumer outside the ideal: it runs after the frontier node finishes
    tmin = np.where(np.isfinite(d.tk.min(axis=1)), d.tk.min(axis=1), 0.0)
    path = tmin.copy()
    for v in range(nk - 1, -1, -1):
        succ = np.flatnonzero(E[v])
        if len(succ):
            path[v] += float(path[succ].max())
    after = np.stack([np.where(E & ~M[i][None, :], path[None, :], 0.0).max(axis=1) for i in range(N)])
    W, MEM, NB = Mf @ d.ta, Mf @ d.own, Mf @ d.bad
    cap = d.cap
    index_of_size = M.sum(axis=1)
    labels: list[list[np.ndarray]] = [[] for _ in range(N)]
    fcols = [np.flatnonzero(front[i]) for i in range(N)]
    labels[0].append(np.zeros((1, 2)))  # columns: calls, sink finish, then the frontier's finish times
    alive = 1
    pending = np.zeros(N, np.int64)  # rows pushed to a bucket since it was last pruned
    settled = np.zeros(N, np.int64)  # rows it kept then
    best = np.inf
    for i in range(N):
        if deadline is not None and time.perf_counter() > deadline:
            return 0.0
        if not labels[i]:
            continue
        Z = _pareto(np.concatenate(labels[i]))
        alive -= sum(len(b) for b in labels[i])
        labels[i] = []
        if i == N - 1:
            best = float(Z[:, 1].min())
            break
        ideal = M[i]
        subs = np.flatnonzero((M[:, ideal].all(axis=1)) & (index_of_size > index_of_size[i]))
        if not len(subs):
            continue
        X = M[subs] & ~ideal[None, :]
        Xf = X.astype(float)
        # calls: the least duration over the accelerators the nodes fit
        entering = ((Xf @ d.reads) > 0.5) & ideal[d.prod][None, :]
        leaving = (X[:, d.prod]) & (((1.0 - Mf[subs]) @ d.reads) > 0.5)
        ok = (NB[subs] - NB[i] < 0.5) & ((MEM[subs] - MEM[i])[:, None] <= cap[None, :])
        dur = np.where(ok, W[subs] - W[i] + entering.astype(float) @ d.recv_v + leaving.astype(float) @ d.send_v,
                       np.inf).min(axis=1)
        size = X.sum(axis=1)
        cpu_t = np.where(size == 1, d.tc[X.argmax(axis=1)], np.inf)
        fi = fcols[i]
        feeds = ((Xf @ Ef[fi].T) > 0.5) if len(fi) else np.zeros((len(subs), 0), bool)
        has_sink = (X & sink[None, :]).any(axis=1)
        f = Z[:, 2:]
        pats, inv = np.unique(feeds, axis=0, return_inverse=True)
        by_pat = np.stack([f[:, p].max(axis=1) if p.any() else np.zeros(len(Z)) for p in pats], axis=1)
        start = by_pat[:, inv.ravel()]
        for cost, extra in ((dur, 1), (cpu_t, 0)):
            opt = np.flatnonzero(np.isfinite(cost))
            if not len(opt):
                continue
            fin = start[:, opt] + cost[opt][None, :]  # (m, p')
            if quantum > 0:
                fin = np.floor(fin / quantum) * quantum
            keep_rows = Z[:, 0] + extra <= S
            if not keep_rows.any():
                continue
            kk, fk, sk0, fin = Z[keep_rows, 0:1] + extra, f[keep_rows], Z[keep_rows, 1], fin[keep_rows]
            for c, j in enumerate(opt.tolist()):
                if deadline is not None and c % 64 == 0 and time.perf_counter() > deadline:
                    return 0.0
                tgt = subs[j]
                cols = fcols[tgt]
                inX = X[j][cols]
                fj = fin[:, c]
                # the new label: old finish times where the frontier node was in I, the unit's where in X
                newf = np.empty((len(fj), len(cols)))
                newf[:, ~inX] = fk[:, np.searchsorted(fi, cols[~inX])]
                newf[:, inX] = fj[:, None]
                sk = sk0
                if has_sink[j]:
                    sk = np.maximum(sk, fj)
                lb = np.maximum(sk, (newf + after[tgt, cols][None, :]).max(axis=1) if len(cols) else sk)
                good = lb < upper
                if not good.any():
                    continue
                lab = np.concatenate([kk[good], sk[good, None], newf[good]], axis=1)
                labels[tgt].append(lab)
                alive += len(lab)
                pending[tgt] += len(lab)
                if pending[tgt] > 4 * settled[tgt] + 2048:  # prune the bucket as it grows
                    before = sum(len(b) for b in labels[tgt])
                    labels[tgt] = [_pareto(np.concatenate(labels[tgt]))]
                    settled[tgt] = len(labels[tgt][0])
                    pending[tgt] = 0
                    alive -= before - settled[tgt]
        if alive > max_labels:
            return 0.0
    return float(min(best, upper))

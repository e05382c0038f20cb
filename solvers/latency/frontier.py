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
A stronger test uses the call budget: every descendant of a frontier node ``u`` outside the ideal (``D_u``, an
up-set) runs in units that start after ``u`` finished, at most ``S - calls used`` of them calls, so a label is also
dropped when ``f_u + R(D_u, S - calls)`` reaches ``upper``, with ``R`` the last-call DP of :mod:`.lastcall` run on
the reversed graph without transfers (a placement's schedule of ``D_u`` read backwards in time is a placement of
the reversed subgraph, as long as no transfer is charged; so ``R`` bounds how long ``D_u`` takes from its start).

A deadline or a cap on the labels makes the DP give up (return 0: no bound), never return a wrong one. With a
``floor`` it adapts instead: when the labels outgrow the cap, or it falls behind its deadline's schedule, it lowers
``upper`` to the median completion bound of the labels waiting and drops those at or above it (what the lower
upper bound would have pruned anyway: every label it keeps is one it would keep), and gives up only when that
would take ``upper`` to the floor. :func:`frontier_search` runs it at the horizon first, then, when that gives
up, adaptively from halfway between the known lower bound and the horizon.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .lastcall import Reduced, _ancestors, _cpu_moves, _level_table, _transitions, fit_reduced

__all__ = ["frontier_bound", "frontier_search", "FRONTIER_MAX_LABELS", "FRONTIER_ADAPT_LABELS"]

FRONTIER_MAX_LABELS = 400_000  # labels alive at once across the ideals; past it the DP gives up
FRONTIER_ADAPT_LABELS = 1_000_000  # past it the adaptive DP lowers its upper bound
FRONTIER_FIRST_SHARE = 1 / 3  # of frontier_search's time, for the exact run at the horizon


def _pareto(Z: np.ndarray, block: int = 512) -> np.ndarray:
    """Rows of ``Z`` that no other row dominates (<= everywhere), duplicates once. A dominating row has the
    smaller sum, and dominance is transitive, so rows in order of their sum need comparing only with the rows
    kept before them and the earlier rows of their block. The comparisons run on each column's ranks (exact:
    equal values share a rank), as 16-bit integers where they fit, constant columns left out."""
    if len(Z) <= 1:
        return Z
    Z = np.unique(Z, axis=0)
    if len(Z) <= 1:
        return Z
    Z = Z[np.argsort(Z.sum(axis=1), kind="stable")]
    ranks = np.stack([np.unique(Z[:, c], return_inverse=True)[1].ravel() for c in range(Z.shape[1])])
    ranks = ranks[ranks.max(axis=1) > 0]
    R = np.ascontiguousarray(ranks.astype(np.int16 if ranks.max() < np.iinfo(np.int16).max else np.int32))

    def dominated(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # (len(b), len(a)): row a <= row b everywhere
        out = R[0][None, a] <= R[0][b][:, None]
        for c in range(1, len(R)):
            out &= R[c][None, a] <= R[c][b][:, None]
        return out

    kept = np.zeros(0, np.int64)
    lower = np.tri(block, k=-1, dtype=bool)
    for s in range(0, len(Z), block):
        idx = np.arange(s, min(s + block, len(Z)))
        dead = np.zeros(len(idx), bool)
        for s2 in range(0, len(kept), 4096):
            live = np.flatnonzero(~dead)
            if not len(live):
                break
            dead[live] |= dominated(kept[s2:s2 + 4096], idx[live]).any(axis=1)
        idx = idx[~dead]
        if len(idx) > 1:
            idx = idx[~(dominated(idx, idx) & lower[:len(idx), :len(idx)]).any(axis=1)]
        kept = np.concatenate([kept, idx])
    return Z[kept]


@dataclass
class _Setup:
    """What every run of the DP on one graph shares: the reduced graph's ideals and data, the frontier of each
    ideal (``fcols``) and per frontier node the least time from its finish to the end (``ahead``: (S + 1,
    frontier) per ideal, by calls used)."""

    M: np.ndarray
    d: Reduced
    E: np.ndarray
    S: int
    sink: np.ndarray
    fcols: list[np.ndarray]
    ahead: list[np.ndarray]
    subs: list[np.ndarray]  # per ideal, the larger ideals that contain it
    work: np.ndarray  # per ideal, the share of the transitions done once it is processed


def _tails(M: np.ndarray, d: Reduced, S: int, fcols: list[np.ndarray], desc: np.ndarray) -> list:
    """Per ideal, (S + 1, frontier) bounds ``R(D_u, k)`` on how long the descendants of each frontier node ``u``
    outside the ideal take with ``k`` calls (the module docstring): the last-call DP's table on the reversed
    graph without transfers, read at the ideal of the reversed graph that ``D_u`` is."""
    nk = M.shape[1]
    Mr = (~M)[:, ::-1]  # the up-sets of the graph are the ideals of the reversed one
    Mr = np.ascontiguousarray(Mr[np.argsort(Mr.sum(axis=1), kind="stable")])
    anc_r = np.ascontiguousarray(desc[::-1, ::-1])  # node v is nk - 1 - v there; ancestors are descendants
    A = d.ta.shape[1]
    trans, index = _transitions(Mr, anc_r, d.ta[::-1], d.bad[::-1], d.own[::-1], d.cap, np.zeros((nk, 1)),
                                np.zeros(1, np.int64), np.zeros((1, A)), np.zeros((nk, A)))
    R = _level_table(len(Mr), S, trans, _cpu_moves(Mr, index, anc_r, d.tc[::-1]))  # (S + 1, ideals) by calls left
    R = R[::-1]  # by calls used; inf: no placement of the rest with that few calls left
    out = []
    for i in range(len(M)):
        rows = [R[:, index[(desc[u] & ~M[i])[::-1].tobytes()]] for u in fcols[i]]
        out.append(np.array(rows).reshape(len(fcols[i]), S + 1).T)
    return out


def _setup(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity) -> _Setup | None:
    fit = fit_reduced(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity)
    if fit is None:
        return None
    M, rp, d = fit
    nk = len(d.kept)
    S = max(1, int(q)) * int((~np.asarray(is_cpu, bool)).sum())
    E = np.zeros((nk, nk), bool)
    for v, ps in enumerate(rp):
        E[ps, v] = True
    Mf = M.astype(float)
    front = M & (((1.0 - Mf) @ E.astype(float).T) > 0.5)  # (N, nk): in I, a consumer outside I
    fcols = [np.flatnonzero(row) for row in front]
    # the least compute on every path from a node to a sink (the node's own included), and per ideal the longest
    # such path that starts at a consumer outside the ideal: it runs after the frontier node finishes
    tmin = np.where(np.isfinite(d.tk.min(axis=1)), d.tk.min(axis=1), 0.0)
    path = tmin.copy()
    for v in range(nk - 1, -1, -1):
        succ = np.flatnonzero(E[v])
        if len(succ):
            path[v] += float(path[succ].max())
    tails = _tails(M, d, S, fcols, _ancestors(nk, rp).T)
    ahead = []
    for i in range(len(M)):
        cols = fcols[i]
        after = np.where(E[cols] & ~M[i][None, :], path[None, :], 0.0).max(axis=1) if len(cols) else np.zeros(0)
        ahead.append(np.maximum(tails[i], after[None, :]))
    size = M.sum(axis=1)
    subs = [np.flatnonzero((M[:, M[i]].all(axis=1)) & (size > size[i])) for i in range(len(M))]
    work = np.cumsum([len(x) for x in subs], dtype=float)
    return _Setup(M=M, d=d, E=E, S=S, sink=np.asarray(~E.any(axis=1)), fcols=fcols, ahead=ahead, subs=subs,
                  work=work / max(work[-1], 1.0))


def frontier_bound(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                   pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                   capacity: np.ndarray, *, upper: float = np.inf, deadline: float | None = None,
                   max_labels: int = FRONTIER_MAX_LABELS, quantum: float = 0.0, floor: float | None = None) -> float:
    """The DP of the module docstring in model units; 0 when the graph is too large or it gives up."""
    st = _setup(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity)
    if st is None:
        return 0.0
    return _run(st, upper=upper, deadline=deadline, max_labels=max_labels, quantum=quantum, floor=floor)


def frontier_search(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                    pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                    capacity: np.ndarray, *, lower: float, horizon: float, seconds: float) -> float:
    """The best bound the DP proves within ``seconds`` (model units; 0: none): exact at the ``horizon`` (a
    latency some placement reaches) for up to :data:`FRONTIER_FIRST_SHARE` of the time, and where that gives
    up, adaptively from halfway between ``lower`` (a bound already known) and the horizon, never below
    ``lower``."""
    start = time.perf_counter()
    st = _setup(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity)
    if st is None:
        return 0.0
    left = seconds - (time.perf_counter() - start)
    got = _run(st, upper=horizon, deadline=time.perf_counter() + FRONTIER_FIRST_SHARE * left,
               max_labels=FRONTIER_MAX_LABELS)
    if got > 0:
        return got
    return _run(st, upper=lower + 0.5 * (horizon - lower), deadline=start + seconds,
                max_labels=FRONTIER_ADAPT_LABELS, floor=lower)


def _run(st: _Setup, *, upper: float, deadline: float | None, max_labels: int = FRONTIER_MAX_LABELS,
         quantum: float = 0.0, floor: float | None = None) -> float:
    M, d, E, S, sink, fcols, ahead, work = st.M, st.d, st.E, st.S, st.sink, st.fcols, st.ahead, st.work
    N = len(M)
    Mf = M.astype(float)
    Ef = E.astype(float)
    W, MEM, NB = Mf @ d.ta, Mf @ d.own, Mf @ d.bad
    cap = d.cap
    t_start = time.perf_counter()
    adapted_at = -1.0

    def completion(L: np.ndarray, j: int) -> np.ndarray:
        """Per label of ideal ``j``: no completion of it finishes sooner."""
        if not len(fcols[j]):
            return L[:, 1]
        used = np.minimum(L[:, 0].astype(np.int64), S)
        return np.maximum(L[:, 1], (L[:, 2:] + ahead[j][used]).max(axis=1))

    labels: list[list[np.ndarray]] = [[] for _ in range(N)]
    labels[0].append(np.zeros((1, 2)))  # columns: calls, sink finish, then the frontier's finish times
    alive = 1
    pending = np.zeros(N, np.int64)  # rows pushed to a bucket since it was last pruned
    settled = np.zeros(N, np.int64)  # rows it kept then
    best = np.inf
    for i in range(N):
        now = time.perf_counter()
        if deadline is not None and now > deadline:
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
        subs = st.subs[i]
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
            used = np.minimum(kk[:, 0].astype(np.int64), S)
            for c, j in enumerate(opt.tolist()):
                if deadline is not None and c % 64 == 0 and time.perf_counter() > deadline:
                    return 0.0
                tgt = subs[j]
                cols = fcols[tgt]
                inX = X[j][cols]
                fj = fin[:, c]
                sk = np.maximum(sk0, fj) if has_sink[j] else sk0
                # first what runs after the unit's own frontier nodes, then (on the rows left) after the older ones
                lb = np.maximum(sk, fj + ahead[tgt][:, inX].max(axis=1)[used]) if inX.any() else sk
                good = np.flatnonzero(lb < upper)
                if not len(good):
                    continue
                old = cols[~inX]
                prev = fk[good][:, np.searchsorted(fi, old)]
                if len(old):
                    g2 = (prev + ahead[tgt][:, ~inX][used[good]]).max(axis=1) < upper
                    good, prev = good[g2], prev[g2]
                    if not len(good):
                        continue
                # the new label: old finish times where the frontier node was in I, the unit's where in X
                newf = np.empty((len(good), len(cols)))
                newf[:, ~inX] = prev
                newf[:, inX] = fj[good, None]
                lab = np.concatenate([kk[good], sk[good, None], newf], axis=1)
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
            if floor is None:
                return 0.0
        elif floor is None or deadline is None:
            continue
        else:  # on schedule: the time so far grows about as the square of the share of transitions done
            now, budget = time.perf_counter(), deadline - t_start
            if now - adapted_at < 0.05 * budget or now - t_start <= (0.05 + 0.95 * work[i] ** 2) * budget:
                continue
        # too many labels, or behind the schedule: the median completion bound of the waiting labels becomes the
        # upper bound
        waiting = [j for j in range(i + 1, N) if labels[j]]
        if not waiting:  # nothing left to prune: the result is the upper bound
            continue
        for j in waiting:
            labels[j] = [_pareto(np.concatenate(labels[j]))]
        upper = min(upper, float(np.median(np.concatenate([completion(labels[j][0], j) for j in waiting]))))
        if upper <= floor:
            return 0.0
        alive = 0
        for j in waiting:
            L = labels[j][0]
            L = L[completion(L, j) < upper]
            labels[j] = [L] if len(L) else []
            alive += len(L)
            settled[j], pending[j] = len(L), 0
        adapted_at = time.perf_counter()
    return float(min(best, upper))

"""A latency bound that counts calls across parallel branches: a DP over the ideals on the last call.

The call bound of :mod:`.calls` gives each branch of a join the whole call budget, so a grid of cells
(GNMT's encoder) looks as if every path could have its own staircase of calls. Here the budget counts
every call that meets a set of nodes, whichever branch it serves.

Take a placement and an ideal ``I`` (a set of nodes closed under ancestors); let ``k`` be the number of
accelerator calls that meet ``I``. The units (calls, and CPU nodes, each its own unit) that meet ``I``
finish at different times; let ``X`` be one that finishes last, chosen (among ties) so that no other of
them depends on it (the units' order is acyclic, and a unit that depends on ``X`` finishes no earlier).

- ``X ∩ I`` is an up-set of ``I``: a node of ``I`` above a node of ``X`` sits in a unit that depends on
  ``X``. So ``J = I \\ X`` is an ideal, met by at most ``k - 1`` calls when ``X`` is a call (by ``k``
  when ``X`` is a CPU node), and every unit of ``J`` finishes no later than ``X``.
- Let ``J'`` be the strict ancestors of ``X ∩ I`` outside ``X`` (an ideal inside ``J``). Each ``y ∈ J'``
  reaches ``X`` along a path that enters ``X`` from a producer ``p ∉ X``; units finish in order along a
  path, and ``X`` starts after ``p``'s unit finishes, so ``J'`` has finished when ``X`` starts. Every
  maximal node of ``J'`` feeds ``X`` directly (the next node on its path to ``X`` is not in ``J'``, so it
  is in ``X``), so the unit that finishes ``J'`` last, if a call, also sends one of those values.
- A call ``X`` on accelerator ``d`` receives every value entering it (the producer outside ``X``) and
  computes all its nodes; its nodes may all run on ``d`` and their own bytes fit ``d``'s memory. A CPU
  node runs its compute after its producers (its receive delay left out).

So with ``F(I, k)`` a lower bound on when every unit meeting ``I`` has finished, and ``H(I, k)`` the same
when each maximal node of ``I`` is read by a unit outside ``I`` (its last unit, if a call, sends):

    F(I, k) >= min over X of max(F(J, k'), H(J', k') + cost, min(H(J', k' - 1) + cost, K(J, k', cost)))

    cost = recv(X) + work(X) on d [+ the send of a maximal node of I in X, for H]

over the non-empty up-sets ``X`` of ``I`` (a call on some accelerator ``d``, ``k' = k - 1``; or one
maximal node on the CPU, ``k' = k``), the send term only in ``H`` (a maximal node of ``I`` in ``X``; a
CPU node sends nothing; the last term for calls only). ``F(∅, k) = 0``; with ``S = q`` x accelerators calls
in all, the latency is at least ``F(V, S)``.

The calls of ``J`` are counted once more. Let ``b`` be the number of calls that meet ``J \\ J'`` but not ``J'``.
If ``b >= 1``, at most ``k - 2`` calls meet ``J'``. If ``b = 0``, every call meeting ``J`` meets ``J'``, so it
finishes before ``X`` starts, while ``J``'s CPU nodes finish by ``X``'s end: ``X`` finishes no earlier than
``max(calls of J + cost(X), CPU nodes of J)``. ``K(I, k, c)``, a lower bound on ``max(last call of I + c, last
CPU node of I)``, follows the same recursion: a maximal node on the CPU is peeled off (its finish counts in full);
otherwise the call ``Y`` that finishes last among the calls holds an up-set of ``I`` (a node above it, on the CPU,
would lie below a maximal node whose call depends on ``Y``), so ``K(I, k, c) >= max(K(J, k - 1, c), H(J', k - 1)
+ cost(Y) + c)``. The true value grows with ``c``, so ``K`` at any ``c`` below the cost bounds it from below: the DP
tabulates ``K`` at ``c = 0``, four quantiles of the costs and 16 geometrically spaced ``c``, and each option takes the
largest below its cost.

Everything else is relaxed: calls of one device neither wait for each other nor share
its memory, working sets and sends other than the one above are left out, and ``J`` and ``J'`` are
bounded separately (each branch of the recursion picks its own placement of the shared part, which is
where this bound is still weak).

The number of ideals grows fast with parallel branches, so the cheapest nodes are deleted first until it
fits (:func:`_reduced`): edges through a deleted node join its producers to its consumers at no transfer
cost, and its compute, memory and transfers are dropped. Any placement, restricted to the kept nodes,
is a placement of the reduced graph that is no slower: its calls stay convex (a path between two kept
nodes of one call through a deleted node ran through that call), a call keeps receiving every kept value
it received, and each dependency of the reduced graph was a chain of dependencies before. Tests check the
bound against the exact optimum of small graphs (tests/solvers/latency/test_lastcall.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pipeline.ideals import TooManyIdeals, enumerate_ideals, unpack
from .towers import _predecessors

__all__ = ["last_call_bound", "LASTCALL_MAX_IDEALS", "LASTCALL_MAX_PAIRS", "LASTCALL_MAX_NODES", "LASTCALL_SHARES"]

LASTCALL_MAX_NODES = 300  # larger graphs are skipped
LASTCALL_MAX_IDEALS = 2500  # ideals of the reduced graph the DP may enumerate
LASTCALL_MAX_PAIRS = 600_000  # (ideal, sub-ideal) pairs the transitions may touch
LASTCALL_MAX_DROPPED = 0.25  # at most this share of the nodes (the cheapest) is deleted to fit
LASTCALL_SHARES = 16  # nonzero shares c at which K is tabulated


def _ancestors(n: int, preds: list[list[int]]) -> np.ndarray:
    """(n, n) bool: ``A[v, u]`` when ``u`` is a strict ancestor of ``v`` (nodes in topological order)."""
    A = np.zeros((n, n), bool)
    for v in range(n):
        for p in preds[v]:
            A[v] |= A[p]
            A[v, p] = True
    return A


def _ideals(n: int, preds: list[list[int]], cap: int) -> np.ndarray | None:
    """Every ideal as a row of a bool matrix, by size (the empty one first); None beyond ``cap``."""
    edges = np.array([(p, v) for v in range(n) for p in preds[v]], np.int64).reshape(-1, 2)
    try:
        return unpack(enumerate_ideals(n, edges, cap), n)
    except TooManyIdeals:
        return None


def _reduced(preds: list[list[int]], keep: np.ndarray) -> list[list[int]]:
    """Producers of each kept node in the graph with the other nodes deleted (indices into the kept ones)."""
    pos = np.cumsum(keep) - 1
    through: list[set[int]] = []
    for ps in preds:
        s: set[int] = set()
        for p in ps:
            s |= {int(pos[p])} if keep[p] else through[p]
        through.append(s)
    return [sorted(through[v]) for v in np.flatnonzero(keep)]


def _fit(preds: list[list[int]], cheapness: np.ndarray):
    """(kept mask, ideals, reduced producers): the fewest cheapest nodes deleted so the DP fits, or None."""
    n = len(preds)
    order = np.argsort(cheapness, kind="stable")
    drop = 0
    while drop <= LASTCALL_MAX_DROPPED * n:
        keep = np.ones(n, bool)
        keep[order[:drop]] = False
        rp = _reduced(preds, keep) if drop else preds
        M = _ideals(int(keep.sum()), rp, LASTCALL_MAX_IDEALS)
        if M is not None:
            Mf = M.astype(np.float32)
            if float((Mf @ (1.0 - Mf).T == 0).sum()) <= LASTCALL_MAX_PAIRS:  # sub-ideal pairs
                return keep, M, rp
        drop = max(1, 2 * drop)
    return None


def _transitions(M, anc, ta, bad, own, cap, reads, prod, recv_v, send_n):
    """Per ideal ``i``, the call options: (sub-ideals ``J``, index of ``J'``, cost for F, cost for H)."""
    index = {row.tobytes(): i for i, row in enumerate(M)}
    Mf = M.astype(float)
    W, nbad, mem = Mf @ ta, Mf @ bad, Mf @ own
    ancf = anc.astype(float)
    out = [(np.zeros(0, np.int64),) * 2 + (np.zeros(0),) * 2]  # the empty ideal
    for i in range(1, len(M)):
        ideal = M[i]
        subs = np.flatnonzero(~M[:, ~ideal].any(axis=1))
        subs = subs[subs != i]
        C = ideal[None, :] & ~M[subs]
        Cf = C.astype(float)
        ok = (nbad[i][None, :] - nbad[subs] < 0.5) & ((mem[i] - mem[subs])[:, None] <= cap[None, :])
        entering = ((Cf @ reads) > 0.5) & M[subs][:, prod]  # (k, V): read in X, produced in J
        work = np.where(ok, W[i][None, :] - W[subs] + entering.astype(float) @ recv_v, np.inf)  # (k, A)
        maximal = ideal & ~anc[ideal].any(axis=0)  # no descendant inside the ideal
        top = np.flatnonzero(maximal)
        sends = np.where(C[:, top][:, :, None], send_n[top][None, :, :], np.inf).min(axis=1)  # (k, A)
        jp = ((Cf @ ancf) > 0.5) & ~C  # strict ancestors of X outside it
        out.append((subs, np.array([index[r.tobytes()] for r in jp], np.int64), work.min(axis=1),
                    (work + sends).min(axis=1)))
    return out, index


def _cpu_moves(M, index, anc, tc):
    """Per ideal, the CPU options: (index of ``I`` less a maximal node ``v``, index of ``v``'s ancestors, t(v))."""
    out = []
    for i in range(len(M)):
        ideal = M[i]
        moves = []
        for v in np.flatnonzero(ideal).tolist():
            if not np.isfinite(tc[v]) or (anc[:, v] & ideal).any():
                continue
            rest = ideal.copy()
            rest[v] = False
            moves.append((index[rest.tobytes()], index[anc[v].tobytes()], float(tc[v])))
        out.append(moves)
    return out


@dataclass(frozen=True)
class Reduced:
    """The kept nodes' data, as both DPs over ideals read it: per kept node its compute on each
    accelerator (``ta``, 0 where not allowed, ``bad`` there) and least on a CPU (``tc``), its own bytes;
    per value of a kept producer read by a kept consumer (``reads``: kept node x value) its producer's
    kept index (``prod``), the least receive into and send out of each accelerator (``recv_v``, ``send_v``);
    per kept node the least send of one of its values (``send_n``, 0 where a value may leave unpaid);
    the accelerators' capacities (``cap``)."""

    kept: np.ndarray
    reads: np.ndarray
    prod: np.ndarray
    recv_v: np.ndarray
    send_v: np.ndarray
    send_n: np.ndarray
    tk: np.ndarray
    ta: np.ndarray
    bad: np.ndarray
    own: np.ndarray
    cap: np.ndarray
    tc: np.ndarray


def reduced_data(t: np.ndarray, allowed: np.ndarray, cpu: np.ndarray, q: int, edges, keep: np.ndarray,
                 val_prod: np.ndarray, pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray,
                 own: np.ndarray, capacity: np.ndarray) -> Reduced:
    """:class:`Reduced` for the nodes ``keep`` selects (``t`` with ``inf`` where not allowed)."""
    n, D = t.shape
    acc_ids = np.flatnonzero(~cpu)
    kept = np.flatnonzero(keep)
    pos = np.full(n, -1)
    pos[kept] = np.arange(len(kept))
    cross = np.ones((D, D), bool)
    if q <= 1:
        cross[np.diag_indices(D)] = cpu
    # values of kept producers read by kept consumers; least receive on each accelerator, least send from it
    use = keep[val_prod[pair_val]] & keep[pair_cons]
    reads = np.zeros((len(kept), len(val_prod)))
    reads[pos[pair_cons[use]], pair_val[use]] = 1.0
    recv_v = np.where(cross[None] & allowed[val_prod][:, :, None], recv, np.inf).min(axis=1)[:, acc_ids]
    recv_v = np.where(np.isfinite(recv_v), recv_v, 0.0)
    send_v = np.where(cross[None], send, np.inf)[:, acc_ids, :].min(axis=2)  # (V, A)
    send_n = np.full((n, len(acc_ids)), np.inf)
    read = np.zeros(len(val_prod), bool)
    read[pair_val[use]] = True
    np.minimum.at(send_n, val_prod[read], send_v[read])
    # a node whose value may reach a call only through a deleted node, or over an edge without a value, may
    # send nothing
    src, dst = (np.asarray(e, np.int64) for e in edges)
    carried = {(int(val_prod[j]), int(c)) for j, c in zip(pair_val.tolist(), pair_cons.tolist(), strict=True)}
    loose = np.zeros(n, bool)
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        loose[a] |= not keep[b] or (a, b) not in carried
    send_n = np.where(np.isfinite(send_n) & ~loose[:, None], send_n, 0.0)[kept]
    tk = t[kept]
    ta = np.where(allowed[kept][:, acc_ids], tk[:, acc_ids], 0.0)
    bad = (~allowed[kept][:, acc_ids]).astype(float)
    cap = np.where(np.isfinite(capacity[acc_ids]), capacity[acc_ids], np.inf) * (1 + 1e-12)
    tc = tk[:, cpu].min(axis=1) if cpu.any() else np.full(len(kept), np.inf)
    send_v = np.where(np.isfinite(send_v), send_v, 0.0)
    return Reduced(kept=kept, reads=reads, prod=np.maximum(pos[val_prod], 0), recv_v=recv_v, send_v=send_v,
                   send_n=send_n, tk=tk, ta=ta, bad=bad, own=own[kept], cap=cap, tc=tc)


def fit_reduced(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                capacity: np.ndarray) -> tuple[np.ndarray, list[list[int]], Reduced] | None:
    """(ideals, reduced producers, :class:`Reduced`) of the graph with the fewest cheapest nodes deleted so a
    DP over its ideals fits (:func:`_fit`); None when it is empty, too large or has no accelerator."""
    n = t.shape[0]
    cpu = np.asarray(is_cpu, bool)
    if n == 0 or n > LASTCALL_MAX_NODES or cpu.all():
        return None
    preds = _predecessors(n, np.asarray(edges[0], np.int64), np.asarray(edges[1], np.int64))
    t = np.where(allowed, t, np.inf)
    fit = _fit(preds, t.min(axis=1))
    if fit is None:
        return None
    keep, M, rp = fit
    return M, rp, reduced_data(t, allowed, cpu, q, edges, keep, val_prod, pair_val, pair_cons, recv, send, own,
                               capacity)


def last_call_bound(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                    pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                    capacity: np.ndarray) -> float:
    """``F(V, q x accelerators)`` of the module docstring in model units; 0 when the graph is too large.
    Arguments as in :class:`.data.LatencyData`; ``own`` (n,) the bytes a node brings to any device."""
    fit = fit_reduced(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, capacity)
    if fit is None:
        return 0.0
    M, rp, r = fit
    acc_ids = np.flatnonzero(~np.asarray(is_cpu, bool))
    anc = _ancestors(len(r.kept), rp)
    trans, index = _transitions(M, anc, r.ta, r.bad, r.own, r.cap, r.reads, r.prod, r.recv_v, r.send_n)
    moves = _cpu_moves(M, index, anc, r.tc)
    return _levels(len(M), max(1, int(q)) * len(acc_ids), trans, moves)


def _share_grid(costs: np.ndarray, shares: int) -> np.ndarray:
    """The shares ``c`` at which ``K`` is tabulated: 0, the least and largest cost and its tertiles (the
    earlier grid, kept so no bound drops) and ``shares`` points spaced geometrically up to the largest call
    cost (from 1e-4 of it), so each cost, small or large, finds a share within a fixed ratio below it
    (quantiles alone left the few large calls, the decoder's for one, with a share far below theirs)."""
    pos = costs[np.isfinite(costs) & (costs > 0)]
    if not len(pos):
        return np.zeros(1)
    top = float(pos.max())
    quantiles = np.quantile(costs[np.isfinite(costs)], np.linspace(0, 1, 4))
    return np.unique(np.concatenate([[0.0], quantiles, np.geomspace(max(float(pos.min()), top * 1e-4), top, shares)]))


def _levels(N: int, S: int, trans, moves) -> float:
    """``F(V, S)``; 0 where no placement exists."""
    F = _level_table(N, S, trans, moves)[-1]
    return float(F[-1]) if np.isfinite(F[-1]) else 0.0


def _level_table(N: int, S: int, trans, moves) -> np.ndarray:
    """``F(I, k)`` for every ideal and budget ``k = 0..S``, as an (S + 1, N) array, budget by budget; ``K`` at a
    few shares ``c`` (:func:`_share_grid`), each call option taking the largest share below its cost (``K``
    grows with ``c``)."""
    grid = _share_grid(np.concatenate([c for _, _, c, _ in trans]), LASTCALL_SHARES)
    inf = np.full(N, np.inf)
    F, H, H_before = inf, inf, inf  # budget k - 1; H also at k - 2
    K = np.full((len(grid), N), np.inf)
    table = []
    for k in range(S + 1):
        F2, H2, K2 = inf.copy(), inf.copy(), np.full((len(grid), N), np.inf)
        F2[0] = H2[0] = 0.0
        K2[:, 0] = 0.0
        for i in range(1, N):
            if k:
                subs, jp, cf, ch = trans[i]
                if len(subs):
                    share = K[np.maximum(np.searchsorted(grid, cf, side="right") - 1, 0), subs]
                    for out, c in ((F2, cf), (H2, ch)):  # J's calls split (b >= 1) or all meeting J' (b = 0)
                        out[i] = np.min(np.maximum(np.maximum(F[subs], H[jp] + c), np.minimum(H_before[jp] + c, share)))
                    K2[:, i] = np.maximum(K[:, subs], H[jp][None, :] + cf[None, :] + grid[:, None]).min(axis=1)
            for rest, before, tv in moves[i]:  # ideals by size: rest and before are done
                F2[i] = min(F2[i], max(F2[rest], H2[before] + tv))
                H2[i] = min(H2[i], max(F2[rest], H2[before] + tv))
                K2[:, i] = np.minimum(K2[:, i], np.maximum(K2[:, rest], H2[before] + tv))
        F, H, K, H_before = F2, H2, K2, H
        table.append(F)
    return np.array(table)

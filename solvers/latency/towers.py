"""A latency bound over the articulation chain: a module's towers share a call whole, or the chain pays a cut.

The sweeps of :mod:`.cuts` follow one path, so a path through one tower of an Inception module holds
that tower's memory only (the join bound adds one other branch): a call looks able to hold far more of
the network than it can, and the memory-forced cuts (each a transfer of 15-45 ms on Inception-v3, whose
accelerator compute is 46 ms in all) go uncounted. This bound follows the graph's articulation chain
instead and charges whole segments.

Let ``a_0 < a_1 < ... < a_m`` be articulation nodes (every value live across ``a_i``'s position in the
topological order is ``a_i``'s own), each a descendant of the one before, and ``M_i = desc(a_i) ∩
anc(a_{i+1}) ∪ {a_{i+1}}`` the segment between them (a module's towers and its concat). For a placement,
let ``pi(a)`` be, when ``a`` runs in accelerator call ``C``, ``start(C) + receives(C) + compute(C ∩
anc(a) ∪ {a})``, and ``a``'s finish on a CPU. Two cases link ``a_i`` to ``a_{i+1}``:

* same call ``C``: by convexity ``C`` holds all of ``M_i``, none of it an ancestor of ``a_i``, so
  ``pi(a_{i+1}) >= pi(a_i) + compute(M_i)`` and the call's memory grows by ``M_i``'s own bytes;
* different units: a unit that holds ``a_{i+1}`` depends on ``a_i``'s unit, so it starts after that unit
  finishes (``>= pi(a_i)`` plus its sends). Every path from ``a_i`` to ``a_{i+1}`` runs inside one
  component ``T`` of ``M_i - {a_{i+1}}`` (or is the edge ``a_i -> a_{i+1}``) and leaves ``a_i``'s call,
  through ``a_i``'s value or a value of ``T``: the call sends at least ``min(send(a_i), sum_T min_{u in T}
  send(u))`` (each value once); symmetrically ``a_{i+1}``'s call receives at least ``min(recv(a_i),
  sum_T min recv(u))``. So ``pi(a_{i+1}) >= pi(a_i) + sends + receives + compute(a_{i+1})``, and a new
  call holds at least ``a_{i+1}``.

When one end runs on the CPU and the other in an accelerator call, :mod:`.tower_ends` also charges where
the segment's towers are: what the call holds of them (compute, memory, the values crossing its boundary)
and the time of the rest, which runs between the call and the CPU end (``pi(b)`` is the larger of that
link and the two above).

Each node on a path computes after its predecessor, so ``pi(a_{i+1}) >= pi(a_i) +`` the longest path
through ``M_i`` (least compute) in every case; more precisely, given where ``a_i`` runs, every path
through ``M_i`` pays its compute on the devices its nodes choose and a send and a receive wherever it
changes units (:func:`_segment_sweep`: two modules apart on the CPU still pay for the module between).
And ``pi(a) >= ef(a)`` of the sweeps (the chain point of one path is at most ``pi``).

Memory is tracked per accelerator in ``capacity / buckets`` units, each segment's bytes rounded down (a
sum of floors never exceeds the call's true share). evaluate charges a call its nodes' own bytes plus
its largest working set, so when a call takes in a segment its tracked units plus that segment's largest
working set must fit ``buckets`` (and a new call must fit ``a_{i+1}`` with its working set); the DP over
(device, memory held) is exact for this relaxation. Side branches that no later articulation node needs
(Inception's auxiliary head) are left out, which only lowers it. The latency is at least ``pi(a_m)``
plus the longest compute path after ``a_m``.

Running a module's towers on several accelerators at once does not pay on the paper-style Inception-v3
layer graph: receiving a module's input costs 2-22 ms per tower, the whole module computes in 1.5-5.6
ms (figures in ``docs/notes/latency-bounds.md``), so the bound's strength is in the cuts, not in a
makespan over towers. The same articulation chain is what a DP over
residual blocks walks (one state per articulation node); here a state also carries the call's memory.
tests/solvers/latency/test_towers.py checks the bound against every feasible placement of small
graphs with parallel towers.
"""

from __future__ import annotations

import numpy as np

from .cuts import _closures
from .tower_ends import chain_order, end_links, side_time

__all__ = ["articulation_chain", "tower_bound", "TOWER_BUCKETS"]

TOWER_BUCKETS = 4096  # memory resolution per accelerator (the DP holds chain x devices x buckets numbers)
SIDE_LEVELS = 16  # steps of the side times in the split between two calls (each a knapsack per case)
SPLIT_BUCKETS = 64  # coarser resolution of the two calls' shares of a segment cut between them


def articulation_chain(n: int, src: np.ndarray, dst: np.ndarray, desc: list[int]) -> list[int]:
    """Nodes across whose position in the index order (a topological order) no other value is live,
    each a descendant of the one kept before it."""
    last = np.arange(n)
    if len(src):
        np.maximum.at(last, src, dst)
    reach_before = np.concatenate([[-1], np.maximum.accumulate(last)[:-1]]) if n else last
    chain: list[int] = []
    for v in range(n):
        if reach_before[v] <= v and (not chain or (desc[chain[-1]] >> v) & 1):
            chain.append(v)
    return chain


def _predecessors(n: int, src: np.ndarray, dst: np.ndarray) -> list[list[int]]:
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        preds[b].append(a)
    return preds


def _bits(x: int) -> list[int]:
    out, i = [], 0
    while x:
        if x & 1:
            out.append(i)
        x >>= 1
        i += 1
    return out


def _components(nodes: list[int], preds: list[list[int]]) -> list[list[int]]:
    """Weakly connected components of the subgraph induced by ``nodes``."""
    inside = set(nodes)
    parent = {v: v for v in nodes}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v
    for v in nodes:
        for p in preds[v]:
            if p in inside:
                parent[find(p)] = find(v)
    groups: dict[int, list[int]] = {}
    for v in nodes:
        groups.setdefault(find(v), []).append(v)
    return list(groups.values())


def _longest(nodes: list[int], start: int, preds: list[list[int]], tmin: np.ndarray) -> dict[int, float]:
    """Longest least-compute path from ``start`` (excluded) to each of ``nodes`` (ascending, descendants)."""
    dist = {start: 0.0}
    for v in nodes:
        best = max((dist[p] for p in preds[v] if p in dist), default=0.0)
        dist[v] = best + float(tmin[v])
    return dist


def _one_way(n: int, D: int, val_prod, pair_val, pair_cons, charge: np.ndarray, allowed: np.ndarray,
             cross: np.ndarray, by_producer: bool) -> np.ndarray:
    """(n, D): the least charge for one value of each node to leave a unit on each device (``by_producer``,
    any destination) or to enter one (any source the producer may run on)."""
    out = np.full((n, D), np.inf)
    used = np.zeros(len(val_prod), bool)
    used[np.asarray(pair_val, np.int64)] = True
    for j in np.flatnonzero(used).tolist():
        u = int(val_prod[j])
        if by_producer:
            c = np.where(cross, charge[j], np.inf).min(axis=1)
        else:
            c = np.where(cross & allowed[u][:, None], charge[j], np.inf).min(axis=0)
        out[u] = np.minimum(out[u], c)
    return out


def _xfer(n: int, D: int, val_prod, pair_val, send_acc: np.ndarray, recv: np.ndarray, allowed: np.ndarray,
           cross: np.ndarray) -> np.ndarray:
    """(n, D, D): the least a value of each node costs to cross from a unit on ``a`` to one on ``b`` (the
    sender's charge on an accelerator, then the receiver's); 0 from an accelerator to itself (the same
    call may hold both), ``inf`` where no crossing exists."""
    out = np.full((n, D, D), np.inf)
    used = np.zeros(len(val_prod), bool)
    used[np.asarray(pair_val, np.int64)] = True
    for j in np.flatnonzero(used).tolist():
        u = int(val_prod[j])
        out[u] = np.minimum(out[u], np.where(cross & allowed[u][:, None], send_acc[j] + recv[j], np.inf))
    return out


def _segment_sweep(start: np.ndarray, a: int, M: list[int], preds: list[list[int]], t: np.ndarray,
                   xfer: np.ndarray, same: np.ndarray) -> np.ndarray:
    """(D,) a lower bound on ``pi(M[-1])`` on each device given ``pi(a) >= start[d]`` when ``a`` runs on
    ``d``: along every path each node computes after its producer, and a value that changes units pays its
    send and receive (a node on the same accelerator as its producer may share its call: no charge)."""
    F = {a: start}
    for v in M:
        best = np.zeros(len(start))
        for p in preds[v]:
            if p in F:
                via = F[p][:, None] + np.where(same, 0.0, xfer[p])  # (from, to)
                best = np.maximum(best, via.min(axis=0))
        F[v] = best + t[v]
    return F[M[-1]]


def _split_options(comp: list[int], a: int, preds: list[list[int]], succs: list[list[int]], b: int,
                   tx: np.ndarray, s1: np.ndarray, r1: np.ndarray, mem: np.ndarray, tcpu: np.ndarray):
    """How one component ``T`` of a segment can lie between ``a``'s call ``C`` and ``b``'s new call ``C'``,
    as (share of ``C`` in coarse units, share of ``C'``, cost, kind, side time) options; the caller adds the
    largest side time and the sum of the costs. For a chain, convexity makes ``C ∩ T`` a prefix
    ``order[:i]`` (``C`` holds ``a``) and ``C' ∩ T`` a suffix ``order[j:]`` (``C'`` holds ``b``); both
    compute theirs (least accelerator time). ``i = j``: cut, ``C`` sends the ``i``-th value and ``C'``
    receives it (``i = 0``: ``a``'s value, kind ``"a"``, charged once per segment by the caller). ``i < j``:
    the run ``order[i:j]`` is in other units (the CPU, other calls): its first node reads the ``i``-th value
    (``a``'s when ``i = 0``, kind ``"a sent"``: ``C`` must send it, ``C'`` need not receive it), which ``C``
    sends, so the run starts after ``C`` finishes; ``C'`` receives the run's last value, so it starts after
    the run; the run costs at least its side time (:func:`.tower_ends.side_time`, a shortest path over CPU
    and accelerator units). These cover every placement of the chain. A component that is not a chain: some
    value of ``a`` or ``T`` leaves ``C`` and some value of ``T`` enters ``C'``: the cheapest send (``None``:
    left to ``a``'s value) and receive, no memory, no compute."""
    order = chain_order(comp, a, b, preds, succs)
    if order is None:  # all of it in C' enters through a's value
        return [(0, 0, float(r1[comp].min()), "mixed", 0.0), (0, 0, 0.0, "a", 0.0)]
    opts = []
    k = len(order)
    cum_t = np.concatenate([[0.0], np.cumsum(tx[order])])
    cum_m = np.concatenate([[0.0], np.cumsum(mem[order])])
    for i in range(k + 1):  # C holds order[:i], C' order[j:], a third unit (or the CPU) the run between
        for j in range(i, k + 1):
            x, y = int(np.floor(cum_m[i])), int(np.floor(cum_m[k] - cum_m[j]))
            work = cum_t[i] + cum_t[k] - cum_t[j]
            if i == j:  # cut: C sends the i-th value (a's own when i = 0), C' receives it
                opts.append((x, y, work + (float(s1[order[i - 1]] + r1[order[i - 1]]) if i else 0.0),
                             "cut" if i else "a", 0.0))
                continue
            run = order[i:j]
            enter = order[i - 1] if i else a
            side = side_time(run, enter, tcpu, tx, r1, s1)
            cost = work + (float(s1[enter]) if i else 0.0) + float(r1[run[-1]])
            opts.append((x, y, cost, "cut" if i else "a sent", side))
    return _pareto(opts)


def _pareto(opts: list[tuple]) -> list[tuple]:
    """The options no other option of the same kind beats in every share, cost and side time."""
    keep: list[tuple] = []
    for o in opts:
        beaten = any(p[3] == o[3] and p[0] <= o[0] and p[1] <= o[1] and p[2] <= o[2] and p[4] <= o[4]
                     and p[:3] + p[4:] != o[:3] + o[4:] for p in opts)
        if not beaten and o not in keep:
            keep.append(o)
    return keep


def _split_table(options: list[list[tuple]], sends: list[float], size: int, case: str, tau: float) -> np.ndarray:
    """(size, size) the least cost of a segment's components over their options by (C's share, C''s share),
    for one case of ``a``'s value: ``"none"`` (not sent: no option may use it), ``"sent"`` (sent, not
    received by ``C'``: the mixed options may use it), ``"both"``; only options of side time at most ``tau``."""
    G = np.full((size, size), np.inf)
    G[0, 0] = 0.0
    for opts, send_t in zip(options, sends, strict=True):
        H = np.full((size, size), np.inf)
        for x, y, cost, kind, side in opts:
            if (kind == "a" and case != "both") or (kind == "a sent" and case == "none") or side > tau:
                continue
            if kind == "mixed":
                cost = cost + (0.0 if case != "none" else send_t)
            if x >= size or y >= size:
                continue
            H[x:, y:] = np.minimum(H[x:, y:], G[: size - x, : size - y] + cost)
        G = H
    return G


def _fresh_split(split, A: np.ndarray, a: int, b: int, comps: list[list[int]], preds, succs, direct: bool,
                 buckets: int, tcpu: np.ndarray) -> np.ndarray:
    """(buckets + 1,) the least ``pi(b)`` less ``b``'s compute when ``b`` opens a new call ``C'`` after ``a``'s
    accelerator call ``C``, by the memory ``C'`` holds of the segment (fine units): ``C`` computes and sends
    its share of each component, ``C'`` receives and computes its share (:func:`_split_options`); ``C``'s
    state (``A``) must leave room for its share. Accelerators are interchangeable here (least compute and
    charges over them), so the caller needs them to have one capacity."""
    tx, s1, r1, mem = split
    size = SPLIT_BUCKETS + 1
    f = buckets // SPLIT_BUCKETS
    options = [_split_options(c, a, preds, succs, b, tx, s1, r1, mem, tcpu) for c in comps]
    top = max((o[4] for opts in options for o in opts), default=0.0)
    if top > 0:  # side times rounded down to SIDE_LEVELS steps, not below the tower's least (fewer thresholds)
        step = top / SIDE_LEVELS
        least = [min((o[4] for o in opts if o[4] > 0), default=0.0) for opts in options]
        options = [_pareto([o[:4] + (max(np.floor(o[4] / step) * step, lo) if o[4] > 0 else 0.0,) for o in opts])
                   for opts, lo in zip(options, least, strict=True)]
    taus = sorted({0.0} | {o[4] for opts in options for o in opts})
    sends = [float(s1[c].min()) for c in comps]
    # least pi(a) of a state of C that leaves x coarse units free: prefix minima over the memory held
    pre = np.minimum.accumulate(A.min(axis=0))  # (K1,) least over devices of states holding <= mu
    room = np.array([pre[buckets - f * x] if buckets - f * x >= 0 else np.inf for x in range(size)])
    out = np.full(buckets + 1, np.inf)
    sa, ra = float(s1[a]), float(r1[a])
    for case, extra in (("none", 0.0), ("sent", sa), ("both", sa + ra)):
        if direct and case != "both":
            continue
        G = np.min([_split_table(options, sends, size, case, tau) + tau for tau in taus], axis=0)
        by_y = (room[:, None] + G).min(axis=0) + extra  # (size,) over C''s share
        for y in np.flatnonzero(np.isfinite(by_y)).tolist():
            out[f * y] = min(out[f * y], float(by_y[y]))
    return out


def tower_bound(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, edges, val_prod: np.ndarray,
                pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray, own: np.ndarray,
                capacity: np.ndarray, ef: np.ndarray | None = None, working_set: np.ndarray | None = None,
                buckets: int = TOWER_BUCKETS) -> float:
    """The latency bound of the module docstring, model units (0 when the graph has no chain of two).

    Arguments as in :class:`.data.LatencyData`; ``own`` (n,) the bytes a node brings to any device, ``ef``
    (n, D) the sweeps' earliest finish / chain point (:class:`.cuts.TimeBounds`), used as a floor;
    ``working_set`` (n,) bytes live while a node runs (a call holds its largest on top of its nodes' own)."""
    n, D = t.shape
    src, dst = (np.asarray(e, np.int64) for e in edges)
    preds = _predecessors(n, src, dst)
    anc, desc = _closures(preds)
    chain = articulation_chain(n, src, dst, desc)
    if len(chain) < 2:
        return 0.0
    cpu = np.asarray(is_cpu, bool)
    acc = ~cpu
    t = np.where(allowed, t, np.inf)
    tmin = np.where(np.isfinite(t), t, np.inf).min(axis=1)
    tmin = np.where(np.isfinite(tmin), tmin, 0.0)
    cross = np.ones((D, D), bool)
    if q <= 1:
        cross[np.diag_indices(D)] = ~acc
    send_acc = np.where(acc[None, :, None], send, 0.0)
    smin = _one_way(n, D, val_prod, pair_val, pair_cons, send_acc, allowed, cross, True)
    rmin = _one_way(n, D, val_prod, pair_val, pair_cons, np.where(acc[None, None, :], recv, 0.0), allowed, cross,
                    False)
    cap = np.where(np.isfinite(capacity) & (capacity > 0), capacity, np.inf)
    unit = cap / buckets
    K1 = buckets + 1

    def units(nodes: list[int], extra: float = 0.0) -> np.ndarray:  # (D,) buckets of the bytes, rounded down
        return np.where(acc & np.isfinite(unit), np.floor((own[nodes].sum() + extra) / unit), 0).astype(np.int64)

    ws = np.zeros(n) if working_set is None else np.asarray(working_set, float)
    xfer = _xfer(n, D, val_prod, pair_val, send_acc, recv, allowed, cross)
    same = np.diag(acc)
    floor = np.zeros((n, D)) if ef is None else np.where(np.isfinite(ef), ef, 0.0)
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for p in preds[v]:
            succs[p].append(v)
    caps = cap[acc]
    tcpu = np.where(allowed[:, cpu], t[:, cpu], np.inf).min(axis=1) if cpu.any() else np.full(n, np.inf)
    split = None
    if len(caps) and np.all(caps == caps[0]) and np.isfinite(caps[0]) and buckets % SPLIT_BUCKETS == 0:
        split = (np.where(np.isfinite(t[:, acc]), t[:, acc], np.inf).min(axis=1), smin[:, acc].min(axis=1),
                 rmin[:, acc].min(axis=1), own / (caps[0] / SPLIT_BUCKETS))
    a0 = chain[0]
    A = np.full((D, K1), np.inf)  # accelerator states: pi(a) by memory held (tracked units)
    P = np.full(D, np.inf)  # CPU states: finish of a
    lp0 = _longest(_bits(anc[a0]) + [a0], -1, preds, tmin)[a0] - tmin[a0]
    first = np.maximum(lp0 + t[a0], floor[a0])
    for d in np.flatnonzero(acc & allowed[a0]).tolist():
        u0 = int(units([a0])[d])
        if units([a0], ws[a0])[d] <= buckets:
            A[d, u0] = first[d]
    P[cpu & allowed[a0]] = first[cpu & allowed[a0]]
    for a, b in zip(chain[:-1], chain[1:], strict=True):
        seg = _bits(desc[a] & anc[b])
        M = seg + [b]
        pi_min = min(float(A.min()), float(P.min()))
        lp = _longest(M, a, preds, tmin)
        before_b = max((lp[p] for p in preds[b] if p in lp), default=0.0)
        comps = _components(seg, preds)
        direct = a in preds[b]
        cut_s = smin[a] if direct else np.minimum(smin[a], sum((smin[c].min(axis=0) for c in comps), np.zeros(D)))
        cut_r = rmin[a] if direct else np.minimum(rmin[a], sum((rmin[c].min(axis=0) for c in comps), np.zeros(D)))
        # each source kind with its own path floor: given a on an accelerator (or a CPU), every path
        # through M pays its compute and crossings from there
        sw_acc = _segment_sweep(np.where(acc, A.min(axis=1), np.inf), a, M, preds, t, xfer, same)
        sw_cpu = _segment_sweep(np.where(acc, np.inf, P), a, M, preds, t, xfer, same)
        from_acc = float((A.min(axis=1) + cut_s).min())  # a's call finished, its sends paid
        from_cpu = float(P.min())
        fresh = None if split is None else _fresh_split(split, A, a, b, comps, preds, succs, direct, buckets,
                                                                        tcpu)
        leave, enter = (from_acc, np.zeros(K1)) if split is None else end_links(
            split, tcpu, A, P, a, b, comps, preds, succs, direct, buckets, SPLIT_BUCKETS)
        newA = np.full((D, K1), np.inf)
        tM = t[M].sum(axis=0)
        mM = units(M)
        room = buckets - (units(M, ws[M].max()) - mM)  # the call also holds the largest working set of M
        for d in np.flatnonzero(acc).tolist():
            if np.isfinite(tM[d]) and mM[d] <= buckets:  # the same call holds the whole segment
                newA[d, mM[d]:] = np.maximum(A[d, : K1 - mM[d]] + tM[d], sw_acc[d])
                newA[d, max(int(room[d]) + 1, 0):] = np.inf
            ub = int(units([b])[d])
            if allowed[b, d] and units([b], ws[b])[d] <= buckets:  # a new call, holding at least b
                via = np.maximum(enter[: K1 - ub], from_cpu + cut_r[d]) + t[b, d]  # a on the CPU
                newA[d, ub:] = np.minimum(newA[d, ub:], np.maximum(via, sw_cpu[d]))
                if fresh is None:
                    newA[d, ub] = min(newA[d, ub], max(from_acc + cut_r[d] + t[b, d], sw_acc[d]))
                else:  # the segment's towers cut between a's call and b's
                    newA[d, ub:] = np.minimum(newA[d, ub:], np.maximum(fresh[: K1 - ub] + t[b, d], sw_acc[d]))
        newP = np.minimum(np.maximum(max(from_acc, leave) + t[b], sw_acc), np.maximum(from_cpu + t[b], sw_cpu))
        newP[acc] = np.inf
        low = np.maximum(pi_min + before_b + t[b], floor[b])  # every path computes in order
        A = np.where(np.isfinite(newA), np.maximum(newA, low[:, None]), np.inf)
        P = np.where(np.isfinite(newP), np.maximum(newP, low), np.inf)
        A[~allowed[b]] = np.inf
        P[~allowed[b]] = np.inf
    last = chain[-1]
    after = _longest(_bits(desc[last]), last, preds, tmin)
    rest = max((v for k, v in after.items() if k != last), default=0.0)
    best = min(float(A.min()), float(P.min()))
    return best + rest if np.isfinite(best) else 0.0

"""Where one segment's towers can run, for the articulation-chain start (:mod:`.chainstart`).

Between articulation nodes ``a`` and ``b`` each tower (a weakly connected component of ``desc(a) ∩ anc(b)``)
lies in ``a``'s call ``C``, in ``b``'s new call ``C'``, on the CPU, in a side call that feeds a CPU ``b``,
or, for a chain tower, is cut between two of these (also CPU, side call, CPU: the side call receives the
output of the tower's first node, a 1x1 convolution's, much smaller than ``a``). :func:`tower_options` lists
a tower's options with the numbers each contributes, :func:`combos` every combination of a segment's towers,
and :func:`shift` what ``b``'s chain point gains over ``a``'s under each: compute and sends of ``C`` add up,
``C'`` starts once ``C`` and the CPU parts are done and then receives, so given where ``a`` runs the shift is
a constant of the combination (sums and maxima of per-tower numbers). Charges are those of one representative
accelerator pair and the CPU (:class:`Costs`); memory is own bytes plus the largest working set, as evaluate
counts a call's.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["Costs", "cpu_path", "tower_options", "combos", "tags", "representatives", "shift", "SAME", "NEW",
           "CPU", "MEM_BUCKETS"]

MEM_BUCKETS = 64  # resolution of a call's memory in the DP's states and the combinations kept
MAX_COMBOS = 200_000  # tower option combinations per segment (larger segments: fewer options)

SAME, NEW, CPU = 0, 1, 2  # where b runs: a's call, a new call, the CPU


class Costs:
    """Per-node charges of one representative accelerator pair (``A`` -> ``B``) and the CPU ``c``; ``cap`` the
    bytes one call may hold."""

    def __init__(self, dt, own: np.ndarray, A: int, B: int, c: int | None, cap: float = np.inf):
        n = dt.n
        self.cap = cap
        self.tA = np.where(np.isfinite(dt.t[:, A]), dt.t[:, A], np.inf)
        self.tC = dt.t[:, c] if c is not None else np.full(n, np.inf)
        self.own, self.ws = own, dt.working_set.astype(float)
        used = np.zeros(len(dt.val_prod), bool)
        used[dt.pair_val] = True
        js = np.flatnonzero(used)
        vp = dt.val_prod[js]
        c_ = A if c is None else c

        def per_node(x: np.ndarray, agg=np.add) -> np.ndarray:
            out = np.zeros(n)
            agg.at(out, vp, x)
            return out
        self.s_aa = per_node(dt.send[js, A, B])
        self.r_aa = per_node(dt.recv[js, A, B])
        self.s_ac = per_node(dt.send[js, A, c_])
        self.r_ca = per_node(dt.recv[js, c_, A])
        self.d_ac = per_node(dt.recv[js, A, c_], np.maximum)


def cpu_path(nodes: list[int], preds, tC: np.ndarray) -> float:
    """Longest CPU path through ``nodes`` (ascending) once their outside inputs are on the CPU (every CPU
    node is a unit of its own, so independent nodes run in parallel)."""
    dist: dict[int, float] = {}
    inside = set(nodes)
    for v in nodes:
        dist[v] = max((dist[p] for p in preds[v] if p in inside), default=0.0) + float(tC[v])
    return max(dist.values(), default=0.0)


def tower_options(comp: list[int], a: int, b: int, preds, succs, k: Costs, a_acc: bool, mode: int,
                  cpu_prefix: int = 1):
    """Options of one tower as rows (tag, cut, memC, wsC, cmpC, sndC, memN, wsN, cmpN, recvN, needA_N,
    needA_cpu, cpu_off, cpu_recvN) for ``b`` in a new call (``mode`` NEW) or on the CPU (CPU). ``cpu_off``
    is, for NEW, the CPU finish of a CPU part after ``a``'s value is on the CPU (-inf: none); for CPU the
    finish of the tower after ``C`` ends."""
    order = sorted(comp)
    inside = set(order) | {a, b}
    chain = all([p for p in preds[v] if p in inside] == [order[i - 1] if i else a]
                and [w for w in succs[v] if w in inside] == [order[i + 1] if i + 1 < len(order) else b]
                for i, v in enumerate(order))
    exits = [v for v in order if b in succs[v]]
    rows: list[tuple] = []
    ninf = -np.inf

    def part(nodes):
        return (float(k.own[nodes].sum()) if nodes else 0.0, float(k.ws[nodes].max()) if nodes else 0.0,
                float(k.tA[nodes].sum()) if nodes else 0.0)
    cuts = range(1, len(order)) if chain else range(0)
    if mode == NEW:
        m, w, c = part(order)
        rows.append(("next", 0, 0, 0, 0, 0, m, w, c, 0, 1, 0, ninf, 0))
        if a_acc:
            rows.append(("prev", len(order), m, w, c, k.s_aa[exits].sum(), 0, 0, 0, k.r_aa[exits].sum(), 0, 0, ninf,
                         0))
            for j in cuts:
                u = order[j - 1]
                mc, wc, cc = part(order[:j])
                mn, wn, cn = part(order[j:])
                rows.append(("cut", j, mc, wc, cc, k.s_aa[u], mn, wn, cn, k.r_aa[u], 0, 0, ninf, 0))
        d = k.d_ac[a] if a_acc else 0.0
        if np.isfinite(k.tC[order]).all():
            rows.append(("cpu", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, d + cpu_path(order, preds, k.tC),
                         k.r_ca[exits].sum()))
        for j in cuts:  # the prefix on the CPU (a CPU end pays no send), the suffix in C'
            u = order[j - 1]
            if np.isfinite(k.tC[order[:j]]).all():
                mn, wn, cn = part(order[j:])
                rows.append(("cpucut", j, 0, 0, 0, 0, mn, wn, cn, 0, 0, 1, d + cpu_path(order[:j], preds, k.tC),
                             k.r_ca[u]))
        return rows
    # b on the CPU: a's call C ends after its share of the towers; each CPU part starts when C has sent
    if np.isfinite(k.tC[order]).all():
        d = k.d_ac[a] if a_acc else 0.0
        rows.append(("cpu", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, d + cpu_path(order, preds, k.tC), 0))
    for j in range(1, len(order) + 1) if chain else (len(order),):  # a side call X: the prefix, then the CPU
        u = order[j - 1]
        if np.isfinite(k.tA[order[:j]]).all() and np.isfinite(k.tC[order[j:]]).all():
            mx, wx, cx = part(order[:j])
            sends, tail = (k.s_ac[exits].sum(), k.d_ac[exits].max()) if j == len(order) else (
                k.s_ac[u], k.d_ac[u] + cpu_path(order[j:], preds, k.tC))
            rows.append(("side", j, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ninf, 0, mx, wx, cx + sends, float(tail), ninf, 1))
    rows += _cpu_side_rows(order, exits, preds, k, a, a_acc, cpu_prefix) if chain else []
    if a_acc:
        m, w, c = part(order)
        rows.append(("prev", len(order), m, w, c, k.s_ac[exits].sum(), 0, 0, 0, 0, 0, 0,
                     float(k.d_ac[exits].max()), 0))
        for j in cuts:
            u = order[j - 1]
            mc, wc, cc = part(order[:j])
            if np.isfinite(k.tC[order[j:]]).all():
                rows.append(("cut", j, mc, wc, cc, k.s_ac[u], 0, 0, 0, 0, 0, 0,
                             k.d_ac[u] + cpu_path(order[j:], preds, k.tC), 0))
    return rows


def _cpu_side_rows(order: list[int], exits: list[int], preds, k: Costs, a: int, a_acc: bool,
                   cpu_prefix: int) -> list[tuple]:
    """``b`` on the CPU, a chain tower's first ``i`` nodes on the CPU (their small output, not ``a``, crosses),
    the next nodes in the side call X, the rest on the CPU: X waits for the prefix and receives its value."""
    rows: list[tuple] = []
    for i in range(1, min(len(order), cpu_prefix + 1)):
        if not np.isfinite(k.tC[order[:i]]).all():
            break
        wait = (k.d_ac[a] if a_acc else 0.0) + cpu_path(order[:i], preds, k.tC)
        for j in range(i + 1, len(order) + 1):
            mid = order[i:j]
            if not (np.isfinite(k.tA[mid]).all() and np.isfinite(k.tC[order[j:]]).all()):
                continue
            u = order[j - 1]
            sends, tail = (k.s_ac[exits].sum(), k.d_ac[exits].max()) if j == len(order) else (
                k.s_ac[u], k.d_ac[u] + cpu_path(order[j:], preds, k.tC))
            mx, wx, cx = float(k.own[mid].sum()), float(k.ws[mid].max()), float(k.tA[mid].sum())
            cx += float(k.r_ca[order[i - 1]] + sends)
            rows.append(("cside", (i, j), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, -np.inf, 0, mx, wx, cx, float(tail), wait, 0))
            if mx + wx <= k.cap:  # or in a call of its own (on another idle accelerator): a CPU part with a detour
                rows.append(("cown", (i, j), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, wait + cx + float(tail), 0, 0, 0, 0,
                             -np.inf, -np.inf, 0, 1))
    return rows


_SUM = (2, 4, 5, 6, 8, 9, 13, 14, 16, 20)  # columns of a tower option summed over a segment's towers
_MAX = (3, 7, 12, 15, 17, 18)  # columns maxed
_NO_SIDE = (0.0, 0.0, 0.0, -np.inf, -np.inf, 0.0, 0.0)  # memX, wsX, xsum, xtail, xwait, xneedA, own calls
_ANY = (10, 11, 19)  # flags
_COLS = 21
_LATE = ("cside", "cown")  # options thinned first


def combos(rows_per_tower: list[list[tuple]]) -> tuple[np.ndarray, tuple[list[list[tuple]], np.ndarray]]:
    """Every combination of the towers' options, as (combos, 18) aggregated numbers and (the options kept, the
    option index per tower of each combination); cut options thinned (every other one of the tower with the
    most, then the last option of the tower with the most) while there are more than ``MAX_COMBOS``."""
    rows = [list(r) for r in rows_per_tower]
    while int(np.prod([len(r) for r in rows])) > MAX_COMBOS and any(x[0] in _LATE for r in rows for x in r):
        i = int(np.argmax([sum(x[0] in _LATE for x in r) for r in rows]))  # CPU-prefixed side calls go first
        cs = [x for x in rows[i] if x[0] in _LATE]
        rows[i] = [x for x in rows[i] if x[0] not in _LATE] + cs[1::2]
    while int(np.prod([len(r) for r in rows])) > MAX_COMBOS:
        i = int(np.argmax([sum(x[0] in ("cut", "cpucut") for x in r) for r in rows]))
        cuts = [x for x in rows[i] if x[0] in ("cut", "cpucut")]
        if cuts:
            rows[i] = [x for x in rows[i] if x[0] not in ("cut", "cpucut")] + cuts[1::2]
        else:  # many towers without cuts: the tower with the most options loses its last
            i = int(np.argmax([len(r) for r in rows]))
            rows[i] = rows[i][:-1]
    num = [np.array([(*x[2:], *_NO_SIDE[len(x) - 14:]) for x in r], float).reshape(len(r), _COLS - 2)
           for r in rows]
    idx = np.array(list(itertools.product(*[range(len(r)) for r in rows])), np.int64).reshape(
        int(np.prod([len(r) for r in rows])), len(rows))
    agg = np.zeros((len(idx), _COLS))
    agg[:, list(_MAX)] = -np.inf
    for i, arr in enumerate(num):
        pick = arr[idx[:, i]]
        full = np.zeros((len(idx), _COLS))
        full[:, 2:] = pick
        agg[:, list(_SUM)] += full[:, list(_SUM)]
        agg[:, list(_MAX)] = np.maximum(agg[:, list(_MAX)], full[:, list(_MAX)])
        agg[:, list(_ANY)] = np.maximum(agg[:, list(_ANY)], full[:, list(_ANY)])
    return agg, (rows, idx)


def tags(table, i: int) -> tuple[tuple[str, int], ...]:
    """(tag, cut) per tower of combination ``i`` of a :func:`combos` table."""
    rows, idx = table
    return tuple((rows[t][j][0], rows[t][j][1]) for t, j in enumerate(idx[i].tolist()))


def representatives(shifted, cap: float) -> np.ndarray:
    """Indices of the combinations worth trying: the least ``K`` per (memory bucket of ``a``'s call, of the new
    call, calls opened), ties to the lower index."""
    K, memC, _, memN, _, calls = shifted
    ok = np.flatnonzero(np.isfinite(K))
    cell = np.stack([np.ceil(memC[ok] / cap * MEM_BUCKETS), np.ceil(memN[ok] / cap * MEM_BUCKETS), calls[ok]], 1)
    order = np.lexsort((ok, K[ok], cell[:, 2], cell[:, 1], cell[:, 0]))
    first = np.ones(len(order), bool)
    first[1:] = (cell[order][1:] != cell[order][:-1]).any(axis=1)
    return ok[order[first]]


def shift(agg: np.ndarray, a: int, b: int, k: Costs, a_acc: bool, mode: int, direct: bool):
    """(K, memC, wsC, memN, wsN, side) per combination: ``pi(b) = pi(a) + K``; ``memC``/``wsC`` what ``a``'s
    call adds (own bytes, largest working set), ``memN``/``wsN`` the new call's (``b`` in it) or, ``b`` on the
    CPU, the side call's; ``side`` 1 where a side call is opened."""
    memC, wsC, cmpC, sndC, memN, wsN, cmpN, recvN = (agg[:, i] for i in (2, 3, 4, 5, 6, 7, 8, 9))
    needN, needCpu, cpu_off, cpu_recv = agg[:, 10] > 0, agg[:, 11] > 0, agg[:, 12], agg[:, 13]
    none = np.zeros(len(agg), np.int64)
    if mode == NEW:
        needN = needN | direct
        if a_acc:
            sendA = np.maximum(np.where(needN, k.s_aa[a], 0.0), np.where(needCpu, k.s_ac[a], 0.0))
            start = cmpC + sndC + sendA + np.maximum(cpu_off, 0.0)
            recv = np.where(needN, k.r_aa[a], 0.0) + recvN + cpu_recv
        else:
            start = np.maximum(cpu_off, 0.0)
            recv = np.where(needN, k.r_ca[a], 0.0) + cpu_recv
        K = start + recv + cmpN + k.tA[b]
        return K, memC, wsC, memN + k.own[b], np.maximum(wsN, k.ws[b]), none
    memX, wsX, xsum, xtail, xwait, xneedA = (agg[:, i] for i in (14, 15, 16, 17, 18, 19))
    side, xneedA = np.isfinite(xtail), xneedA > 0
    # X starts once a is done (if it receives a) and the CPU prefixes it waits for are, then receives and computes
    xstart = np.maximum(np.where(xneedA, 0.0, -np.inf), xwait)
    if a_acc:
        needCpu = needCpu | direct
        cfin = cmpC + sndC + np.maximum(np.where(needCpu, k.s_ac[a], 0.0), np.where(side & xneedA, k.s_aa[a], 0.0))
        xfin = cfin + xstart + np.where(xneedA, k.r_aa[a], 0.0) + xsum
        K = cfin + np.maximum(np.maximum(cpu_off, k.d_ac[a] if direct else 0.0), 0.0)
    else:
        xfin = xstart + np.where(xneedA, k.r_ca[a], 0.0) + xsum
        K = np.maximum(cpu_off, 0.0)
    K = np.maximum(K, np.where(side, xfin + xtail, -np.inf)) + k.tC[b]
    calls = side.astype(np.int64) + agg[:, 20].astype(np.int64)  # the side call X, then one per "cown" tower
    return K, memC, wsC, np.where(side, memX, 0.0), np.where(side, wsX, 0.0), calls

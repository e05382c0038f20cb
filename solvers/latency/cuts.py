"""Placement-aware time bounds for the latency IP, and what the model gains from them.

The latency IP links node finish times to subgraph calls with big-M rows; with fractional
placements those rows are slack and the LP bound falls back to the plain critical path at every
node's fastest device — far below any real placement, because leaving a CPU costs a transfer at
each end of a call, and branch and bound would have to close that gap by enumeration.
:func:`time_bounds` computes, by two sweeps over the graph, what any placement
must pay around each node *given the device it runs on*:

* ``ef[v, a]`` (earliest finish): on a CPU, a lower bound on the node's finish; on an accelerator,
  on the "chain point" of the node in its call — the call's start plus the charges and compute of
  one path through the call ending at the node. A predecessor is either in the same call (its
  chain point plus this node's compute) or elsewhere (its value arrives no earlier than its own
  bound, plus the send its call pays, plus what the receiver pays).
* ``rest``: on an accelerator, what the call still pays after the chain point (the compute of
  successors kept in the call, or sending the node's value out); ``finish = ef + rest``.
* ``tail[v, a]``: a lower bound on latency minus the chain point (minus the finish on a CPU): each
  successor either stays in the call or is reached through a transfer, then has its own tail;
  ``through = ef + tail`` bounds the latency of every placement that runs the node there.
* ``tail_fin[v, a]``: the same from the end of the node's call (sends already paid).

A call is convex, which couples a node's neighbours: when a producer of ``w`` is outside ``w``'s call,
so is every other producer of ``w`` that is its ancestor, and the call receives both (likewise a
consumer outside the call takes the consumers that descend from it along). Without this a path could
"leave" a call over one cheap edge (a layer norm's tiny output) while the activation next to it stays.
For the same reason a producer kept in its consumer's call brings every node between them into the call,
with their compute and memory (:mod:`.intervals`: a path over a residual block's shortcut holds the block).

A call also runs its nodes one after another, which the per-path sweep cannot see: at a join of two
independent producers that share the join's call, the chain through one producer also pays the other
producer's own branch — its compute inside the call, or the transfer through which the branch enters
it (:func:`_join`, for joins of up to ``JOIN_MAX`` producers: every convex choice of which producers
share the call is a case, and the bound is the cheapest). On BERT this is each layer's Q, K and V
projections. The other branch also holds memory in the call (ResNet's projection shortcuts: a path
through the shortcut skips the block's main branch), so the case charges its memory too.

A call receives every value entering it after it starts, one after another: when producers tied by
convexity (or, at a join, several producers) are outside the call, the chain pays every one of their
receives, not only the largest.

Memory makes them much stronger where it is tight (BERT-24 layers, ResNet-50, Inception): the
sweeps carry the memory of the path inside the call (in :func:`bucket_count` units per device, rounded down
so the relaxation stays valid), and a call cannot hold more than its device, so a path heavier than
one device must leave the call somewhere — paying a transfer, or a slower device.

Every option a real placement has is a term of a min, and a real placement's times are sums over
one path, so each bound holds for every feasible placement (slot order, device contention and
memory held off the path only add time). Exactly evaluate's charges are used
(:mod:`.data`); tests/solvers/latency/test_cuts.py checks every bound against every
feasible placement of small graphs.

The model uses them four ways (:func:`add_bound_rows`, :func:`reduce_allowed`, :func:`probe_lower_bound`):

* variable bounds and big-M values: the earliest finish of a node over its allowed devices, and its
  latest finish under the horizon;
* disaggregated rows ``lat[v] >= sum_u finish(v, u) x[v, u]``, ``T >= lat[v] + sum_u
  tail_fin(v, u) x[v, u]`` and ``T >= sum_u through(v, u) x[v, u]``: valid because exactly one
  ``x[v, u]`` is 1;
* presolve: a node cannot run on a device where ``through`` exceeds the horizon (the warm start's
  latency), nor where it does not fit the memory alone; those columns are never created.
* probing (:func:`probe_lower_bound`): assuming the latency is at most ``L``, the same presolve run
  without keeping any device per node refutes ``L`` when some node is left with none; bisection
  between the sweep bound and the horizon gives a lower bound on ``T`` (branch and bound rarely
  raises the sweep bound on the layer graphs, see the notes).

:func:`add_slot_order_rows` adds one more family that needs no bounds: a value never flows from a
later call of an accelerator back to an earlier one.

Ordering the q slots of a device by first node is not valid: slot order is execution order, and two
independent subgraphs may need either order. Measurements (what the bounds gain, and what was tried
and did not help) are in ``docs/notes/latency-bounds.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .intervals import interval_terms

__all__ = ["TimeBounds", "time_bounds", "memory_buckets", "reduce_allowed", "probe_lower_bound", "fits_alone",
           "add_bound_rows", "add_slot_order_rows", "refutes", "FIX_MARGIN", "BUCKETS", "PROBES",
           "bucket_count"]

BUCKETS = 256  # least memory resolution of the bounds, per device
MAX_BUCKETS = 4096  # finest resolution (ResNet-50 layers: the sweep bound 82.3 ms at 256, 90.3 ms from 4096)
BUCKET_CELLS = 1_500_000  # nodes x devices x buckets the sweeps' tables may hold (GNMT layers: 2048, as good as 4096)
FIX_MARGIN = 1e-7  # relative: a device is ruled out only when its bound beats the horizon by this much
PROBES = 8  # bisection steps of :func:`probe_lower_bound`
PROBE_ROUNDS = 12  # propagation rounds per probe (each recomputes the bounds)


@dataclass(frozen=True, eq=False)
class TimeBounds:
    """Per (node, device) time bounds in model units (``inf`` where the node cannot run)."""

    ef: np.ndarray  # (n, D) earliest finish (CPU) / chain point (accelerator)
    tail: np.ndarray  # (n, D) latency minus finish (CPU) / chain point (accelerator)
    tail_fin: np.ndarray  # (n, D) latency minus the call's finish (accelerator); = tail on CPUs
    finish: np.ndarray  # (n, D) the node's finish (its call's finish on an accelerator)
    through: np.ndarray  # (n, D) latency of any placement that runs the node on the device


def _consumers_and_producers(n: int, val_prod, pair_val, pair_cons):
    """Incoming uses grouped by consumer and outgoing uses grouped by producer (CSR over pairs)."""
    prod = val_prod[pair_val]
    by_cons = np.argsort(pair_cons, kind="stable")
    in_ptr = np.searchsorted(pair_cons[by_cons], np.arange(n + 1))
    by_prod = np.argsort(prod, kind="stable")
    out_ptr = np.searchsorted(prod[by_prod], np.arange(n + 1))
    return prod, by_cons, in_ptr, by_prod, out_ptr


def _closures(preds_of: list[list[int]]) -> tuple[list[int], list[int]]:
    """Ancestors and descendants of every node as Python-int bitsets (nodes in topological order)."""
    n = len(preds_of)
    anc, desc = [0] * n, [0] * n
    for v in range(n):
        for p in preds_of[v]:
            anc[v] |= anc[p] | (1 << p)
    for v in range(n - 1, -1, -1):
        for p in preds_of[v]:
            desc[p] |= desc[v] | (1 << v)
    return anc, desc


def _coupled(option: np.ndarray, nodes: np.ndarray, closure: list[int], entry: np.ndarray | None = None) -> np.ndarray:
    """``option[i]`` (k, D) is what the call pays when neighbour ``nodes[i]`` is outside it. A call is
    convex, so with ``nodes[i]`` outside, every neighbour ``nodes[j]`` on a path through ``nodes[i]``
    (``closure[nodes[i]]`` holds it: an ancestor of a producer, a descendant of a consumer) is outside
    too, and the call pays both: ``out[i] = max_j option[j]`` over ``j = i`` and those.

    With ``entry`` (k, D), the least charge for the call to take in use ``j``'s value: a call receives
    every value entering it one after another once it starts (evaluate's call), so the chain waits for
    ``option[j]`` and then also for every other tied value, ``out[i] = max_j (option[j] + sum_{l != j}
    entry[l])`` over the tied uses."""
    ids = nodes.tolist()
    k = len(ids)
    tie = np.array([[ids[j] == ids[i] or (closure[ids[i]] >> ids[j]) & 1 for j in range(k)] for i in range(k)], bool)
    if not (tie.sum() > k):
        return option
    if entry is None:
        return np.where(tie[:, :, None], option[None, :, :], -np.inf).max(axis=1)
    out = np.full(option.shape, -np.inf)
    for i in range(k):
        tied = np.flatnonzero(tie[i])
        for j in tied:
            others = tied[tied != j]
            out[i] = np.maximum(out[i], option[j] + entry[others].sum(axis=0))
    return out


JOIN_MAX = 4  # joins of more producers keep the per-producer bound (the join bound enumerates 2^k subsets)
CHAIN_MAX = 64  # longest private branch followed back from a producer
BRANCH_OPTIONS = 8  # ways a private branch enters its join's call that the join bound tells apart


def _private_work(start: int, other: int, t: np.ndarray, rmin: np.ndarray, size: np.ndarray, anc: list[int],
                  preds_of: list[list[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ways a call on each device can hold ``start``'s own branch when ``start`` is in the call, as
    (time (D,), memory (D,) in buckets) options: following one path back from ``start`` through nodes
    that are neither ``other`` nor its ancestors, each node is computed in the call, and held in its
    memory, until the branch enters it — receiving the value of the first node outside (a value no path
    into ``other`` carries, so not a charge already counted on ``other``'s side). Entering at the fork
    itself costs nothing extra (its value may be received for ``other`` too), so the all-inside option
    counts compute only. None of these nodes is an ancestor of ``other``, so their memory is not in
    ``other``'s chain either: the call holds both."""
    excl = anc[other] | (1 << other)
    path = [start]
    x = start
    while len(path) < CHAIN_MAX:
        cands = [y for y in preds_of[x] if not (excl >> y) & 1]
        if not cands:
            break
        x = min(cands, key=lambda y: (-float(np.min(t[y])), y))
        path.append(x)
    work, mem = np.cumsum(t[path], axis=0), np.cumsum(size[path], axis=0)
    options = [(work[-1], mem[-1])]  # the whole branch inside
    if len(path) == 1:
        return options
    enter = work[:-1] + rmin[path[1:]]  # (L - 1, D): enters at path[e], e = 1..L-1, holding path[:e]
    # consecutive entries merge into one option of their least time and least memory (a relaxation, so
    # still a bound): first those holding the same memory (lossless), then into BRANCH_OPTIONS groups
    held = mem[:-1]
    cuts = [0] + [e for e in range(1, len(held)) if (held[e] != held[e - 1]).any()] + [len(held)]
    if len(cuts) - 1 > BRANCH_OPTIONS:
        cuts = sorted(set(cuts[:: -(-(len(cuts) - 1) // BRANCH_OPTIONS)] + [len(held)]))
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        options.append((enter[a:b].min(axis=0), held[a]))
    return options


def _with_branch(same: np.ndarray, options: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """(D, K1): the chain of ``same`` (by memory budget) when the call also runs one of the branch
    ``options``: its time added, its memory taken from the budget; the cheapest option."""
    work = np.stack([w for w, _ in options])[:, :, None]  # (O, D, 1)
    mem = np.stack([m for _, m in options])  # (O, D)
    K1 = same.shape[-1]
    idx = np.arange(K1)[None, None, :] - np.minimum(mem, K1)[:, :, None]
    held = np.take_along_axis(np.broadcast_to(same, idx.shape), np.maximum(idx, 0), axis=-1)
    return np.where(idx >= 0, held + work, np.inf).min(axis=0)


def _join(producers: np.ndarray, p: np.ndarray, arrive: np.ndarray, same_call: np.ndarray, t: np.ndarray,
          rmin: np.ndarray, size: np.ndarray, anc: list[int], preds_of: list[list[int]],
          entry: np.ndarray) -> np.ndarray:
    """(D, K1) the least a join waits before its own compute, over which producers share its call.

    A call runs its nodes one after another, so with two independent producers both inside it, the
    chain through one also pays the other's own branch (:func:`_private_work`): the per-producer bound
    ``max_p min(arrive_p, same_p)`` assumes the branches run in parallel. Every subset ``S`` of
    producers inside the call is a case (a subset that leaves a producer outside while one of its
    ancestors is inside is not convex, and skipped); the bound is the cheapest case."""
    k = len(producers)
    ids = producers.tolist()
    arr = np.stack([arrive[p == q].max(axis=0) for q in ids])  # (k, D): all its values must arrive
    same = np.stack([same_call[np.flatnonzero(p == q)[0]] for q in ids])  # (k, D, K1)
    took = np.stack([entry[p == q].sum(axis=0) for q in ids])  # (k, D): the least the call pays for q's values
    is_anc = [[i != j and bool((anc[ids[i]] >> ids[j]) & 1) for j in range(k)] for i in range(k)]  # j before i
    both: dict[tuple[int, int], np.ndarray] = {}  # (i, j): i's chain when j's branch shares the call
    indep = np.zeros((k, k), bool)
    for i in range(k):
        for j in range(k):
            if i != j and not is_anc[i][j] and not is_anc[j][i]:
                indep[i, j] = True
                both[i, j] = _with_branch(same[i], _private_work(ids[j], ids[i], t, rmin, size, anc, preds_of))
    best = np.full(same.shape[1:], np.inf)
    for mask in range(1 << k):
        inside = [(mask >> i) & 1 == 1 for i in range(k)]
        if any(inside[j] and not inside[i] and is_anc[i][j] for i in range(k) for j in range(k)):
            continue  # an ancestor inside, its descendant producer outside: not convex
        val = np.full(same.shape[1:], -np.inf)
        for i in range(k):
            if not inside[i]:  # the other producers outside send values the call also receives
                others = [j for j in range(k) if j != i and not inside[j] and not is_anc[i][j]]
                val = np.maximum(val, (arr[i] + took[others].sum(axis=0))[:, None])
                continue
            others = [j for j in range(k) if inside[j] and indep[i, j]]
            val = np.maximum(val, same[i])
            for j in others:  # one other branch at a time: no overlap
                val = np.maximum(val, both[i, j])
        best = np.minimum(best, val)
    return best


def memory_buckets(node_bytes: np.ndarray, capacity: np.ndarray, buckets: int) -> np.ndarray:
    """(n, D) each node's memory in whole ``capacity / buckets`` units, rounded down (so any set of
    nodes that fits a device also fits ``buckets`` units: the bounds stay a relaxation); 0 on devices
    without a limit."""
    cap = np.where(np.isfinite(capacity) & (capacity > 0), capacity, np.inf)
    units = np.floor(node_bytes[:, None] / (cap[None, :] / buckets))
    return np.where(np.isfinite(cap)[None, :], np.minimum(units, buckets + 1), 0).astype(np.int64)


def bucket_count(n: int, devices: int) -> int:
    """The memory resolution of the sweeps for ``n`` nodes on ``devices`` devices: each node's memory is
    rounded down to whole buckets, so a path of many small nodes loses up to one bucket per node and
    looks lighter than it is; finer buckets cost time and memory linearly, so the finest that keeps the
    tables within ``BUCKET_CELLS`` entries (a power of two, between ``BUCKETS`` and ``MAX_BUCKETS``)."""
    fit = BUCKET_CELLS // max(1, n * devices)
    return int(min(MAX_BUCKETS, max(BUCKETS, 2 ** int(math.floor(math.log2(max(fit, 1)))))))


def _shift(a: np.ndarray, by: np.ndarray) -> np.ndarray:
    """``out[..., d, mu] = a[..., d, mu - by[d]]`` (``inf`` below ``by[d]``): the budget left to the
    rest of a call once a node of ``by[d]`` units is in it."""
    K1 = a.shape[-1]
    idx = np.broadcast_to(np.arange(K1) - np.asarray(by)[..., None], a.shape)
    out = np.take_along_axis(a, np.maximum(idx, 0), axis=-1)
    return np.where(idx >= 0, out, np.inf)


def time_bounds(t: np.ndarray, allowed: np.ndarray, is_cpu: np.ndarray, q: int, val_prod: np.ndarray,
                pair_val: np.ndarray, pair_cons: np.ndarray, recv: np.ndarray, send: np.ndarray,
                size: np.ndarray | None = None, buckets: int = 0) -> TimeBounds:
    """The bounds of the module docstring, by a forward and a backward sweep over the uses.

    ``t`` (n, D) compute, ``recv``/``send`` (V, D, D) charges as in :class:`LatencyData`. A transfer
    between two units of one accelerator exists only with ``q > 1`` (another subgraph slot).

    With ``size`` (n, D) memory in units of ``1/buckets`` of each device (:func:`memory_buckets`),
    the sweeps also track the memory of the path inside the call (the call's ancestors, resp.
    descendants, of the node): a call holds at most ``buckets`` units, so a path heavier than one
    device must leave it — for a transfer, or for a slower device."""
    n, D = t.shape
    inf = np.inf
    K1 = buckets + 1
    size = np.zeros((n, D), np.int64) if size is None else size
    t = np.where(allowed, t, inf)
    acc = ~np.asarray(is_cpu, bool)
    # (a, b): may a producer on a feed a consumer on b through a transfer (different units)?
    cross = np.ones((D, D), bool)
    if q <= 1:
        cross[np.diag_indices(D)] = ~acc
    send_acc = np.where(acc[None, :, None], send, 0.0)  # only accelerator calls pay to send
    in_call = acc[None, :, None]  # (1, D, 1): devices whose nodes share a call
    prod, by_cons, in_ptr, by_prod, out_ptr = _consumers_and_producers(n, val_prod, pair_val, pair_cons)
    preds_of: list[list[int]] = [[] for _ in range(n)]  # distinct producers of each node, ascending
    for a, b in sorted(set(zip(prod.tolist(), pair_cons.tolist(), strict=True))):
        preds_of[b].append(a)
    anc, desc = _closures(preds_of)
    span_t, span_m = interval_terms(prod, pair_cons, anc, desc, t, size)  # nodes a call holds between p and w
    # rmin[x, b]: the least a call on b pays to receive any value of x (from anywhere x may run)
    rmin = np.full((n, D), inf)
    if len(val_prod):
        per_val = np.where(cross[None] & allowed[val_prod][:, :, None], recv, inf).min(axis=1)
        np.minimum.at(rmin, val_prod, per_val)
    mu = np.arange(K1)[None, :]
    # F[v, a, m]: chain point of v on a when v's ancestors inside its call weigh at most m units
    F = np.full((n, D, K1), inf)
    for w in range(n):
        uses = by_cons[in_ptr[w]: in_ptr[w + 1]]
        fits = mu >= size[w][:, None]
        if len(uses) == 0:
            F[w] = np.where(fits, t[w][:, None], inf)
            continue
        p, j = prod[uses], pair_val[uses]
        ef_p = F[p, :, -1]
        # value available at a consumer on b, for a producer on a: (k, a, b)
        arrive = ef_p[:, :, None] + send_acc[j] + recv[j]
        arrive = np.where(cross[None] & allowed[p][:, :, None], arrive, inf).min(axis=1)
        # least charge of each value entering a call on b (summed: a call receives its inputs one by one)
        entry = np.where(acc[None, :], np.where(cross[None] & allowed[p][:, :, None], recv[j], inf).min(axis=1), 0.0)
        if len(uses) > 1:  # convexity: a producer outside the call takes its ancestors out with it
            arrive = _coupled(arrive, p, anc, entry)
        same_call = np.where(in_call & allowed[p][:, :, None],
                             _shift(F[p], size[w] + span_m[uses]) + span_t[uses][:, :, None], inf)
        producers = np.unique(p)
        if 2 <= len(producers) <= JOIN_MAX and acc.any():
            opt = _join(producers, p, arrive, same_call, t, rmin, size, anc, preds_of, entry)
        else:
            opt = np.minimum(arrive[:, :, None], same_call).max(axis=0)
        F[w] = np.where(fits, t[w][:, None] + np.maximum(opt, 0.0), inf)
    # G[v, a, m]: latency minus the chain point when v's descendants in its call weigh at most m;
    # R: the same for what the call still pays (finish minus chain point)
    G = np.zeros((n, D, K1))
    R = np.zeros((n, D, K1))
    tail_fin = np.zeros((n, D))
    for v in range(n - 1, -1, -1):
        uses = by_prod[out_ptr[v]: out_ptr[v + 1]]
        fits = mu >= size[v][:, None]
        if len(uses) == 0:
            G[v] = np.where(fits, 0.0, inf)
            R[v] = G[v]
            continue
        w, j = pair_cons[uses], pair_val[uses]
        ok = cross[None] & allowed[w][:, None, :]  # (k, a, b): consumer on b, producer on a
        reach = recv[j] + (t[w] + G[w, :, -1])[:, None, :]  # receiver's charge, compute and tail
        leave = np.where(ok, send_acc[j], inf).min(axis=2)  # (k, a): cheapest way out of the call
        out = np.where(ok, send_acc[j] + reach, inf).min(axis=2)
        out_fin = np.where(ok, reach, inf).min(axis=2)
        if len(uses) > 1:  # convexity: a consumer outside the call takes its descendants out with it
            out, out_fin = _coupled(out, w, desc), _coupled(out_fin, w, desc)
        # consumer kept in the call, with every node between them
        stay = np.where(in_call & allowed[w][:, :, None], (t[w] + span_t[uses])[:, :, None], inf)
        held = size[v] + span_m[uses]
        best = np.maximum(np.minimum(out[:, :, None], stay + _shift(G[w], held)).max(axis=0), 0.0)
        G[v] = np.where(fits, best, inf)
        R[v] = np.where(fits & acc[:, None], np.minimum(leave[:, :, None], stay + _shift(R[w], held)).max(axis=0),
                        np.where(fits, 0.0, inf))
        fin_same = np.where(acc[None] & allowed[w], tail_fin[w], inf)
        tail_fin[v] = np.maximum(np.where(acc[None], np.minimum(fin_same, out_fin), out_fin).max(axis=0), 0.0)
    # a call holds the node's ancestors and descendants in it: m1 + m2 - size <= buckets
    other = np.clip(buckets + size[:, :, None] - mu[None], 0, buckets)
    through = (F + np.take_along_axis(G, other, axis=-1)).min(axis=-1)
    finish = (F + np.take_along_axis(R, other, axis=-1)).min(axis=-1)
    bad = ~allowed
    ef, tail = F[:, :, -1], G[:, :, -1]
    for a in (ef, tail, tail_fin, finish, through):
        a[bad] = inf
    tail_fin[:, ~acc] = tail[:, ~acc]
    return TimeBounds(ef=ef, tail=tail, tail_fin=tail_fin, finish=finish, through=through)


def fits_alone(node_mem: np.ndarray, working_set: np.ndarray, param_use, param_bytes: np.ndarray,
               capacity: np.ndarray, margin: float) -> np.ndarray:
    """(n, D): the node's own state, parameters and working set fit the device's usable memory."""
    n = len(node_mem)
    own = node_mem + working_set
    pv, pn = param_use
    if len(pv):
        own = own + np.bincount(pn, weights=param_bytes[pv], minlength=n)
    return own[:, None] <= capacity[None, :] * (1.0 - margin)


def reduce_allowed(allowed: np.ndarray, horizon: float, bounds_of, rounds: int = 4):
    """Drop (node, device) pairs whose latency bound exceeds ``horizon``, recomputing the bounds
    (fewer options make them stronger) until nothing changes. ``bounds_of(allowed)`` returns
    :class:`TimeBounds`. A node keeps at least its best device, so the model stays well posed even
    when the horizon is below every placement (then the MIP proves infeasibility itself)."""
    allowed = allowed.copy()
    b = bounds_of(allowed)
    for _ in range(rounds):
        through = b.through
        cut = allowed & (through > horizon * (1.0 + FIX_MARGIN))
        keep_best = np.zeros_like(cut)
        keep_best[np.arange(len(allowed)), np.argmin(np.where(allowed, through, np.inf), axis=1)] = True
        cut &= ~(keep_best & (cut | ~allowed).all(axis=1, keepdims=True))
        if not cut.any():
            break
        allowed &= ~cut
        b = bounds_of(allowed)
    return allowed, b


def refutes(allowed: np.ndarray, level: float, bounds_of, rounds: int, deadline: float, load_of=None) -> bool:
    """Whether propagation proves that no placement has latency at most ``level`` (model units);
    ``load_of(allowed, bounds)``, when given, is one more lower bound that refutes it when above."""
    a = allowed.copy()
    b = bounds_of(a)
    for _ in range(rounds):
        if load_of is not None and load_of(a, b) > level * (1.0 + FIX_MARGIN):
            return True
        cut = a & (b.through > level * (1.0 + FIX_MARGIN))
        if not cut.any() or time.perf_counter() > deadline:
            return False
        a &= ~cut
        if not a.any(axis=1).all():
            return True
        b = bounds_of(a)
    return False


def probe_lower_bound(allowed: np.ndarray, lower: float, upper: float, bounds_of, *, deadline: float = math.inf,
                      probes: int = PROBES, rounds: int = PROBE_ROUNDS, load_of=None, refute=None) -> float:
    """A lower bound on every placement's latency at least ``lower``, by refuting "latency <= L" (model units).

    A placement of latency at most ``L`` runs each node where ``through <= L`` (the bounds hold for every
    placement the allowed pairs admit), so the other pairs can go; with fewer options the recomputed bounds
    grow and more pairs go. When a node is left with no device, no placement reaches ``L``: the latency
    exceeds it. Unlike :func:`reduce_allowed` (which keeps each node's best device so that the model stays
    well posed) nothing is kept, and the result is only a number: the allowed pairs are not changed.

    The search starts close to ``lower`` (the sweep bound), where refutation is likeliest and cheapest:
    steps of ``(upper - lower) / 16`` that double while they are refuted, then bisection below the first
    ``L`` that is not; it returns the largest ``L`` refuted within ``probes`` steps and ``deadline``
    (``time.perf_counter()``), or ``lower`` when none is. ``upper`` is the horizon (a real placement's latency).
    ``load_of(allowed, bounds)`` (e.g. :func:`.loads.contention_bound`) refutes ``L`` too when above it;
    ``refute(allowed, L, deadline)``, when given, replaces propagation (e.g. :func:`.shaving.branch_refutes`)."""
    lo, hi = float(lower), float(upper)
    step, galloping = (hi - lo) / 16.0, True
    for _ in range(probes):
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo * (1.0 + 1e-4) or time.perf_counter() > deadline:
            break
        level = min(lo + step, 0.5 * (lo + hi)) if galloping else 0.5 * (lo + hi)
        if (refute(allowed, level, deadline) if refute is not None
                else refutes(allowed, level, bounds_of, rounds, deadline, load_of)):
            lo, step = level, 2.0 * step
        else:
            hi, galloping = level, False
    return lo


def add_bound_rows(m, dt, lin) -> None:
    """The disaggregated rows of the module docstring on model ``m`` (see :func:`build_model`)."""
    import pyomo.environ as pyo

    b: TimeBounds = dt.bounds
    U = dt.num_units
    ud = dt.unit_dev
    xs = dt.allowed[:, ud]
    fin_lb, tail_u, through = b.finish[:, ud], b.tail_fin[:, ud], b.through[:, ud]

    def terms(v, coef):
        ws = [w for w in range(U) if xs[v, w]]
        return [float(coef[v, w]) for w in ws], [m.x[v, w] for w in ws]

    def _finish(m, v):
        c, xv = terms(v, fin_lb)
        if max(c) <= float(dt.head[v]) + 1e-12:
            return pyo.Constraint.Skip
        return lin([1.0] + [-a for a in c], [m.lat[v]] + xv) >= 0
    m.finish_bound = pyo.Constraint(m.N, rule=_finish, doc="a node finishes no earlier than its device allows")

    def _tail(m, v):
        c, xv = terms(v, tail_u)
        if max(c) <= 1e-12:
            return pyo.Constraint.Skip
        return lin([1.0, -1.0] + [-a for a in c], [m.T, m.lat[v]] + xv) >= 0
    m.tail_bound = pyo.Constraint(m.N, rule=_tail, doc="after a node, its device's transfers and successors")

    def _through(m, v):
        c, xv = terms(v, through)
        return lin([1.0] + [-a for a in c], [m.T] + xv) >= 0
    m.through_bound = pyo.Constraint(m.N, rule=_through, doc="latency through a node on its device")


def add_slot_order_rows(m, dt, lin) -> None:
    """Calls on one accelerator run in slot order, so a value never flows from a later call back to
    an earlier one: for an edge ``a -> b`` and slot ``k``, ``x[b, k] + sum_{k' > k} x[a, k'] <= 1``.
    (The timing rows imply it for integer placements; the LP needs it spelt out.)"""
    import pyomo.environ as pyo

    S, q = dt.num_slots, dt.q
    src, dst = dt.edges
    xs = dt.allowed[:, dt.unit_dev[:S]]
    rows = [(e, s) for e in range(len(src)) for s in range(S) if dt.slot_pos[s] < q - 1 and xs[dst[e], s]
            and xs[src[e], s + 1: s + q - dt.slot_pos[s]].any()]

    def _rule(m, e, s):
        a, b = int(src[e]), int(dst[e])
        later = [s + k for k in range(1, q - int(dt.slot_pos[s])) if xs[a, s + k]]
        return lin([1.0] * (1 + len(later)), [m.x[b, s]] + [m.x[a, w] for w in later]) <= 1
    m.slot_order = pyo.Constraint(rows, rule=_rule, doc="no value flows from a later call back to an earlier one")

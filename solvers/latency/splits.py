"""The best contiguous split of a topological order, by dynamic programming (a latency baseline).

A person who splits a model that does not fit one device cuts its layers into consecutive pieces,
one accelerator each, and puts the cuts where little data crosses. :func:`split_dp` finds the best
such split exactly, for one topological order: piece ``[i, j)`` of the order runs on the ``k``-th
accelerator (each accelerator used at most once, some left idle) or on the fastest CPU (no memory
limit, any number of pieces: a memory-heavy stem can stay on the host), and the DP minimises the sum of
the pieces' durations — compute, plus what a piece receives (each value once), plus what it sends
(each value once) — under each device's memory and the ops it supports, never splitting a
colocation class. For a chain of pieces that sum *is* the latency evaluate computes; where a later
piece does not wait for every earlier one it is an upper bound, and the caller re-evaluates.

Costs of all pieces ending at ``j`` come from running sums over the order, vectorised over the
start ``i``: a value produced at position ``p`` whose last use before ``j`` is at ``c`` is received
by every piece starting in ``(p, c]`` and sent by every piece starting at or before ``p`` when a use
lies at or after ``j`` — the same for a parameter's bytes (produced "at -1"). So one order costs
``O(n (n + V) + n^2 k)`` array work.

The packed splits of :mod:`.baselines` fill each accelerator greedily and cut wherever memory runs
out; this DP's split is a better warm start for the latency IP (figures in
``docs/notes/latency-bounds.md``). Charges that depend on where the other end is are taken at
their worst over the devices the DP may use, so the DP stays an upper bound there.
"""

from __future__ import annotations

import numpy as np

from planmap.crossings import crossings
from planmap.graph import topological_order
from planmap.problem import Certificate, Problem, Solution, Status
from planmap.vocabulary import Mode, ObjectiveKind

__all__ = ["split_dp", "split_orders", "best_splits"]

MARGIN = 1e-6  # share of each device's memory left free (as the latency IP's MEMORY_MARGIN)


def split_orders(problem: Problem) -> list[np.ndarray]:
    """Distinct topological orders worth splitting: the graph's own (smallest index first), the
    latest-start order (each node as late as its critical path allows, so side branches sit next to
    where they are used) and depth-first (each branch kept whole)."""
    g = problem.graph
    n = g.num_nodes
    src, dst = (np.asarray(x, np.int64) for x in g.node_edges)
    pairs = list(zip(src.tolist(), dst.tolist(), strict=True))
    orders = [topological_order(n, pairs)]
    t = np.where(problem.allowed, problem.cost.device_compute, np.inf).min(axis=1)
    t = np.where(np.isfinite(t), t, 0.0)
    succ_ptr, succ = g.succ
    base = orders[0]
    if base is None:
        return []
    tail = np.zeros(n)
    for v in reversed(base):
        s = succ[succ_ptr[v]: succ_ptr[v + 1]]
        tail[v] = t[v] + (tail[s].max() if len(s) else 0.0)
    # rank by -tail (ties: index), so Kahn takes the most critical ready node first
    rank = np.empty(n, np.int64)
    rank[np.lexsort((np.arange(n), -tail))] = np.arange(n)
    orders.append(topological_order(n, pairs, tiebreak=rank))
    # depth-first: reverse postorder, successors in increasing index
    seen = np.zeros(n, bool)
    post: list[int] = []
    indeg = np.bincount(dst, minlength=n)
    for root in np.flatnonzero(indeg == 0)[::-1].tolist():
        stack = [(root, 0)]
        seen[root] = True
        while stack:
            v, k = stack.pop()
            s = succ[succ_ptr[v]: succ_ptr[v + 1]][::-1]
            while k < len(s) and seen[s[k]]:
                k += 1
            if k < len(s):
                stack.append((v, k + 1))
                seen[s[k]] = True
                stack.append((int(s[k]), 0))
            else:
                post.append(v)
    orders.append(post[::-1])
    out: list[np.ndarray] = []
    for o in orders:
        a = np.asarray(o, np.int64)
        if o is not None and not any(np.array_equal(a, b) for b in out):
            out.append(a)
    return out


def _uses(problem: Problem, pos: np.ndarray):
    """Crossing values and parameters as (producer position or -1, sorted use positions, value id)."""
    g = problem.graph
    reads = crossings(g, pos)  # positions are distinct, so every (value, reading position) pair
    vals, prod = reads.values, reads.producer_group[reads.starts]
    pv, pn = problem.cost.param_use
    ppairs = np.unique(np.stack([pv, pos[pn]], 1), axis=0) if len(pv) else np.zeros((0, 2), np.int64)
    pvals, pinv = np.unique(ppairs[:, 0], return_inverse=True)
    return (vals, prod, reads.value_index, reads.consumer_group), (pvals, pinv.ravel(), ppairs[:, 1])


def split_dp(problem: Problem, order: np.ndarray, devices: np.ndarray | None = None,
             with_cpu: bool = True) -> tuple[float, np.ndarray] | None:
    """(sum of piece durations, device of each node) of the best split of ``order`` into consecutive
    pieces on distinct accelerators taken in the order ``devices`` (default: the cluster's
    accelerators); None when no split is feasible (a node no accelerator may run, or memory)."""
    g, cost, topo = problem.graph, problem.cost, problem.topology
    n = g.num_nodes
    devices = topo.accelerators if devices is None else np.asarray(devices, np.int64)
    if n == 0 or len(devices) == 0:
        return None
    order = np.asarray(order, np.int64)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    (vals, prod, val_of_use, use_pos), (pvals, pval_of_use, puse_pos) = _uses(problem, pos)
    # last use at or before each position, per value: built incrementally over j
    uses_at: list[list[int]] = [[] for _ in range(n)]
    for j, c in zip(val_of_use.tolist(), use_pos.tolist(), strict=True):
        uses_at[c].append(j)
    puses_at: list[list[int]] = [[] for _ in range(n)]
    for j, c in zip(pval_of_use.tolist(), puse_pos.tolist(), strict=True):
        puses_at[c].append(j)
    last_use = np.full(len(vals), -1, np.int64)  # largest use position < j
    max_use = np.full(len(vals), -1, np.int64)
    np.maximum.at(max_use, val_of_use, use_pos)
    plast = np.full(len(pvals), -1, np.int64)
    cut_ok = _cuts_allowed(g.colocation[order])
    node_mem = g.state_bytes.astype(float)[order]
    if problem.mode is Mode.TRAINING:
        node_mem = node_mem + cost.stash_bytes[order]
    pbytes = g.value_bytes.astype(float)[pvals] * cost.param_factor
    ws = cost.working_set.astype(float)[order]
    mem_prefix = np.concatenate([[0.0], np.cumsum(node_mem)])
    # the fastest CPU takes CPU pieces: no memory limit, nothing to send (evaluate's CPUs pay no sends)
    cpus = topo.cpus[problem.allowed[:, topo.cpus].any(axis=0)] if len(topo.cpus) and with_cpu else topo.cpus[:0]
    cpu = int(cpus[np.argmin(np.where(problem.allowed[:, cpus], cost.device_compute[:, cpus], np.inf).sum(0))]) \
        if len(cpus) else None
    used = np.array(sorted(set(devices.tolist()) | ({cpu} if cpu is not None else set())), np.int64)

    def charges(d: int, receiving: bool) -> np.ndarray:  # per value, the worst over where the other end may be
        others = used[used != d] if len(used) > 1 else used
        if not len(vals):
            return np.zeros(0)
        here = np.full((1, len(others)), d)
        if receiving:
            return cost.recv_cost(vals[:, None], others[None, :], here).max(axis=1)
        return cost.send_cost(vals[:, None], here, others[None, :]).max(axis=1)

    def prefix(d: int):
        t = np.where(problem.allowed[order, d], cost.device_compute[order, d], 0.0)
        return np.concatenate([[0.0], np.cumsum(t)]), np.concatenate([[0], np.cumsum(~problem.allowed[order, d])])

    dev_cost: list[tuple] = []  # per accelerator: compute prefix, disallowed prefix, recv, send, memory
    group: list[int] = []  # accelerator -> first accelerator with the same costs
    first_with: dict[tuple, int] = {}  # costs (exact bytes) -> first accelerator with them: linear in K
    for d in devices.tolist():
        c = (*prefix(d), charges(d, True), charges(d, False), float(problem.capacity[d]) * (1 - MARGIN))
        group.append(first_with.setdefault((c[4], *(a.tobytes() for a in c[:4])), len(dev_cost)))
        dev_cost.append(c)
    cpu_cost = (*prefix(cpu), charges(cpu, True)) if cpu is not None else None
    K = len(devices)
    best = np.full((K + 1, n + 1), np.inf)
    best[:, 0] = 0.0
    arg = np.full((K + 1, n + 1), -1, np.int64)  # start of the last piece (-1: device k skipped)
    on = np.full((K + 1, n + 1), -1, np.int64)  # device of the last piece
    for j in range(1, n + 1):
        for v in uses_at[j - 1]:
            last_use[v] = j - 1
        for v in puses_at[j - 1]:
            plast[v] = j - 1
        if not cut_ok[j]:
            continue
        # memory of [i, j): state + parameters used in it + largest working set
        pdiff = np.zeros(n + 2)
        held = plast >= 0
        np.add.at(pdiff, plast[held] + 1, -pbytes[held])
        pdiff[0] += pbytes[held].sum()
        params = np.cumsum(pdiff)[: j]  # parameter bytes of pieces starting at i < j
        wsmax = np.maximum.accumulate(ws[:j][::-1])[::-1]
        mem = mem_prefix[j] - mem_prefix[:j] + params + wsmax
        # values received by [i, j): produced before i, used in [i, j)
        live = last_use >= 0
        lo, hi = prod[live] + 1, last_use[live]
        recv_ok = lo <= hi
        lo, hi, rv = lo[recv_ok], hi[recv_ok], np.flatnonzero(live)[recv_ok]
        # values sent by [i, j): produced in [i, j), used at j or later
        out = (max_use >= j) & (prod < j) & (prod >= 0)
        durs: dict[int, np.ndarray] = {}
        for k in range(1, K + 1):
            gk = group[k - 1]
            if gk not in durs:
                pre_t, bad, r, s, cap = dev_cost[gk]
                sdiff = np.zeros(n + 1)
                np.add.at(sdiff, prod[out], s[out])
                send = np.cumsum(sdiff[:j][::-1])[::-1]
                dur = pre_t[j] - pre_t[:j] + _received(r[rv], lo, hi, n)[:j] + send
                ok = (mem <= cap) & (bad[j] - bad[:j] == 0) & cut_ok[:j]
                durs[gk] = np.where(ok, dur, np.inf)
            cand = best[k - 1, :j] + durs[gk]
            i = int(np.argmin(cand))
            if cand[i] < best[k - 1, j]:
                best[k, j], arg[k, j], on[k, j] = cand[i], i, devices[k - 1]
            else:
                best[k, j], arg[k, j] = best[k - 1, j], -1
        if cpu is not None and cpu_cost is not None:  # a CPU piece: no memory limit, any number of them, k unchanged
            pre_t, bad, r = cpu_cost
            recv = _received(r[rv], lo, hi, n)[:j]
            dur = np.where((bad[j] - bad[:j] == 0) & cut_ok[:j], pre_t[j] - pre_t[:j] + recv, np.inf)
            cand = best[:, :j] + dur[None, :]
            i = np.argmin(cand, axis=1)
            c = cand[np.arange(K + 1), i]
            better = c < best[:, j]
            best[better, j], arg[better, j], on[better, j] = c[better], i[better], cpu
    if not np.isfinite(best[K, n]):
        return None
    return float(best[K, n]), _trace_back(order, arg, on, K, cpu)


def _cuts_allowed(colocation: np.ndarray) -> np.ndarray:
    """Per cut position 0..n of an order (``colocation`` of its nodes, -1 for none): False where the
    cut would split a colocation class."""
    cut_ok = np.ones(len(colocation) + 1, bool)
    for c in np.unique(colocation[colocation >= 0]).tolist():
        p = np.flatnonzero(colocation == c)
        cut_ok[p[0] + 1: p[-1] + 1] = False
    return cut_ok


def _received(charge: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    """Per piece start ``i``, the receive charges of a piece starting there: value ``v`` (charge
    ``charge[v]``) is received by pieces starting in ``[lo[v], hi[v]]`` (made before, used inside)."""
    diff = np.zeros(n + 2)
    np.add.at(diff, lo, charge)
    np.add.at(diff, hi + 1, -charge)
    return np.cumsum(diff)


def _trace_back(order: np.ndarray, arg: np.ndarray, on: np.ndarray, K: int, cpu: int | None) -> np.ndarray:
    """Device of each node from the DP's tables: ``arg[k, j]`` the start of the last piece of the best
    split of ``order[:j]`` over the first ``k`` accelerators (-1: accelerator ``k`` skipped), ``on[k, j]``
    its device."""
    n = len(order)
    dev = np.full(n, -1, np.int64)
    j, k = n, K
    while j > 0:
        i = arg[k, j]
        if i >= 0:
            d = int(on[k, j])
            dev[order[i:j]] = d
            if d != cpu:  # an accelerator piece used the k-th accelerator; a CPU piece none
                k -= 1
            j = i
        else:
            k -= 1
    return dev


def best_splits(problem: Problem) -> list[Solution]:
    """The DP's best split of each of :func:`split_orders` (feasible ones; evaluate decides which is
    fastest)."""
    if problem.objective is not ObjectiveKind.LATENCY or len(problem.topology.accelerators) == 0:
        return []
    out = []
    for order in split_orders(problem):
        r = split_dp(problem, order)
        if r is not None:
            out.append(Solution.from_devices(problem, r[1], Certificate(Status.HEURISTIC, "contiguous split DP")))
    return out

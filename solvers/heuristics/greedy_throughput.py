"""Greedy's throughput plan: fill devices in topological order up to a bottleneck found by bisection.

A greedy max-load balancing: for a bottleneck ``B``, walk the (forward) operators in topological
order and fill one device after another until its load — compute on that device plus the transfers
at its two cuts — would exceed ``B`` or its memory would overflow; the smallest ``B`` for which
every operator finds a device is found by bisection. Colocation classes (forward + backward of a
layer in training) move as one unit, at the position of their first forward operator. Stages are
topological intervals, so they are contiguous. The fill's transfer estimate is approximate, so a
few bottlenecks and device orders are tried and :func:`planmap.evaluate.evaluate` picks among them.
"""

from __future__ import annotations

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, Status

from ..node_memory import add_param_bytes
from ..repair import repair, supported

__all__ = ["greedy_throughput"]


def _unit_positions(problem: Problem) -> np.ndarray:
    """Each node's position in the fill order.

    Forward nodes keep their topological rank; a colocation class sits at its first forward member;
    other nodes (backward without a class) at their latest positioned predecessor."""
    g = problem.graph
    n = g.num_nodes
    fwd = ~g.backward if (problem.mode == "training" and g.backward.any()) else np.ones(n, bool)
    seq = np.flatnonzero(fwd)
    pos = np.full(n, -1, np.int64)
    pos[seq] = np.arange(len(seq))
    cls = g.colocation
    has = (cls >= 0) & fwd
    if has.any():
        first = {}
        for i in np.flatnonzero(has).tolist():
            first.setdefault(int(cls[i]), pos[i])
        for i in np.flatnonzero(cls >= 0).tolist():
            if int(cls[i]) in first:
                pos[i] = first[int(cls[i])]
    indptr, ids = g.pred
    for i in np.flatnonzero(pos < 0).tolist():
        p = ids[indptr[i]: indptr[i + 1]]
        pos[i] = pos[p].max() if len(p) else 0
    return np.maximum(pos, 0)


def _fill_tables(problem: Problem, pos: np.ndarray, m: int, devs: list[int]):
    """Prefix sums per device over the m fill positions: compute, bytes, unsupported count; and the
    transfer charges paid at the cut left of each position by the stage on either side."""
    g, cost = problem.graph, problem.cost
    n = g.num_nodes
    dc = np.where(problem.allowed, cost.device_compute, 0.0)
    comp = {}
    bad = {}
    for d in devs:
        c = np.zeros(m)
        np.add.at(c, pos, dc[:, d])
        comp[d] = np.concatenate([[0.0], np.cumsum(c)])
        b = np.zeros(m)
        np.add.at(b, pos, ~problem.allowed[:, d])
        bad[d] = np.concatenate([[0.0], np.cumsum(b)])
    mem = add_param_bytes(problem, g.state_bytes.astype(float).copy())
    fixed = np.zeros(m)
    np.add.at(fixed, pos, mem)
    stash = np.zeros(m)
    if problem.mode == "training":
        np.add.at(stash, pos, cost.stash_bytes.astype(float))
    tables = {"pos": pos, "comp": comp, "bad": bad, "mem": np.concatenate([[0.0], np.cumsum(fixed)]),
              "stash": np.concatenate([[0.0], np.cumsum(stash)]),
              "ws": float(cost.working_set.max()) if n else 0.0}
    # values crossing cuts: span of positions of producer and consumers
    src = g.edge_src
    keep = src >= 0
    val, dst = g.edge_value[keep], g.edge_dst[keep]
    pp, cp = pos[g.value_node[val]], pos[dst]
    lo = np.full(g.num_values, np.iinfo(np.int64).max)
    hi = np.full(g.num_values, -1)
    np.minimum.at(lo, val, np.minimum(pp, cp))
    np.maximum.at(hi, val, np.maximum(pp, cp))
    prodpos = np.full(g.num_values, -1)
    prodpos[val] = pp
    vals = np.flatnonzero(hi > lo)
    forward = prodpos[vals] == lo[vals]  # data flows towards later positions
    tables["cross"] = (vals, lo[vals], hi[vals], forward)
    return tables


def _cut_charges(problem: Problem, tables, m: int, a_dev: int, b_dev: int):
    """Charges at each cut i (between positions i-1 and i) for devices a (left) and b (right):
    (paid by the stage starting at i, paid by the stage ending at i)."""
    vals, lo, hi, forward = tables["cross"]
    cost = problem.cost
    right = np.zeros(m + 2)
    left = np.zeros(m + 2)
    if len(vals):
        recv_f, send_f = cost.recv_cost(vals, a_dev, b_dev), cost.send_cost(vals, a_dev, b_dev)
        recv_b, send_b = cost.recv_cost(vals, b_dev, a_dev), cost.send_cost(vals, b_dev, a_dev)
        r_pay = np.where(forward, recv_f, send_b)  # the right-hand stage receives (forward) or sends
        l_pay = np.where(forward, send_f, recv_b)
        np.add.at(right, lo + 1, r_pay)
        np.add.at(right, hi + 1, -r_pay)
        np.add.at(left, lo + 1, l_pay)
        np.add.at(left, hi + 1, -l_pay)
    return np.cumsum(right)[: m + 1], np.cumsum(left)[: m + 1]


def _fill(problem: Problem, tables, cuts, devs: list[int], m: int, bound: float, use_memory: bool,
          support: bool = True):
    """Cut points and devices of a fill with bottleneck ``bound``; None when it does not fit. With
    ``support``, a stage ends before an operator its device cannot run."""
    cap = problem.capacity
    k = len(devs)
    a = 0
    out = []
    for j, d in enumerate(devs):
        if a >= m:
            break
        comp, bad = tables["comp"][d], tables["bad"][d]
        r_in = cuts[j][0][a] if (j > 0 and a > 0) else 0.0  # charges at the left cut
        right = cuts[j + 1][1] if j + 1 < len(cuts) else np.zeros(m + 1)
        b = np.arange(a + 1, m + 1)
        base = comp[b] - comp[a] + r_in
        ok = base <= bound
        if support:
            ok &= bad[b] - bad[a] == 0
        if use_memory:
            infl = problem.in_flight(j, k) if problem.objective == "throughput" else 1
            mem = tables["mem"][b] - tables["mem"][a] + (tables["stash"][b] - tables["stash"][a]) * infl + tables["ws"]
            ok &= mem <= cap[d] * (1 + 1e-12)
        stop = np.flatnonzero(~ok)
        limit = stop[0] if len(stop) else len(b)  # monotone conditions hold for b[:limit]
        if limit == 0:
            return None
        cand = b[:limit]
        load = base[:limit] + np.where(cand < m, right[cand], 0.0)
        fits = np.flatnonzero(load <= bound)
        if len(fits) == 0:
            return None
        e = int(cand[fits[-1]])
        out.append((a, e, d))
        a = e
    return out if a >= m else None


def _bisect(problem: Problem, tables, cuts, devs, m: int, use_memory: bool, support: bool):
    """Device per fill position for the smallest bottleneck that fits, and a few slightly larger ones
    (the fill's transfer estimate is approximate; the evaluator picks among them)."""
    pos = tables["pos"]
    hi = max(float(tables["comp"][d][-1]) for d in devs) + sum(float(c[0].max() + c[1].max()) for c in cuts)
    hi = hi * 2 + 1e-9
    if _fill(problem, tables, cuts, devs, m, hi, use_memory, support) is None:
        return []
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _fill(problem, tables, cuts, devs, m, mid, use_memory, support) is None:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-6 * hi:
            break
    out = []
    for slack in (1.0, 1.01, 1.03, 1.1):
        fill = _fill(problem, tables, cuts, devs, m, hi * slack, use_memory, support)
        if fill is not None:
            dev_pos = np.empty(m, np.int32)
            for a, e, d in fill:
                dev_pos[a:e] = d
            out.append(dev_pos[pos])
    return out


def _device_orders(problem: Problem) -> list[list[int]]:
    """Device orders to try: as listed; fastest type first; slowest type first."""
    topo = problem.topology
    devs = [int(d) for d in topo.accelerators]
    if not devs or not problem.allowed[:, devs].any(axis=1).all():
        devs = devs + [int(d) for d in topo.cpus]
    speed = {int(d): float(np.nansum(np.where(problem.allowed[:, d], problem.cost.device_compute[:, d], np.nan)))
             for d in devs}
    orders = [devs]
    fast = sorted(devs, key=lambda d: (speed[d], d))
    if fast != devs:
        orders.append(fast)
        orders.append(sorted(devs, key=lambda d: (-speed[d], d)))
    return orders


def greedy_throughput(problem: Problem) -> np.ndarray:
    """Device per node from the bottleneck fill (best of a few device orders and bottlenecks)."""
    g = problem.graph
    n = g.num_nodes
    if n == 0:
        return np.zeros(0, np.int32)
    pos = _unit_positions(problem)
    m = int(pos.max()) + 1
    best = None
    for devs_all in _device_orders(problem):
        k = len(devs_all) if problem.max_stages is None else min(len(devs_all), problem.max_stages)
        devs = devs_all[:k]
        tables = _fill_tables(problem, pos, m, devs)
        cuts = [(np.zeros(m + 1), np.zeros(m + 1))]  # cuts[j]: between devs[j-1] and devs[j]
        cuts += [_cut_charges(problem, tables, m, devs[j - 1], devs[j]) for j in range(1, k)]
        for use_memory, support in ((True, True), (True, False), (False, False)):
            fill = _bisect(problem, tables, cuts, devs, m, use_memory, support)
            for device_of in fill:
                if not support:
                    device_of = supported(problem, device_of)
                device_of = repair(problem, device_of)
                sol = Solution.from_devices(problem, device_of, Certificate(Status.HEURISTIC, "greedy"),
                                            schedule=problem.schedule, microbatches=max(problem.microbatches, 1))
                ev = evaluate(problem, sol)
                key = (not ev.feasible, ev.objective)
                if best is None or key < best[0]:
                    best = (key, device_of)
            if best is not None and not best[0][0]:
                break
    if best is None:
        return np.full(n, int(_device_orders(problem)[0][0]), np.int32)
    return best[1]

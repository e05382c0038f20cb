"""A segment of the articulation chain between an accelerator call and a CPU end: where its towers can be.

:mod:`.towers` links consecutive articulation nodes ``a -> b``. When one end runs on the CPU and the other
in an accelerator call ``C``, the segment's towers (the components ``T`` of ``desc(a) ∩ anc(b)``) were
charged per path only: a tower could sit in ``C`` without its memory or compute, or anywhere else for free.
This module charges them. Let ``F`` be the time ``C`` is left (``b`` on the CPU: ``C`` holds ``a`` and
finishes at ``F``, ``b`` starts after it) or entered (``a`` on the CPU, ``b`` opens ``C``: ``a``'s
finish). By convexity ``C ∩ T`` is closed towards ``C``'s end of the segment (every node between two
nodes of ``C`` is in ``C``): a prefix of a chain tower when ``C`` holds ``a``, a suffix when it holds
``b``; the rest of ``T`` (the *side* part) runs on the CPU or in other units.

* What ``C`` holds of ``T`` is in ``C``'s duration: its compute at the least accelerator time, and its
  memory counts against ``C``'s device (a sum of floors of coarse units, as in :mod:`.towers`).
* Every value crossing ``C``'s boundary is sent (``C`` holds ``a``) or received (``C`` holds ``b``) in
  ``C``'s duration, each distinct value once: the value where a chain tower is cut, each value of a
  tower held whole that ``b`` reads (``b`` on the CPU is another unit), ``a``'s value once per segment
  when some tower needs it, otherwise one value of ``T`` per tower not held whole.
* The side part of ``T`` runs after ``F`` and before ``b`` starts (``C`` holds ``a``: it descends from
  ``C``'s part or from ``a``, and ``b`` reads it), or after ``a`` finishes and before ``C`` starts (``C``
  holds ``b``: ``C`` receives a value of it). For a chain tower the side part is a run of it whose first node
  reads one known value (``a``'s, or the one where ``C`` cuts the tower) and whose last node's value leaves
  for the other end. Every unit starts after the units it reads from finish, and a unit's duration holds its
  receives, compute and sends, so along the run each node runs on the CPU (its CPU time; a CPU receive is a
  delay, at least 0) or in an accelerator unit (its least accelerator time), and each switch from the CPU
  (or the known value) into an accelerator unit pays the receive of the value crossing, each switch out of
  one (to the CPU, to another unit, or at the run's end) the send of the value crossing (least charges over
  devices): a shortest path over the run with two states, exact for a run alone on idle devices.
  A non-chain tower's side part holds at least one node that reads ``a`` (``C`` holds ``b``) or that
  ``b`` reads (``C`` holds ``a``), so it costs at least the cheapest of those.

The towers' side parts run in parallel, so the link costs ``max_T side(T) + sum_T held(T)``: for each
threshold on the side times (the distinct side times of all options), a 1-D knapsack over ``C``'s share
of memory takes the options under it, and the threshold plus the least sum is a lower bound.
tests/solvers/latency/test_towers.py checks it against every feasible placement of small tower graphs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["chain_order", "end_links", "end_options", "end_table", "side_time"]


def chain_order(comp: list[int], a: int, b: int, preds: list[list[int]], succs: list[list[int]]) -> list[int] | None:
    """The nodes of ``comp`` in order when they form a chain from ``a`` to ``b`` (each reads only the one
    before, ``a`` for the first; each is read only by the next, ``b`` for the last), else ``None``."""
    order = sorted(comp)
    inside = set(order) | {a, b}
    ok = all([p for p in preds[v] if p in inside] == [order[i - 1] if i else a]
             and [w for w in succs[v] if w in inside] == [order[i + 1] if i + 1 < len(order) else b]
             for i, v in enumerate(order))
    return order if ok else None


def side_time(nodes: list[int], enter: int, tcpu: np.ndarray, tacc: np.ndarray, r1: np.ndarray,
              s1: np.ndarray) -> float:
    """Least time of a chain's side part ``nodes`` (in order, the first reading ``enter``'s value, which is
    ready when the part may start): a shortest path over where each node runs, the CPU (its CPU time, a
    free receive) or an accelerator unit (its least accelerator time; the unit receives the value that
    enters it from the CPU or ``enter`` and sends the value that leaves it for the CPU or the part's end)."""
    if not nodes:
        return 0.0
    on_cpu, on_acc, prev = 0.0, float("inf"), enter
    for v in nodes:
        on_cpu, on_acc = (min(on_cpu, on_acc + float(s1[prev])) + float(tcpu[v]),
                          min(on_acc, on_cpu + float(r1[prev])) + float(tacc[v]))
        prev = v
    return min(on_cpu, on_acc + float(s1[prev]))


Option = tuple[int, float, float, str]


def end_options(comp: list[int], a: int, b: int, preds, succs, holds_a: bool, tacc: np.ndarray, tcpu: np.ndarray,
                tmin: np.ndarray, s1: np.ndarray, r1: np.ndarray, mem: np.ndarray) -> list[Option]:
    """How one tower ``T`` can lie with respect to the call ``C`` (module docstring), as (``C``'s share of
    memory in coarse units, cost in ``C``, side time, kind) options; kind ``"a"`` needs ``a``'s value to
    cross, ``"mixed"`` crosses with ``a``'s value or a value of ``T`` (the caller charges the cheaper)."""
    xfer = s1 if holds_a else r1
    order = chain_order(comp, a, b, preds, succs)
    if order is None:
        T = sorted(comp)
        ends = [v for v in T if (b in succs[v] if holds_a else a in preds[v])] or T
        enter = T + [a]
        one = [min(float(tcpu[v]), float(tmin[v] + r1[enter].min() + s1[T].min())) for v in ends]
        held = float(tacc[T].sum()) + (float(s1[[v for v in T if b in succs[v]]].sum()) if holds_a else 0.0)
        return [(int(np.floor(mem[T].sum())), held, 0.0, "in" if holds_a else "a"),
                (0, float(xfer[T].min()), min(one), "mixed")]
    k = len(order)
    cum_m = np.concatenate([[0.0], np.cumsum(mem[order])])
    opts = []
    for j in range(k + 1):  # holds_a: C holds order[:j]; else C holds order[j:]
        inner = order[:j] if holds_a else order[j:]
        side = order[j:] if holds_a else order[:j]
        share = int(np.floor(cum_m[j] if holds_a else cum_m[k] - cum_m[j]))
        work = float(tacc[inner].sum())
        if holds_a:  # C sends the value where the tower leaves it (a's own when j = 0)
            t_side = side_time(side, order[j - 1] if j else a, tcpu, tacc, r1, s1)
            sent = float(s1[order[j - 1]]) if j else 0.0
            opts.append((share, work + sent, t_side, "cut" if j else "a"))
        else:  # C receives the value where the tower enters it (a's own when j = 0)
            t_side = side_time(side, a, tcpu, tacc, r1, s1)
            got = float(r1[order[j - 1]]) if j else 0.0
            opts.append((share, work + got, t_side, "cut" if j else "a"))
    return opts


def end_table(options: list[list[Option]], size: int, a_xfer: float, direct: bool,
              holds_a: bool) -> np.ndarray:
    """(size,) the least ``max side + sum cost`` over the towers' options by ``C``'s share (coarse units), over
    both cases of ``a``'s value (crossing at ``a_xfer``, or not: then no ``"a"`` option, and a mixed tower
    crosses with one of its own values at the option's cost); ``direct``: ``b`` reads ``a``, so it crosses.
    When ``C`` holds ``a`` a mixed tower may leave ``C`` through ``a``'s value (no cost of its own then); when
    ``C`` holds ``b`` it still enters ``C`` through a value of its own."""
    out = np.full(size, np.inf)
    taus = sorted({0.0} | {o[2] for opts in options for o in opts})
    for crossed in ((True,) if direct else (False, True)):
        for tau in taus:
            G = np.full(size, np.inf)
            G[0] = a_xfer if crossed else 0.0
            for opts in options:
                H = np.full(size, np.inf)
                for x, cost, side, kind in opts:
                    if side > tau or x >= size or (kind == "a" and not crossed):
                        continue
                    if kind == "mixed" and crossed and holds_a:
                        cost = 0.0
                    H[x:] = np.minimum(H[x:], G[: size - x] + cost)
                G = H
            out = np.minimum(out, G + tau)
    return out


def end_links(split, tcpu: np.ndarray, A: np.ndarray, P: np.ndarray, a: int, b: int, comps: list[list[int]], preds,
              succs, direct: bool, buckets: int, coarse: int) -> tuple[float, np.ndarray]:
    """The two links of :mod:`.towers` with a CPU end, less ``b``'s compute: (the least time ``b`` on the CPU
    can start after ``a``'s accelerator call, given the call's states ``A`` (device, memory held) and room
    for its share of the towers; (buckets + 1,) the least ``pi(b)`` when ``b`` opens a call after ``a`` on
    the CPU (finish ``P``), by the memory that call holds of the segment). ``split`` = (least accelerator
    compute, least send, least receive, memory in coarse units) per node, as in :mod:`.towers`."""
    tacc, s1, r1, mem = split
    tmin = np.minimum(tacc, tcpu)
    size = coarse + 1
    f = buckets // coarse
    out_opts = [end_options(c, a, b, preds, succs, True, tacc, tcpu, tmin, s1, r1, mem) for c in comps]
    G = end_table(out_opts, size, float(s1[a]), direct, True)
    pre = np.minimum.accumulate(A.min(axis=0))  # least pi(a) of a state holding at most mu
    room = np.array([pre[buckets - f * x] if buckets - f * x >= 0 else np.inf for x in range(size)])
    leave = float((room + G).min())
    in_opts = [end_options(c, a, b, preds, succs, False, tacc, tcpu, tmin, s1, r1, mem) for c in comps]
    G = end_table(in_opts, size, float(r1[a]), direct, False)
    enter = np.full(buckets + 1, np.inf)
    enter[f * np.arange(size)] = float(P.min()) + G
    return leave, enter

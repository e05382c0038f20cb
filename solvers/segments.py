"""From "which device runs each node" to stages that :func:`planmap.evaluate.evaluate` accepts.

Every placement solver decides a device per node; the plan needs more: on an accelerator, a latency
plan runs *calls* — contiguous (convex) subgraphs, at most ``q`` per device, executed one after
another — and a pipeline needs each stage convex with an acyclic stage graph. This module is the one
place that turns a device assignment into such stages (:mod:`.repair` makes an assignment that has
too many of them valid).

The tool is a *position* per node, non-decreasing along every edge: accelerator piece ``k`` sits at
position ``2k``; a parallel-CPU node (latency plans: every CPU node is its own unit) at the odd
position just after its latest producer. Pieces with non-decreasing positions along all edges are
convex and their quotient graph is acyclic, whatever the device chains, so both properties hold by
construction rather than by check.

Fewest pieces: per device, the dynamic program of the paper's greedy baseline
(msr-fiddle/dnn-partitioning, ``reworkSplitIntoContiguous``) gives the minimum — piece(v) = 1 + the
most times a path into v has left the device's set. Those per-device minima can still form a cycle
*between* devices; then a sweep builds the pieces instead, always extending the device whose ready
nodes have the lowest level.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from planmap.evaluate import quotient_order
from planmap.problem import Certificate, Problem, Solution, Stage, Status

__all__ = [
    "Pieces",
    "split_pieces",
    "segments_from_devices",
    "solution_from_devices",
    "forward_mask",
    "adjacency",
]


@dataclass(frozen=True, eq=False)
class Pieces:
    """Pieces of a device assignment in execution order.

    ``piece_of`` (n,): piece id of each node, -1 for parallel-CPU nodes and nodes outside the mask;
    ``piece_device`` (P,): the device of each piece, pieces numbered in a valid execution order;
    ``position`` (n,): 2 x piece for piece nodes, odd for parallel-CPU nodes, non-decreasing along edges.
    """

    piece_of: np.ndarray
    piece_device: np.ndarray
    position: np.ndarray

    def counts(self, num_devices: int) -> np.ndarray:
        """(D,) pieces per device."""
        return np.bincount(self.piece_device, minlength=num_devices) if len(self.piece_device) else \
            np.zeros(num_devices, np.int64)


def forward_mask(problem: Problem) -> np.ndarray | None:
    """The nodes whose edges define contiguity: the forward graph in training, else all (None)."""
    g = problem.graph
    if problem.mode == "training" and g.backward.any():
        return ~g.backward
    return None


def adjacency(problem: Problem, mask: np.ndarray | None = None):
    """Predecessor and successor lists (Python lists for the sweeps), restricted to ``mask``.

    Callers that split many assignments of one problem (local search) compute it once and pass it."""
    g = problem.graph
    s, d = g.node_edges
    if mask is not None:
        keep = mask[s] & mask[d]
        s, d = s[keep], d[keep]
    n = g.num_nodes
    order = np.argsort(d, kind="stable")
    pind = np.zeros(n + 1, np.int64)
    np.add.at(pind, d + 1, 1)
    pind = np.cumsum(pind)
    pids = s[order]
    order = np.argsort(s, kind="stable")
    sind = np.zeros(n + 1, np.int64)
    np.add.at(sind, s + 1, 1)
    sind = np.cumsum(sind)
    sids = d[order]
    pl, pi = pids.tolist(), pind.tolist()
    sl, si = sids.tolist(), sind.tolist()
    preds = [pl[pi[v]: pi[v + 1]] for v in range(n)]
    succs = [sl[si[v]: si[v + 1]] for v in range(n)]
    return preds, succs


def _levels(device_of: np.ndarray, parallel: np.ndarray, active: np.ndarray, preds) -> np.ndarray:
    """Per node, the dynamic-program piece index (1-based) of its own device's set.

    Row v holds, for every device d, the most times a path into v has left d's set (counting the
    piece v would be in); a sweep in topological order, O(edges x devices)."""
    devs = np.unique(device_of[active & ~parallel])
    col = np.full(int(device_of.max()) + 1 if len(device_of) else 1, -1, np.int64)
    col[devs] = np.arange(len(devs))
    A = max(len(devs), 1)
    n = len(device_of)
    own = np.where(active & ~parallel, col[device_of], -1).tolist()
    act = active.tolist()
    zero = [0] * A
    rows: list[list[int]] = [zero] * n
    out = [0] * n
    for v in range(n):
        if not act[v]:
            continue
        ps = preds[v]
        c = own[v]
        if ps:
            row = rows[ps[0]]
            for u in ps[1:]:
                row = list(map(max, row, rows[u]))
            if c >= 0:
                row = list(row)
                best = 1
                for u in ps:
                    x = rows[u][c] + (own[u] != c)
                    if x > best:
                        best = x
                row[c] = best
        elif c >= 0:
            row = list(zero)
            row[c] = 1
        else:
            row = zero
        rows[v] = row
        if c >= 0:
            out[v] = row[c]
    return np.asarray(out, np.int32)


def _positions(piece_of: np.ndarray, piece_rank: np.ndarray, parallel: np.ndarray, active: np.ndarray,
               preds) -> np.ndarray:
    """Positions from pieces in rank order: 2 x rank for pieces, odd after the latest producer for
    parallel nodes."""
    n = len(piece_of)
    pos = np.full(n, -1, np.int64)
    on = active & ~parallel
    pos[on] = 2 * piece_rank[piece_of[on]]
    pos_l = pos.tolist()
    for v in np.flatnonzero(active & parallel).tolist():
        m = -1
        for u in preds[v]:
            if pos_l[u] > m:
                m = pos_l[u]
        pos_l[v] = m | 1
    return np.asarray(pos_l, np.int64)


def split_pieces(problem: Problem, device_of: np.ndarray, order=None, *, mask: np.ndarray | None = None,
                 cpu_parallel: bool | None = None, adjacency_lists=None) -> Pieces:
    """Split each device's nodes into the fewest convex pieces with an acyclic quotient.

    ``order``: node ids in a preferred execution order (e.g. a list schedule); it breaks ties.
    ``cpu_parallel`` (default: latency objective): CPU nodes are individual units, not pieces.
    ``mask``: only these nodes and the edges among them count (training: the forward graph).
    ``adjacency_lists``: :func:`adjacency` of the problem for ``mask``, when the caller has it.
    """
    g = problem.graph
    n = g.num_nodes
    device_of = np.asarray(device_of, np.int64)
    if cpu_parallel is None:
        cpu_parallel = problem.objective == "latency"
    active = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
    parallel = problem.topology.is_cpu[device_of] if cpu_parallel else np.zeros(n, bool)
    rank = np.arange(n, dtype=np.int64)
    if order is not None:
        rank = np.empty(n, np.int64)
        rank[np.asarray(order, np.int64)] = np.arange(n)
    preds, succs = adjacency_lists if adjacency_lists is not None else adjacency(problem, mask)
    if n == 0:
        e = np.zeros(0, np.int64)
        return Pieces(e, e, e)
    level = _levels(device_of, parallel, active, preds)
    piece = _level_pieces(device_of, level, parallel, active, rank, g, mask)
    if piece is None:
        piece = _sweep(device_of, level, parallel, active, rank, preds, succs)
    piece_of, piece_device = piece
    P = len(piece_device)
    pos = _positions(piece_of, np.arange(P), parallel, active, preds)
    return Pieces(piece_of, piece_device, pos)


def _level_pieces(device_of, level, parallel, active, rank, g, mask):
    """Pieces = (device, level) when their quotient (with per-device chains) is acyclic, renumbered in
    a topological order (ties: earliest node first); else None."""
    n = len(device_of)
    on = active & ~parallel
    idx = np.flatnonzero(on)
    if len(idx) == 0:
        return np.full(n, -1, np.int64), np.zeros(0, np.int64)
    key = np.stack([device_of[idx], level[idx]], 1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.ravel()
    P = len(uniq)
    # number pieces by the earliest-ranked node so the order's tie-break follows ``rank``
    first = np.full(P, np.iinfo(np.int64).max)
    np.minimum.at(first, inv, rank[idx])
    renum = np.empty(P, np.int64)
    renum[np.argsort(first, kind="stable")] = np.arange(P)
    piece_id = renum[inv]
    pdev = np.empty(P, np.int64)
    pdev[renum] = uniq[:, 0]
    plev = np.empty(P, np.int64)
    plev[renum] = uniq[:, 1]
    unit = np.empty(n, np.int64)
    unit[idx] = piece_id
    others = np.flatnonzero(~on)
    unit[others] = P + np.arange(len(others))
    chains = []
    for d in np.unique(pdev).tolist():
        ps = np.flatnonzero(pdev == d)
        ps = ps[np.argsort(plev[ps])]
        chains += list(zip(ps[:-1].tolist(), ps[1:].tolist(), strict=True))
    units = P + len(others)  # other nodes are units of their own (outside the mask: edges ignored)
    order = quotient_order(g, unit, units, chains, mask=mask)
    if order is None:
        return None
    rank_of = np.empty(units, np.int64)
    rank_of[np.asarray(order, np.int64)] = np.arange(units)
    pr = rank_of[:P]
    final = np.empty(P, np.int64)
    final[np.argsort(pr, kind="stable")] = np.arange(P)
    piece_of = np.full(n, -1, np.int64)
    piece_of[idx] = final[piece_id]
    out_dev = np.empty(P, np.int64)
    out_dev[final] = pdev
    return piece_of, out_dev


def _sweep(device_of, level, parallel, active, rank, preds, succs):
    """Build pieces one at a time: open a piece on the device of the ready node with the lowest
    (level, rank), absorb every node of that device that becomes ready with all producers at or
    before the piece, place parallel nodes as soon as they are ready."""
    n = len(device_of)
    dev_l = device_of.tolist()
    par_l = parallel.tolist()
    lev_l = level.tolist()
    rank_l = rank.tolist()
    indeg = [0] * n
    act = active.tolist()
    for v in range(n):
        if act[v]:
            indeg[v] = len(preds[v])
    maxpos = [-1] * n
    piece_of = [-1] * n
    heaps: dict[int, list] = {}
    cpu_queue: list[int] = []
    pieces: list[int] = []

    def push(w):
        if par_l[w]:
            cpu_queue.append(w)
        else:
            heapq.heappush(heaps.setdefault(dev_l[w], []), (lev_l[w], rank_l[w], w))

    for v in range(n):
        if act[v] and indeg[v] == 0:
            push(v)

    def done(v, p):
        for w in succs[v]:
            if p > maxpos[w]:
                maxpos[w] = p
            indeg[w] -= 1
            if indeg[w] == 0:
                push(w)

    def drain():
        while cpu_queue:
            c = cpu_queue.pop()
            done(c, maxpos[c] | 1)

    drain()
    while True:
        best = None
        for d, h in heaps.items():
            if h and (best is None or h[0] < heaps[best][0]):
                best = d
        if best is None:
            break
        s = len(pieces)
        pieces.append(best)
        cur = 2 * s
        h = heaps[best]
        deferred = []
        while h:
            _, _, v = heapq.heappop(h)
            if maxpos[v] > cur:
                deferred.append((lev_l[v], rank_l[v], v))
                continue
            piece_of[v] = s
            done(v, cur)
            drain()
        for item in deferred:
            heapq.heappush(h, item)
    return np.asarray(piece_of, np.int64), np.asarray(pieces, np.int64)


# --------------------------------------------------------------------------------- solutions
def segments_from_devices(problem: Problem, device_of: np.ndarray, order=None, *,
                          certificate: Certificate | None = None, adjacency_lists=None) -> Solution:
    """A latency-placement Solution: per accelerator the fewest convex subgraphs (stages) whose quotient
    graph, with each device's stages in list order, is acyclic; per CPU device one stage (its nodes
    run in parallel). Stages are listed in execution order. More than ``problem.max_subgraphs``
    pieces on a device are returned as they are (evaluate flags them; :func:`.repair.repair` avoids them)."""
    device_of = np.asarray(device_of, np.int32)
    cert = certificate or Certificate(Status.HEURISTIC, "segments")
    pieces = split_pieces(problem, device_of, order, cpu_parallel=True, adjacency_lists=adjacency_lists)
    n = problem.graph.num_nodes
    P = len(pieces.piece_device)
    stage_of = pieces.piece_of.copy()
    stages = [Stage((int(d),)) for d in pieces.piece_device.tolist()]
    # CPU stages: one per CPU device used, listed where its first node runs
    cpu_nodes = np.flatnonzero(pieces.piece_of < 0)
    first_pos = [2 * k for k in range(P)]
    for d in np.unique(device_of[cpu_nodes]).tolist():
        members = cpu_nodes[device_of[cpu_nodes] == d]
        stage_of[members] = len(stages)
        stages.append(Stage((int(d),)))
        first_pos.append(int(pieces.position[members].min()))
    order_st = sorted(range(len(stages)), key=lambda k: (first_pos[k], k))
    remap = np.empty(len(stages), np.int64)
    remap[np.asarray(order_st, np.int64)] = np.arange(len(stages))
    return Solution(remap[stage_of] if n else stage_of, tuple(stages[k] for k in order_st), cert)


def solution_from_devices(problem: Problem, device_of: np.ndarray, certificate: Certificate, order=None, *,
                          adjacency_lists=None) -> Solution:
    """The Solution of a device assignment for the problem's objective: latency -> convex subgraph
    stages (:func:`segments_from_devices`); throughput -> one pipeline stage per device."""
    if problem.objective == "latency":
        return segments_from_devices(problem, device_of, order, certificate=certificate,
                                     adjacency_lists=adjacency_lists)
    return Solution.from_devices(problem, np.asarray(device_of, np.int32), certificate,
                                 schedule=problem.schedule, microbatches=max(problem.microbatches, 1))

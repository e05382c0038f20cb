"""From "which device runs each node" to stages that :func:`planmap.evaluate.evaluate` accepts.

Every placement solver decides a device per node; the plan needs more: on an accelerator, a latency
plan runs *calls* — contiguous (convex) subgraphs, at most ``q`` per device, executed one after
another — and a pipeline needs each stage convex with an acyclic stage graph. This module is the one
place that turns a device assignment into such stages, and that repairs an assignment that cannot
be turned into them.

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
from collections import deque
from dataclasses import dataclass

import numpy as np

from planmap.errors import PlanmapError
from planmap.evaluate import evaluate, nonconvex_units, quotient_order
from planmap.problem import Certificate, Problem, Solution, Stage, Status

from .even import SingleDevice, follow_colocation

_MAX_ELEMENTS = 2048  # contiguous_repair cuts pieces into at most about this many runs of nodes
_MOVED_SHARE = 0.5  # contiguous_repair: value of work moved to another device, relative to work kept

__all__ = [
    "Pieces",
    "split_pieces",
    "segments_from_devices",
    "solution_from_devices",
    "contiguous_repair",
    "repair",
    "forward_mask",
    "adjacency",
    "node_memory",
    "supported",
    "fallback",
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
    pieces on a device are returned as they are (evaluate flags them; :func:`repair` avoids them)."""
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


# ------------------------------------------------------------------------------------ repair
def node_memory(problem: Problem) -> tuple[np.ndarray, float]:
    """Conservative per-node bytes (parameters counted at every use) and the largest working set."""
    g, cost = problem.graph, problem.cost
    mem = g.state_bytes.astype(float).copy()
    pv, pn = cost.param_use
    if len(pv):
        pairs = np.unique(np.stack([pv, pn], 1), axis=0)
        np.add.at(mem, pairs[:, 1], g.value_bytes[pairs[:, 0]] * cost.param_factor)
    if problem.mode == "training":
        stash = cost.stash_bytes.astype(float)
        mem += stash * (problem.in_flight(0, max(1, problem.num_devices)) if problem.objective == "throughput" else 1)
    ws = float(cost.working_set.max()) if g.num_nodes else 0.0
    return mem, ws


def contiguous_repair(problem: Problem, device_of: np.ndarray, *, devices=None, memory: bool = True) -> np.ndarray:
    """A device assignment close to ``device_of`` in which every device holds one convex piece.

    The assignment's pieces are laid out in execution order; consecutive runs of that sequence are
    given one device each (each device at most one run, devices in the order of where their work
    sits), keeping as much work as possible where it was (work moved to another device counts half,
    work a latency plan drops to the CPU nothing) — a dynamic program over the sequence with a
    sliding-window maximum. With ``memory``, runs must fit each device (parameters counted at every
    use, so the bound is conservative); if nothing fits, memory is ignored. Latency plans keep
    parallel-CPU nodes where they are, except those between two pieces of one run, which join it.
    In training, the forward graph decides and backward nodes follow their colocation partner.
    """
    g, topo = problem.graph, problem.topology
    n = g.num_nodes
    device_of = np.asarray(device_of, np.int64).copy()
    if n == 0:
        return device_of.astype(np.int32)
    mask = forward_mask(problem)
    latency = problem.objective == "latency"
    pieces = split_pieces(problem, device_of, mask=mask, cpu_parallel=latency)
    active = np.ones(n, bool) if mask is None else mask
    P = len(pieces.piece_device)
    if P == 0:
        return device_of.astype(np.int32)
    # sequence elements: the pieces in order, each cut into chunks of consecutive nodes (finer runs can
    # respect memory); the parallel nodes at odd position 2k-1 sit just before piece k's first chunk
    pos = pieces.position
    gap = active & (pos % 2 == 1)
    nodes = np.flatnonzero(active & ~gap & (pos >= 0))
    nodes = nodes[np.lexsort((nodes, pos[nodes]))]  # by piece, then topological order
    piece = pos[nodes] // 2
    rank = np.arange(len(nodes)) - np.searchsorted(piece, piece)  # rank within its piece
    chunk = max(1, -(-len(nodes) // _MAX_ELEMENTS))
    _, el = np.unique(piece * (len(nodes) + 1) + rank // chunk, return_inverse=True)
    el = el.ravel()
    E = int(el.max()) + 1
    piece_first = np.full(P + 1, E, np.int64)  # first element of piece k (k = P: past the end)
    np.minimum.at(piece_first, piece, el)
    gnodes = np.flatnonzero(gap)
    gel = piece_first[(pos[gnodes] + 1) // 2]
    elem_device = np.empty(E, np.int64)
    elem_device[el] = device_of[nodes]
    P = E
    pool = [int(d) for d in (devices if devices is not None else
                             np.union1d(pieces.piece_device, topo.accelerators if len(topo.accelerators) else topo.cpus))]
    work = problem.cost.device_compute
    node_mem, ws = node_memory(problem)
    cap = problem.capacity
    # per element: work kept if element e goes to device j; memory; support
    weight = np.zeros((P, len(pool)))
    kept = np.zeros((P, len(pool)))  # the work already there
    mem_e = np.zeros(P)
    allowed_e = np.ones((P, len(pool)), bool)
    inner_allowed = np.ones((P + 1, len(pool)), bool)  # parallel nodes before element e allowed on j
    inner_mem = np.zeros(P + 1)
    base_w = np.nan_to_num(np.where(np.isfinite(work), work, np.nan)[np.arange(n), device_of], nan=0.0)
    np.add.at(mem_e, el, node_mem[nodes])
    np.add.at(inner_mem, gel, node_mem[gnodes])
    for j, d in enumerate(pool):
        # work that stays counts fully; work moved to another device of the pool half (better than
        # dissolving into the CPU; when every element must move somewhere, the closest plan still wins)
        stay = device_of[nodes] == d
        np.add.at(kept[:, j], el[stay], base_w[nodes[stay]])
        np.add.at(weight[:, j], el, base_w[nodes] * np.where(stay, 1.0, _MOVED_SHARE))
        np.logical_and.at(allowed_e[:, j], el[~problem.allowed[nodes, d]], False)
        np.logical_and.at(inner_allowed[:, j], gel[~problem.allowed[gnodes, d]], False)
    # latency plans: a piece may also dissolve into the CPU, where any number of operators run in parallel
    cpu = int(topo.cpus[0]) if latency and len(topo.cpus) else -1
    free = None
    if cpu >= 0:
        free = np.ones(P, bool)
        np.logical_and.at(free, el, problem.allowed[nodes, cpu])
    orders = [list(range(len(pool)))] if devices is not None else _device_orders(kept, elem_device, pool)
    blocks = None
    for use_memory in ((True, False) if memory else (False,)):
        for order in orders:
            found = _block_dp(weight[:, order], mem_e, inner_mem, allowed_e[:, order], inner_allowed[:, order],
                              cap[[pool[j] for j in order]] if use_memory else np.full(len(order), np.inf), ws, free)
            if found is not None and (blocks is None or found[1] > blocks[1]):
                cols = np.where(found[0] >= 0, np.asarray(order)[np.maximum(found[0], 0)], -1)
                blocks = (cols, found[1])
        if blocks is not None:
            break
    if blocks is None:
        return device_of.astype(np.int32)
    elem_dev = np.where(blocks[0] >= 0, np.asarray(pool, np.int64)[np.maximum(blocks[0], 0)], cpu)
    out = device_of.copy()
    out[nodes] = elem_dev[el]
    # gap nodes strictly inside a run (between two elements of one device) join it
    inside = (gel > 0) & (gel < P)
    gi = gnodes[inside]
    ge = gel[inside]
    same = elem_dev[ge - 1] == elem_dev[np.minimum(ge, P - 1)]
    out[gi[same]] = elem_dev[ge[same]]
    if mask is not None:
        decided = mask.copy()
        out = follow_colocation(problem, out.astype(np.int32), decided)
    return np.asarray(out, np.int32)


def _device_orders(weight: np.ndarray, elem_device: np.ndarray, pool: list[int]) -> list[list[int]]:
    """Orders of the pool's columns to try: by the work-weighted median element of each device's work,
    and by its first element; devices without work last."""
    P = len(elem_device)
    idx = np.arange(P)
    med, first = {}, {}
    for j, d in enumerate(pool):
        w = weight[:, j]
        if w.sum() > 0:
            c = np.cumsum(w)
            med[j] = float(idx[np.searchsorted(c, c[-1] / 2)])
            first[j] = float(idx[np.argmax(w > 0)])
        else:
            on = np.flatnonzero(elem_device == d)
            med[j] = first[j] = float(on[0]) if len(on) else float(P) + j
    out = []
    for key in (med, first):
        order = sorted(range(len(pool)), key=lambda j: (key[j], j))
        if order not in out:
            out.append(order)
    return out


def _block_dp(weight, mem_e, inner_mem, allowed_e, inner_allowed, cap, ws, free=None):
    """Give consecutive runs of the elements 0..P-1 to devices 0..k-1 in order (each device at most one
    run), keeping the most weight, with every run supported and within memory. ``free`` (P,) marks
    elements that may instead go, one by one, to a device without that limit (a parallel CPU; they
    keep no weight). Returns the device column of each element (-1 = free) and the weight kept, or
    None when no such split exists.

    ``inner_*[e]`` describe the parallel nodes just before element e: a run [a, i) contains those of
    elements a+1..i-1. Feasibility only shrinks as a run grows, so the best start for each end is a
    sliding-window maximum over a window whose left edge only moves right.
    """
    P, k = weight.shape
    NEG = -np.inf
    free_l = [False] * P if free is None else np.asarray(free, bool).tolist()
    prevl = [0.0] + [NEG] * P
    for i in range(1, P + 1):  # before any device: only free elements
        prevl[i] = prevl[i - 1] if free_l[i - 1] else NEG
    pml = np.concatenate([[0.0], np.cumsum(mem_e)]).tolist()
    piml = np.concatenate([[0.0], np.cumsum(inner_mem)]).tolist()
    # choice[j][i]: how row j covers [0, i): a run start s >= 0 on device j, -1 = j unused, -2 = free
    choice = np.full((k, P + 1), -1, np.int64)
    for j in range(k):
        pw = np.concatenate([[0.0], np.cumsum(weight[:, j])]).tolist()
        bad = np.concatenate([[0], np.cumsum(~allowed_e[:, j])]).tolist()
        ibad = np.concatenate([[0], np.cumsum(~inner_allowed[:, j])]).tolist()
        limit = float(cap[j]) * (1 + 1e-12)
        cur = list(prevl)  # device j unused
        ch = choice[j]
        dq: deque[int] = deque()
        a = 0
        for i in range(1, P + 1):
            s = i - 1
            if prevl[s] > NEG:
                val = prevl[s] - pw[s]
                while dq and prevl[dq[-1]] - pw[dq[-1]] <= val:
                    dq.pop()
                dq.append(s)
            while a < i:
                inner_ok = a + 1 >= i or ibad[i] == ibad[a + 1]
                inner_m = piml[i] - piml[a + 1] if a + 1 < i else 0.0
                if bad[i] == bad[a] and inner_ok and pml[i] - pml[a] + inner_m + ws <= limit:
                    break
                a += 1
            while dq and dq[0] < a:
                dq.popleft()
            if dq:
                s0 = dq[0]
                v = prevl[s0] - pw[s0] + pw[i]
                if v > cur[i]:
                    cur[i] = v
                    ch[i] = s0
            if free_l[s] and cur[s] > cur[i]:
                cur[i] = cur[s]
                ch[i] = -2
        prevl = cur
    if prevl[P] == NEG:
        return None
    out = np.full(P, -1, np.int64)
    i, j = P, k - 1
    while i > 0 and j >= 0:
        c = int(choice[j][i])
        if c == -1:
            j -= 1
        elif c == -2:
            i -= 1
        else:
            out[c:i] = j
            i, j = c, j - 1
    return out, float(prevl[P])  # elements left when j < 0 are free (the base row allows only that)


def repair(problem: Problem, device_of: np.ndarray) -> np.ndarray:
    """A structurally valid version of ``device_of``: latency — at most ``q`` pieces per accelerator;
    contiguous pipelines — convex stages. Unchanged when already valid."""
    device_of = np.asarray(device_of, np.int32)
    topo = problem.topology
    if problem.objective == "latency":
        counts = split_pieces(problem, device_of, cpu_parallel=True).counts(topo.num_devices)
        if (counts[~topo.is_cpu] <= problem.max_subgraphs).all():
            return device_of
        return contiguous_repair(problem, device_of)
    if not problem.contiguous:
        return device_of
    mask = forward_mask(problem)
    if not nonconvex_units(problem.graph, device_of.astype(np.int64), mask=mask) and quotient_order(
            problem.graph, device_of.astype(np.int64), topo.num_devices, mask=mask) is not None:
        return device_of
    return contiguous_repair(problem, device_of)


def supported(problem: Problem, device_of: np.ndarray) -> np.ndarray:
    """Move every operator its device cannot run to the fastest device that can."""
    device_of = np.asarray(device_of, np.int32).copy()
    bad = np.flatnonzero(~problem.allowed[np.arange(len(device_of)), device_of])
    if len(bad):
        t = np.where(problem.allowed[bad], problem.cost.device_compute[bad], np.inf)
        device_of[bad] = np.argmin(t, axis=1)
    return device_of


def fallback(problem: Problem, sol: Solution, ev, certificate: Certificate, options):
    """For an infeasible ``sol``: the best of it, its repaired placement and everything on one device
    (as (Solution, Evaluation)); feasible ones first."""
    found = [(sol, ev)]
    fixed = solution_from_devices(problem, repair(problem, supported(problem, sol.node_device())), certificate)
    found.append((fixed, evaluate(problem, fixed)))
    try:
        single = SingleDevice().solve(problem, options)
        single = Solution(single.assignment, single.stages, certificate, single.schedule, single.microbatches)
        found.append((single, evaluate(problem, single)))
    except PlanmapError:
        pass
    return min(found, key=lambda se: (not se[1].feasible, se[1].objective))

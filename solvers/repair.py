"""Making a device assignment structurally valid, and the last resort for an infeasible plan.

:mod:`.segments` turns any device assignment into stages, but not every assignment has stages a
plan may use: a latency plan allows at most ``q`` calls per accelerator, and a contiguous pipeline
one convex stage per device. Heuristics (METIS's parts, greedy fills, local-search perturbations)
produce such assignments freely; :func:`repair` maps them to the closest valid one, so that every
baseline hands :func:`planmap.evaluate.evaluate` a plan it can accept, and :func:`fallback` /
:func:`best_effort` decide what a baseline answers when its own plan is still infeasible (the last
resort being everything on one device, :func:`single_device`, which the ``single`` baseline is).
:func:`follow_colocation` places the nodes a heuristic left undecided next to their partners.

The repair keeps the assignment's execution order: its pieces (see :func:`.segments.split_pieces`)
are laid out in sequence and consecutive runs of that sequence go to one device each, chosen by a
dynamic program that keeps as much work as possible where it was.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import Evaluation, evaluate, nonconvex_units, quotient_order
from planmap.problem import Certificate, Problem, Solution, SolveOptions
from planmap.vocabulary import ObjectiveKind

from .node_memory import node_memory
from .segments import forward_mask, solution_from_devices, split_pieces

__all__ = ["contiguous_repair", "repair", "supported", "follow_colocation", "single_device", "fallback", "best_effort"]

_MAX_ELEMENTS = 2048  # contiguous_repair cuts pieces into at most about this many runs of nodes
_MOVED_SHARE = 0.5  # contiguous_repair: value of work moved to another device, relative to work kept


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
    latency = problem.objective is ObjectiveKind.LATENCY
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
                             np.union1d(pieces.piece_device,
                                        topo.accelerators if len(topo.accelerators) else topo.cpus))]
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
    if problem.objective is ObjectiveKind.LATENCY:
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


def follow_colocation(problem: Problem, device_of: np.ndarray, decided: np.ndarray) -> np.ndarray:
    """Give undecided nodes the device of their colocation partner, else of their latest decided
    predecessor (in topological order), else of their earliest decided successor."""
    g = problem.graph
    dev = device_of.copy()
    cls = g.colocation
    owner: dict[int, int] = {}
    for i in np.flatnonzero(decided & (cls >= 0)).tolist():
        owner.setdefault(int(cls[i]), int(dev[i]))
    done = decided.copy()
    for i in np.flatnonzero(~done).tolist():
        c = int(cls[i])
        if c >= 0 and c in owner:
            dev[i] = owner[c]
            done[i] = True
    for i in range(g.num_nodes):
        if not done[i]:
            preds = [p for p in g.predecessors(i).tolist() if done[p]]
            if preds:
                dev[i] = dev[max(preds)]
                done[i] = True
    for i in range(g.num_nodes - 1, -1, -1):
        if not done[i]:
            succs = [s for s in g.successors(i).tolist() if done[s]]
            dev[i] = dev[min(succs)] if succs else dev[i]
            done[i] = True
    return dev


def single_device(problem: Problem, certificate: Certificate,
                  deadline: float | None = None) -> tuple[Solution, Evaluation]:
    """Everything on one accelerator (the ``single`` baseline, and :func:`fallback`'s last resort): the
    fastest whose memory holds the whole model, else the fastest; a CPU only in a cluster without
    accelerators. Raises InfeasibleError when no such device can run every operator.

    Each candidate costs one evaluation; past ``deadline`` (``time.perf_counter()``) the best one
    evaluated so far is the answer (thousands of devices would otherwise outlast the time limit)."""
    topo = problem.topology
    best = None
    candidates = list(topo.accelerators) if len(topo.accelerators) else list(topo.cpus)
    for d in candidates:
        if best is not None and deadline is not None and time.perf_counter() > deadline:
            break
        if not problem.allowed[:, d].all():
            continue
        sol = Solution.from_devices(problem, np.full(problem.graph.num_nodes, d, np.int32), certificate,
                                    schedule=(problem.schedule if problem.objective is ObjectiveKind.THROUGHPUT
                                              else None),
                                    microbatches=max(problem.microbatches, 1))
        ev = evaluate(problem, sol)
        key = (not ev.feasible, ev.objective)
        if best is None or key < best[0]:
            best = (key, sol, ev)
    if best is None:
        raise InfeasibleError(f"{problem.name}: no single device can run every operator")
    _, sol, ev = best
    return sol, ev


def fallback(problem: Problem, sol: Solution, ev, certificate: Certificate, options):
    """For an infeasible ``sol``: the best of it, its repaired placement and everything on one device
    (as (Solution, Evaluation)); feasible ones first."""
    found = [(sol, ev)]
    fixed = solution_from_devices(problem, repair(problem, supported(problem, sol.node_device())), certificate)
    found.append((fixed, evaluate(problem, fixed)))
    with contextlib.suppress(PlanmapError):  # no device runs every operator: no such candidate
        found.append(single_device(problem, certificate, time.perf_counter() + max(options.time_limit, 0.0)
                                   if options is not None else None))
    return min(found, key=lambda se: (not se[1].feasible, se[1].objective))


def best_effort(problem: Problem, sol: Solution, ev: Evaluation, certificate: Certificate, options: SolveOptions,
                t0: float) -> Solution:
    """What a placement baseline answers: ``sol`` when feasible, else the best :func:`fallback`; its
    certificate claims the objective :func:`planmap.evaluate.evaluate` gives (so the driver never
    finds a claim to correct) and the wall time since ``t0``."""
    if not ev.feasible:
        sol, ev = fallback(problem, sol, ev, certificate, options)
    return sol.with_certificate(objective=ev.objective, wall_time=time.perf_counter() - t0)

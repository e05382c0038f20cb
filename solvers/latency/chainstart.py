"""A warm start that walks the articulation chain: a DP over where each segment's towers and concat run.

Between two consecutive articulation nodes ``a`` and ``b`` (:func:`.towers.articulation_chain`) lies a
segment ``M``: the towers (weakly connected components of ``desc(a) ∩ anc(b)``) and ``b``. On the
paper-style Inception-v3 layer graph transfers dominate (a concat's send and receive cost 16-45 ms, a
module computes in 1.5-5.6 ms on an accelerator) and memory forces at least seven cuts, so where the
calls are cut decides the latency. The split DP (:mod:`.splits`) cuts one topological order into
contiguous pieces; it cannot cut a module's towers at their cheap inner values, nor use the CPU, whose
nodes are units of their own (independent towers run in parallel there and a CPU end pays no transfer).

Here every segment chooses one of (:mod:`.segopts` lists them and what each costs):

* ``b`` in ``a``'s call: the call grows by the whole segment;
* ``b`` in a new call ``C'``: each tower lies wholly in ``C'``, wholly in ``a``'s call ``C``, on the CPU
  (``C'`` waits for it and receives its outputs), or, for a chain tower, is cut after any of its nodes
  (the prefix in ``C`` or on the CPU, the suffix in ``C'``);
* ``b`` on the CPU: each tower in ``C``, on the CPU, in a side call (receives ``a``, sends to the CPU), or
  cut between one of these and the CPU; or its first node on the CPU, the next ones in the side call (which
  then receives that node's small output, not ``a``) and the rest on the CPU.

Each choice shifts the chain point of ``b`` (its call's start, receives and compute up to it; its finish
on the CPU) by a constant given the kind of ``a``'s unit, so the DP over (chain node, unit kind, number
of calls, memory held by the open call) is a shortest path. A side head (nodes off the chain that only a
chain node feeds) goes with that node's call or to the CPU. Each of the best final states becomes a
placement, call ``k`` a stage on the ``k``-th accelerator (or, when one call per accelerator finds nothing,
up to q calls per accelerator packed by bytes), and :func:`planmap.evaluate.evaluate` decides; on small
tower graphs it equals the DP's number (tests/solvers/latency/test_chainstart.py).
"""

from __future__ import annotations

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, Stage, Status
from planmap.vocabulary import Mode, ObjectiveKind

from .cuts import _closures
from .data import _own_bytes, prepare
from .segopts import CPU, MEM_BUCKETS, NEW, SAME, Costs, combos, cpu_path, representatives, shift, tags, tower_options
from .towers import _bits, _components, _predecessors, articulation_chain

__all__ = ["chain_starts", "chain_plan"]

FINALS = 6  # best final states turned into placements
MAX_CALLS = 32  # calls a route may open (the states grow with it; large clusters use their first accelerators)


class _State:
    __slots__ = ("pi", "mem", "ws", "calls", "acc", "back")

    def __init__(self, pi: float, mem: float, ws: float, calls: int, acc: bool, back):
        self.pi, self.mem, self.ws, self.calls, self.acc, self.back = pi, mem, ws, calls, acc, back


def _keep(cands: list[_State], cap: float, max_calls: int) -> list[_State]:
    """The states worth keeping: the fastest per (kind, calls, memory bucket), then those no state of the
    same kind with no more calls and no more memory (bucket) beats."""
    best: dict[tuple[bool, int, int], _State] = {}
    for s in cands:
        if s.calls > max_calls or not np.isfinite(s.pi):
            continue
        key = (s.acc, s.calls, int(np.ceil(s.mem / cap * MEM_BUCKETS)) if s.acc else 0)
        if key not in best or s.pi < best[key].pi:
            best[key] = s
    out = []
    for kind in (False, True):
        G = np.full((max_calls + 1, MEM_BUCKETS + 2), np.inf)
        for (acc, c, m), s in best.items():
            if acc == kind:
                G[c, m] = s.pi
        P = np.minimum.accumulate(np.minimum.accumulate(G, axis=0), axis=1)
        above = np.vstack([np.full((1, G.shape[1]), np.inf), P[:-1]])
        left = np.hstack([np.full((G.shape[0], 1), np.inf), P[:, :-1]])
        for (acc, c, m), s in sorted(best.items()):
            if acc == kind and s.pi < min(above[c, m], left[c, m]):
                out.append(s)
    return out


def _step(states: list[_State], a: int, b: int, comps: list[list[int]], preds, succs, k: Costs, cap: float,
          max_calls: int, side: list[int] | None, cpu_prefix: int) -> list[_State]:
    """The states of ``b`` from those of ``a`` over every choice of the segment between them."""
    M = sorted(set().union(*comps) | {b}) if comps else [b]
    direct = a in preds[b]
    tM, mM, wM = float(k.tA[M].sum()), float(k.own[M].sum()), float(k.ws[M].max())
    variants = {}
    for a_acc in (False, True):
        for mode in (NEW, CPU):
            if mode == CPU and not np.isfinite(k.tC[b]):
                continue
            rows = [tower_options(c, a, b, preds, succs, k, a_acc, mode, cpu_prefix) for c in comps]
            if any(not r for r in rows):
                continue
            agg, table = combos(rows)
            shifted = shift(agg, a, b, k, a_acc, mode, direct)
            keep = representatives(shifted, cap)
            variants[a_acc, mode] = (tuple(x[keep] for x in shifted), (table[0], table[1][keep]))
    out: list[_State] = []
    for si, s in enumerate(states):
        if s.acc and np.isfinite(tM) and s.mem + mM + max(s.ws, wM) <= cap:
            out.append(_State(s.pi + tM, s.mem + mM, max(s.ws, wM), s.calls, True, (si, SAME, None)))
        for mode in (NEW, CPU):
            if (s.acc, mode) not in variants:
                continue
            (K, memC, wsC, memN, wsN, xcall), tab = variants[s.acc, mode]
            ok = np.isfinite(K) & ((s.mem + memC + np.maximum(s.ws, wsC) <= cap) if s.acc else (memC == 0))
            ok &= memN + wsN <= cap
            idx = np.flatnonzero(ok)
            if not len(idx):
                continue
            bucket = np.ceil(memN[idx] / cap * MEM_BUCKETS).astype(np.int64) if mode == NEW else xcall[idx]
            order = np.lexsort((idx, K[idx], bucket))
            first = np.ones(len(order), bool)
            first[1:] = bucket[order][1:] != bucket[order][:-1]
            for i in idx[order[first]].tolist():
                if mode == NEW:
                    out.append(_State(s.pi + K[i], memN[i], wsN[i], s.calls + 1, True, (si, mode, tags(tab, i))))
                else:
                    out.append(_State(s.pi + K[i], 0.0, 0.0, s.calls + int(xcall[i]), False,
                                      (si, mode, tags(tab, i))))
    return _keep(_with_side(out, b, side, k, cap), cap, max_calls)


def _with_side(states: list[_State], b: int, side: list[int] | None, k: Costs, cap: float) -> list[_State]:
    """Each state of ``b`` with ``b``'s side branch (nodes off the chain that only ``b`` feeds: Inception's
    auxiliary head) in ``b``'s call (its compute and memory added) or on the CPU (the call sends ``b``'s
    value; a CPU ``b`` keeps it on the CPU): the choice is the last entry of ``back``."""
    if not side:
        return [_State(s.pi, s.mem, s.ws, s.calls, s.acc, (*s.back, False)) for s in states]
    t_in, m_in, w_in = float(k.tA[side].sum()), float(k.own[side].sum()), float(k.ws[side].max())
    out = []
    for s in states:
        if s.acc and np.isfinite(t_in) and s.mem + m_in + max(s.ws, w_in) <= cap:
            out.append(_State(s.pi + t_in, s.mem + m_in, max(s.ws, w_in), s.calls, True, (*s.back, True)))
        out.append(_State(s.pi + (float(k.s_ac[b]) if s.acc else 0.0), s.mem, s.ws, s.calls, s.acc,
                          (*s.back, False)))
    return out


def _segments(n: int, chain: list[int], preds, anc, desc) -> list[list[list[int]]]:
    """The towers (components) of each segment between consecutive chain nodes."""
    return [_components(_bits(desc[a] & anc[b]), preds) for a, b in zip(chain[:-1], chain[1:], strict=True)]


def _side_branches(n: int, chain: list[int], segs, preds, anc, desc) -> dict[int, list[int]]:
    """Chain node -> the nodes off every segment whose only outside producer it is (a side head), when no
    node of the chain needs them."""
    placed = np.zeros(n, bool)
    placed[chain] = True
    for comps in segs:
        for c in comps:
            placed[c] = True
    placed[_bits(anc[chain[0]])] = True
    placed[_bits(desc[chain[-1]])] = True
    rest = np.flatnonzero(~placed).tolist()
    on_chain = set(chain)
    out: dict[int, list[int]] = {}
    for comp in _components(rest, preds):
        inside = set(comp)
        feeds = {p for v in comp for p in preds[v] if p not in inside}
        x = next(iter(feeds)) if len(feeds) == 1 else None
        if x in on_chain:
            out.setdefault(int(x), []).extend(sorted(comp))
    return {x: sorted(v) for x, v in out.items()}


def _labels(n: int, chain: list[int], segs, sides: dict[int, list[int]], layers: list[list[_State]], final: _State,
            anc, desc) -> np.ndarray:
    """Unit of each node along ``final``'s route: call index ``>= 0`` or -1 for the CPU; -2 for nodes off the
    chain's segments (placed by the caller)."""
    lab = np.full(n, -2, np.int64)
    s, i = final, len(chain) - 1
    while i > 0:
        si, mode, tags, side_in = s.back
        prev = layers[i - 1][si]
        b = chain[i]
        cur, old = s.calls - 1, prev.calls - 1
        if mode == SAME:
            for c in segs[i - 1]:
                lab[c] = cur
            lab[b] = cur
        else:
            lab[b] = cur if mode == NEW else -1
            rest = cur if mode == NEW else -1
            own = old + 1 + any(tag in ("side", "cside") for tag, _ in tags)  # X first, then each "cown" call
            for comp, (tag, j) in zip(segs[i - 1], tags, strict=True):
                order = sorted(comp)
                if tag == "next":
                    lab[order] = cur
                elif tag == "cpu":
                    lab[order] = -1
                elif tag == "cpucut":
                    lab[order[:j]] = -1
                    lab[order[j:]] = cur
                elif tag == "side":  # the side call X is the first opened (b is on the CPU)
                    lab[order[:j]] = old + 1
                    lab[order[j:]] = -1
                elif tag in ("cside", "cown"):  # a prefix on the CPU, then X or a call of its own, then the CPU
                    lab[order] = -1
                    lab[order[j[0]:j[1]]] = old + 1 if tag == "cside" else own
                    own += tag == "cown"
                else:
                    lab[order[:j]] = old
                    lab[order[j:]] = rest
        if b in sides:
            lab[sides[b]] = lab[b] if side_in else -1
        s, i = prev, i - 1
    a0 = chain[0]
    first = _bits(anc[a0]) + [a0]
    lab[first] = s.calls - 1 if s.acc else -1
    lab[_bits(desc[chain[-1]])] = lab[chain[-1]]
    return lab


def chain_plan(problem: Problem, one_per_device: bool = True, cpu_prefix: int = 1) -> list[tuple[float, np.ndarray]]:
    """(the DP's latency in seconds, unit of each node as :func:`_labels`) of the best final states, fastest
    first; empty when the graph has no articulation chain of three nodes or fewer than two accelerators.
    ``one_per_device``: at most one call per accelerator (else up to q, their memory left to the packing of
    :func:`_devices_of_calls`, which may fail); ``cpu_prefix``: at most this many nodes of a tower on the CPU
    before its side call (0: side calls receive ``a`` only)."""
    topo = problem.topology
    accs = topo.accelerators
    if problem.objective is not ObjectiveKind.LATENCY or len(accs) < 2 or problem.num_nodes < 3:
        return []
    dt = prepare(problem, bounds=False)
    n = dt.n
    if n != problem.num_nodes:
        return []
    src, dst = (np.asarray(e, np.int64) for e in dt.edges)
    preds = _predecessors(n, src, dst)
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for p in preds[v]:
            succs[p].append(v)
    anc, desc = _closures(preds)
    chain = articulation_chain(n, src, dst, desc)
    if len(chain) < 3:
        return []
    cpus = [int(c) for c in topo.cpus if dt.allowed[:, c].any()]
    c = cpus[0] if cpus else None
    own = _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes)
    cap = float(dt.capacity[accs].min()) * (1 - 1e-6)
    k = Costs(dt, own, int(accs[0]), int(accs[1]), c, cap)
    max_calls = min(len(accs) if one_per_device else dt.q * len(accs), MAX_CALLS)
    segs = _segments(n, chain, preds, anc, desc)
    sides = _side_branches(n, chain, segs, preds, anc, desc)
    a0 = chain[0]
    first = _bits(anc[a0]) + [a0]
    init = []
    if np.isfinite(k.tA[first]).all() and own[first].sum() + k.ws[first].max() <= cap:
        init.append(_State(float(k.tA[first].sum()), float(own[first].sum()), float(k.ws[first].max()), 1, True,
                           None))
    if np.isfinite(k.tC[first]).all():
        init.append(_State(cpu_path(first, preds, k.tC), 0.0, 0.0, 0, False, None))
    layers = [_keep(init, cap, max_calls)]
    for i, (a, b) in enumerate(zip(chain[:-1], chain[1:], strict=True)):
        layers.append(_step(layers[-1], a, b, segs[i], preds, succs, k, cap, max_calls, sides.get(b), cpu_prefix))
        if not layers[-1]:
            return []
    tail = _bits(desc[chain[-1]])
    ends: list[tuple[float, int, int, _State]] = []
    for s in layers[-1]:
        extra = float(k.tA[tail].sum()) if s.acc else cpu_path(tail, preds, k.tC)
        if s.acc and s.mem + float(own[tail].sum()) > cap:
            continue
        ends.append((s.pi + extra, s.calls, len(ends), s))
    ends.sort(key=lambda e: e[:3])
    return [(v * dt.time_scale, _labels(n, chain, segs, sides, layers, s, anc, desc)) for v, _, _, s in ends[:FINALS]]


def _call_bytes(problem: Problem, lab: np.ndarray, calls: int) -> np.ndarray:
    """(calls,) bytes of each call as evaluate counts a device's: state, the parameters its nodes use (each
    once), its largest working set."""
    g, cost = problem.graph, problem.cost
    state = g.state_bytes.astype(float) + (cost.stash_bytes if problem.mode is Mode.TRAINING else 0.0)
    out = np.zeros(calls)
    on = lab >= 0
    np.add.at(out, lab[on], state[on])
    pv, pn = cost.param_use
    use = on[pn]
    if use.any():
        pairs = np.unique(np.stack([pv[use], lab[pn[use]]], 1), axis=0)
        np.add.at(out, pairs[:, 1], g.value_bytes[pairs[:, 0]].astype(float) * cost.param_factor)
    ws = np.zeros(calls)
    np.maximum.at(ws, lab[on], cost.working_set.astype(float)[on])
    return out + ws


def _devices_of_calls(problem: Problem, lab: np.ndarray) -> np.ndarray | None:
    """Accelerator of each call: the ``k``-th accelerator while there are enough, else first-fit decreasing
    by bytes onto at most q calls per accelerator (calls on one device run in call order, which the chain
    already imposes); None when they do not fit."""
    accs = problem.topology.accelerators
    calls = int(lab.max()) + 1 if (lab >= 0).any() else 0
    if calls <= len(accs):
        return accs[:calls].astype(np.int64)
    need = _call_bytes(problem, lab, calls)
    held, count = np.zeros(len(accs)), np.zeros(len(accs), np.int64)
    dev = np.full(calls, -1, np.int64)
    for k in sorted(range(calls), key=lambda c: (-need[c], c)):
        fits = np.flatnonzero((count < problem.max_subgraphs) & (held + need[k] <= problem.capacity[accs]))
        if not len(fits):
            return None
        d = int(fits[0])
        dev[k], held[d], count[d] = accs[d], held[d] + need[k], count[d] + 1
    return dev


def _placements(problem: Problem, lab: np.ndarray) -> list[Solution]:
    """Placements of one labelling: call ``k`` as a stage on its accelerator (:func:`_devices_of_calls`), CPU
    nodes on the first CPU; nodes off the segments (a side head, a source) with their colocation class, their
    producer's or first consumer's unit, or on the CPU."""
    topo = problem.topology
    cpus = [int(c) for c in topo.cpus if problem.allowed[:, c].any()]
    out: list[Solution] = []
    g = problem.graph
    preds, succs, coloc = g.pred, g.succ, g.colocation
    for with_producer in (True, False):
        lab2 = lab.copy()
        for v in np.flatnonzero(lab2 == -2).tolist():  # ascending: a topological order
            mates = np.flatnonzero((coloc == coloc[v]) & (lab2 != -2)) if coloc[v] >= 0 else np.zeros(0, np.int64)
            ps = preds[1][preds[0][v]: preds[0][v + 1]]
            placed = [int(lab2[p]) for p in ps if lab2[p] != -2]
            later = [int(lab2[w]) for w in succs[1][succs[0][v]: succs[0][v + 1]] if lab2[w] != -2]
            if len(mates):  # a colocation class runs on one device
                lab2[v] = lab2[mates[0]]
            elif with_producer and (placed or later):
                lab2[v] = max(placed) if placed else min(later)  # a source goes with its first consumer
            else:
                lab2[v] = -1
        if (lab2 == -1).any() and not cpus:
            continue
        call_dev = _devices_of_calls(problem, lab2)
        if call_dev is None:
            continue
        stages = [Stage((int(d),)) for d in call_dev] + ([Stage((cpus[0],))] if (lab2 == -1).any() else [])
        assign = np.where(lab2 >= 0, lab2, len(call_dev)).astype(np.int32)
        sol = Solution(assign, tuple(stages), Certificate(Status.HEURISTIC, "articulation-chain DP")).compact()
        if not any(np.array_equal(sol.assignment, x.assignment) and sol.stages == x.stages for x in out):
            out.append(sol)
    return out


def chain_starts(problem: Problem) -> list[Solution]:
    """The feasible placements of :func:`chain_plan`'s best routes (under :func:`planmap.evaluate.evaluate`),
    fastest first: one call per accelerator, or up to q when that finds none."""
    scored: list[tuple[float, int, Solution]] = []
    for one_per_device in (True, False):  # more calls than accelerators only when one each finds nothing
        if scored or (not one_per_device and problem.max_subgraphs <= 1):
            break
        for _, lab in chain_plan(problem, one_per_device):
            for sol in _placements(problem, lab):
                ev = evaluate(problem, sol)
                if ev.feasible:
                    scored.append((ev.objective, len(scored), sol))
    scored.sort(key=lambda x: x[:2])
    return [s for _, _, s in scored]

"""A latency bound that keeps one placement per block: a DP over the cut nodes of the graph.

A cut node lies on every path from a source to a sink (in a residual network the block outputs). No
edge jumps over a cut node, so the graph is a series of blocks, each the nodes strictly between two
consecutive cut nodes ``s`` and ``e``, with every edge inside one closed block ``[s, e]``. The path
bounds of :mod:`.cuts` take, for each node, the cheapest choice of its ancestors and of its descendants
separately, so a chain through one producer of a join may keep a layer on an accelerator while the chain
through the other runs it on the CPU. This bound enumerates every labelling of a block's nodes (CPU, the
call of ``s``, the call of ``e``, or calls inside the block) and carries from block to block only what
the next block needs:

* the kind of ``s`` (CPU or accelerator) and its time ``tau``: its finish on a CPU; on an accelerator the
  start of its call plus everything the call receives and computes up to ``s`` (its *chain point*);
* for an accelerator, the memory the call of ``s`` already holds (its own bytes, and its largest
  working set).

Why that is enough: a call ``C`` is convex, so when it holds a cut node ``s``, no value enters it after
``s`` (the producer would lie between ``s`` and a node of ``C``), and nothing it holds before ``s`` sends
a value out (the consumer would lie between that node and ``s``). Its receives are all paid by ``s``'s
chain point and its sends in the block after its last cut node; a call holding ``s`` and ``e`` holds the
whole block. Within a block every time is ``tau(s)`` plus a constant of the labelling (every node
descends from ``s``), so a block's labellings reduce to a few outcomes (the constant, the memory they add
to ``s``'s call, the memory of ``e``'s new call), and the DP keeps, per kind of ``e``, the Pareto front of
(time, memory held, working set).

Relaxations, each keeping the bound valid: the accelerators are one kind (compute at the fastest
allowed device of the kind, each charge at the cheapest pair of devices), a call holds at most the
largest accelerator memory (its nodes' own bytes plus its largest working set; shared parameters left
out), calls on one device neither wait for each other nor share its memory, and the number of calls is
not limited. Every feasible placement labels each block in one of the enumerated ways and pays at least
what the labelling is charged, so the DP's least latency is a lower bound; tests check it against every
feasible placement of small residual graphs (tests/solvers/latency/test_blocks.py).

Only graphs made of small blocks (at most ``BLOCK_MAX`` nodes between two cut nodes, ResNet's layer
graphs) get the bound; others are skipped after one linear pass. Figures in
``docs/notes/latency-bounds.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.problem import Solution, Stage

__all__ = ["cut_nodes", "block_plan", "block_lower_bound", "placement_of", "BlockPlan", "BLOCK_MAX", "Tails"]

BLOCK_MAX = 5  # most nodes strictly between two cut nodes (labellings grow like the Bell numbers)
MAX_NODES = 5000  # larger graphs are skipped (a chain of 3,000 nodes, every node a cut node, takes 1 s)
FRONT_MAX = 2000  # states kept per kind of cut node; beyond, neighbours merge into their least values
CPU, ACC = 0, 1


def cut_nodes(n: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """The nodes on every path from a source to a sink (nodes numbered in topological order): no edge
    jumps over ``v``, every earlier node has a successor and every later node a predecessor (so every
    earlier node reaches ``v``, and ``v`` reaches every later one)."""
    if n == 0:
        return []
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    over = np.zeros(n + 1, np.int64)
    np.add.at(over, src + 1, 1)
    np.add.at(over, dst, -1)
    jumps = np.cumsum(over)[:n] > 0  # some edge (a, b) with a < v < b
    has_out = np.zeros(n, bool)
    has_out[src] = True
    has_in = np.zeros(n, bool)
    has_in[dst] = True
    sink_before = np.concatenate([[0], np.cumsum(~has_out)[:-1]]) > 0  # a sink among 0..v-1
    source_after = np.concatenate([np.cumsum((~has_in)[::-1])[::-1][1:], [0]]) > 0  # a source among v+1..
    return np.flatnonzero(~jumps & ~sink_before & ~source_after).tolist()


@dataclass(frozen=True)
class Tails:
    """Nodes that stand for a chain (a head and its light tail, :mod:`.chains`): the node's ``t``, ``own`` and
    working set are the head's; ``t_whole`` (n, 2), ``own_whole``, ``ws_whole`` the whole chain's, charged
    when the node is not a cut node and shares its call with a consumer; otherwise (detached) its consumers
    see it ``delay[v, head kind, consumer kind]`` after its unit finishes (``edge_delay`` on edges no value
    crosses). Why this stays a bound: :mod:`.chains`."""

    has: np.ndarray
    t_whole: np.ndarray
    own_whole: np.ndarray
    ws_whole: np.ndarray
    delay: np.ndarray
    edge_delay: np.ndarray


@dataclass(frozen=True)
class _Kinds:
    """The problem seen by kind (CPU, accelerator): least compute and least charges over each kind."""

    t: np.ndarray  # (n, 2) compute
    recv: np.ndarray  # (V, 2, 2) [j, producer kind, consumer kind], another unit
    send: np.ndarray  # (V, 2, 2)
    own: np.ndarray  # (n,) bytes a node brings to any device
    ws: np.ndarray  # (n,) working set
    cap: float  # the largest accelerator memory
    tails: Tails | None = None


def _kinds(t, allowed, is_cpu, q, recv, send, own, ws, capacity, tails: Tails | None = None) -> _Kinds:
    cpu = np.asarray(is_cpu, bool)
    D = len(cpu)
    cross = np.ones((D, D), bool)
    if q <= 1:
        cross[np.diag_indices(D)] = cpu
    tk = np.full((len(t), 2), np.inf)
    for k, sel in ((CPU, cpu), (ACC, ~cpu)):
        if sel.any():
            tk[:, k] = np.where(allowed[:, sel], t[:, sel], np.inf).min(axis=1)
    V = len(recv)
    rk, sk = np.full((V, 2, 2), np.inf), np.full((V, 2, 2), np.inf)
    for a, sa in ((CPU, cpu), (ACC, ~cpu)):
        for b, sb in ((CPU, cpu), (ACC, ~cpu)):
            ok = cross & sa[:, None] & sb[None, :]
            if ok.any() and V:
                rk[:, a, b] = np.where(ok[None], recv, np.inf).min(axis=(1, 2))
                sk[:, a, b] = np.where(ok[None], send, np.inf).min(axis=(1, 2))
    cap = capacity[~cpu]
    cap_max = float(cap.max()) if len(cap) else 0.0
    return _Kinds(tk, rk, np.where(np.isfinite(sk), sk, 0.0), own, ws, cap_max * (1 + 1e-9) if cap_max else 0.0,
                  tails)


@dataclass(frozen=True)
class _Outcome:
    """One class of a block's labellings: ``tau(e) = tau(s) + cost`` (the latency for the last block)."""

    cost: float
    e_kind: int  # CPU, ACC (-1 in the last block, which has no ``e``)
    joins: bool  # ``e`` in ``s``'s call (then the whole block is)
    add_m: float  # own bytes added to ``s``'s call
    add_w: float  # largest working set added to ``s``'s call
    new_m: float  # ``e``'s new call: own bytes, largest working set
    new_w: float
    labels: tuple[int, ...]  # per block node (``s``, inner nodes, ``e``): -1 CPU, else a call number


def _restricted(k: int, first: int | None):
    """Every labelling of ``k`` nodes with -1 (CPU) or calls 0, 1, ... numbered by first use; the first node
    fixed to ``first`` when given."""
    def rec(i, labels, top):
        if i == k:
            yield tuple(labels)
            return
        opts = [first] if i == 0 and first is not None else [-1] + list(range(top + 2))
        for c in opts:
            labels.append(c)
            yield from rec(i + 1, labels, max(top, c))
            labels.pop()
    yield from rec(0, [], -1)


class _Block:
    """The nodes ``[s] + inner + [e]`` of one block (``s`` or ``e`` absent at the ends of the graph)."""

    def __init__(self, nodes: list[int], has_s: bool, has_e: bool, uses: list[tuple[int, int, int]],
                 edges: list[tuple[int, int]]):
        self.nodes, self.has_s, self.has_e = nodes, has_s, has_e
        k = len(nodes)
        self.uses = uses  # (value, local producer, local consumer)
        self.edges = edges  # local (a, b), a < b
        self.anc, self.desc = [0] * k, [0] * k
        for a, b in sorted(edges, key=lambda e: e[1]):
            self.anc[b] |= self.anc[a] | (1 << a)
        for a, b in sorted(edges, key=lambda e: -e[0]):
            self.desc[a] |= self.desc[b] | (1 << b)

    def convex(self, labels: tuple[int, ...]) -> bool:
        calls: dict[int, int] = {}
        for i, c in enumerate(labels):
            if c >= 0:
                calls[c] = calls.get(c, 0) | (1 << i)
        for c, members in calls.items():
            for y, cy in enumerate(labels):
                if cy != c and self.anc[y] & members and self.desc[y] & members:
                    return False
        return True


def _unit_order(labels: tuple[int, ...], edges) -> list | None:
    """Units (call number, or ('cpu', node)) in an order that respects every edge between them; None on a cycle."""
    unit = [c if c >= 0 else ("cpu", i) for i, c in enumerate(labels)]
    units = list(dict.fromkeys(unit))
    succ: dict = {u: set() for u in units}
    indeg = dict.fromkeys(units, 0)
    for a, b in edges:
        ua, ub = unit[a], unit[b]
        if ua != ub and ub not in succ[ua]:
            succ[ua].add(ub)
            indeg[ub] += 1
    ready = [u for u in units if indeg[u] == 0]
    order = []
    while ready:
        u = ready.pop()
        order.append(u)
        for w in succ[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return order if len(order) == len(units) else None


def _charges(blk: _Block, labels: tuple[int, ...], K: _Kinds):
    """Per block node: its compute (2,), own bytes, working set, and ``lag(i, consumer kind or None)``, the delay
    its consumers see after its unit finishes: a node with a tail (:class:`Tails`) counts the whole chain when
    it is not a cut node and a consumer shares its call, else only its head, with the tail's delay. A cut node
    ``e`` adds the least delay to its own time: its consumers are all in the next block, and on an
    accelerator its call holds none of them unless it holds the tail too (convexity)."""
    nodes = blk.nodes
    tl = [K.t[v] for v in nodes]
    ol = [K.own[v] for v in nodes]
    wl = [K.ws[v] for v in nodes]
    tails = K.tails
    det: dict[int, int] = {}
    if tails is not None:
        last = len(nodes) - 1
        for i, v in enumerate(nodes):
            if not tails.has[v] or (blk.has_s and i == 0):
                continue
            if blk.has_e and i == last:  # the cut node's time (what the next block starts from) waits for its tail
                lag_e = min(float(tails.edge_delay[v]), float(tails.delay[v, CPU].min()))
                tl[i] = K.t[v] + np.array([lag_e, tails.edge_delay[v]])
                continue
            if labels[i] >= 0 and any(labels[b] == labels[i] for a, b in blk.edges if a == i):
                tl[i], ol[i], wl[i] = tails.t_whole[v], tails.own_whole[v], tails.ws_whole[v]
            else:
                det[i] = v

    def lag(i: int, consumer: int | None) -> float:
        v = det.get(i)
        if v is None or tails is None:
            return 0.0
        if consumer is None:
            return float(tails.edge_delay[v])
        return float(tails.delay[v, CPU if labels[i] < 0 else ACC, consumer])

    return tl, ol, wl, lag


def _evaluate_block(blk: _Block, labels: tuple[int, ...], K: _Kinds) -> _Outcome | None:
    """The outcome of one labelling relative to ``tau(s) = 0``; None when no placement labels the block so
    (not convex, a cycle between units, a node on a kind it cannot run on, a call over the memory)."""
    nodes = blk.nodes
    kind = [CPU if c < 0 else ACC for c in labels]
    tl, ol, wl, lag = _charges(blk, labels, K)
    if any(not np.isfinite(tl[i][kind[i]]) for i in range(len(nodes))):
        return None
    if not blk.convex(labels):
        return None
    order = _unit_order(labels, blk.edges)
    if order is None:
        return None
    last = len(nodes) - 1
    s_call = labels[0] if blk.has_s and labels[0] >= 0 else None
    e_unit = (labels[last] if labels[last] >= 0 else ("cpu", last)) if blk.has_e else None
    unit = [c if c >= 0 else ("cpu", i) for i, c in enumerate(labels)]
    members: dict = {}
    for i, u in enumerate(unit):
        members.setdefault(u, []).append(i)
    fin: dict = {}
    tau_e = 0.0
    new_m = new_w = 0.0
    for u in order:
        mem = members[u]
        is_s_call = u == s_call
        if isinstance(u, tuple):  # a CPU node: its inputs arrive (with the receive as a delay), then it computes
            i = mem[0]
            ready = 0.0
            for a, b in blk.edges:
                if b == i and unit[a] != u:
                    ready = max(ready, fin[unit[a]] + lag(a, None))
            for j, a, b in blk.uses:
                if b == i and unit[a] != u:
                    ready = max(ready, fin[unit[a]] + lag(a, CPU) + K.recv[j, kind[a], CPU])
            fin[u] = 0.0 if blk.has_s and i == 0 else ready + tl[i][CPU]  # tau(s) = 0
            if u == e_unit:
                tau_e = fin[u]
            continue
        own = sum(ol[i] for i in mem if not (is_s_call and i == 0))
        wsm = max((wl[i] for i in mem if not (is_s_call and i == 0)), default=0.0)
        work = sum(tl[i][ACC] for i in mem if not (is_s_call and i == 0))
        if is_s_call:
            start = 0.0  # tau(s): the call has received everything and computed up to s
        else:
            start = max((fin[unit[a]] + lag(a, None) for a, b in blk.edges if unit[b] == u and unit[a] != u),
                        default=0.0)
            start = max([start] + [fin[unit[a]] + lag(a, ACC) for _, a, b in blk.uses if unit[b] == u and unit[a] != u])
            taken = {(j, a) for j, a, b in blk.uses if unit[b] == u and unit[a] != u}
            work += sum(K.recv[j, kind[a], ACC] for j, a in taken)
        if u == e_unit:
            tau_e = start + work
            if not is_s_call:
                if own + wsm > K.cap:
                    return None
                new_m, new_w = own, wsm
            continue
        sent: dict[int, float] = {}
        for j, a, b in blk.uses:
            if unit[a] == u and unit[b] != u:
                sent[j] = max(sent.get(j, 0.0), K.send[j, ACC, kind[b]])
        fin[u] = start + work + sum(sent.values())
        if not is_s_call and own + wsm > K.cap:
            return None
    if s_call is not None:
        inside = [i for i in members[s_call] if i != 0]
        add_m = sum(ol[i] for i in inside)
        add_w = max((wl[i] for i in inside), default=0.0)
    else:
        add_m = add_w = 0.0
    if not blk.has_e:
        ends = [fin[unit[i]] + lag(i, None) for i in range(len(nodes)) if unit[i] in fin]  # a tail ends later
        cost, e_kind, joins = max(list(fin.values()) + ends, default=0.0), -1, False
    else:
        cost, e_kind, joins = tau_e, kind[last], s_call is not None and labels[last] == s_call
    return _Outcome(float(cost), e_kind, joins, float(add_m), float(add_w), float(new_m), float(new_w), labels)


def _outcomes(blk: _Block, s_kind: int | None, K: _Kinds) -> list[_Outcome]:
    """The least-cost labelling of each outcome class of a block, for ``s`` of kind ``s_kind``."""
    best: dict[tuple, _Outcome] = {}
    first = None if s_kind is None else (-1 if s_kind == CPU else 0)
    for labels in _restricted(len(blk.nodes), first):
        o = _evaluate_block(blk, labels, K)
        if o is None:
            continue
        key = (o.e_kind, o.joins, o.add_m, o.add_w, o.new_m, o.new_w)
        if key not in best or o.cost < best[key].cost:
            best[key] = o
    return list(best.values())


# a DP state: (tau, memory held by s's call, its working set, back pointer)
_State = tuple[float, float, float, tuple | None]


def _prune(states: list[_State]) -> list[_State]:
    """The states no other state beats in time, memory and working set together; beyond ``FRONT_MAX``,
    neighbours (by memory) merge into one state of their least values (a relaxation: still a bound)."""
    states.sort(key=lambda s: (s[0], s[1], s[2]))
    kept: list[_State] = []
    for s in states:
        if not any(k[1] <= s[1] and k[2] <= s[2] for k in kept):
            kept.append(s)
    if len(kept) > FRONT_MAX:
        kept.sort(key=lambda s: s[1])
        size = -(-len(kept) // FRONT_MAX)
        kept = [(min(s[0] for s in grp), grp[0][1], min(s[2] for s in grp), None)
                for grp in (kept[i: i + size] for i in range(0, len(kept), size))]
    return kept


@dataclass(frozen=True)
class BlockPlan:
    """The DP's result: its latency bound (model units) and, where the DP kept it, a labelling of every
    node (-1 CPU, else a call number; calls numbered along the graph) that attains it in the relaxation."""

    bound: float
    labels: np.ndarray | None


def _blocks(n, cuts, uses_of, edge_list) -> list[_Block]:
    bounds = ([None] if cuts[0] > 0 else []) + cuts + ([None] if cuts[-1] < n - 1 else [])
    out = []
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        lo = 0 if s is None else s + 1
        hi = n if e is None else e
        nodes = ([] if s is None else [s]) + list(range(lo, hi)) + ([] if e is None else [e])
        local = {v: i for i, v in enumerate(nodes)}
        uses = [(j, local[p], local[c]) for c in nodes for j, p in uses_of[c] if p in local and local[p] < local[c]]
        edges = [(local[a], local[b]) for a, b in edge_list if a in local and b in local and local[a] < local[b]]
        out.append(_Block(nodes, s is not None, e is not None, uses, edges))
    return out


def _first_fronts(first: int, K: _Kinds) -> dict[int | None, list[_State]]:
    """The states before the first block: the source itself when it is a cut node, else a virtual start."""
    if first > 0:
        return {None: [(0.0, 0.0, 0.0, None)]}
    fronts: dict[int | None, list[_State]] = {CPU: [], ACC: []}
    if np.isfinite(K.t[0, CPU]):
        fronts[CPU].append((float(K.t[0, CPU]), 0.0, 0.0, None))
    if np.isfinite(K.t[0, ACC]) and K.own[0] + K.ws[0] <= K.cap:
        fronts[ACC].append((float(K.t[0, ACC]), float(K.own[0]), float(K.ws[0]), None))
    return fronts


def block_plan(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, working_set,
               capacity, tails: Tails | None = None) -> BlockPlan | None:
    """The bound of the module docstring in model units, or None when the graph has no cut node, a block
    has more than ``BLOCK_MAX`` nodes or the graph more than ``MAX_NODES``. Arguments as in
    :class:`.data.LatencyData`; ``own`` (n,) the bytes a node brings to any device."""
    n = len(t)
    if n > MAX_NODES:
        return None
    src, dst = (np.asarray(e, np.int64) for e in edges)
    src = np.concatenate([src, np.asarray(val_prod, np.int64)[pair_val]])  # every use orders its two nodes
    dst = np.concatenate([dst, np.asarray(pair_cons, np.int64)])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    cuts = cut_nodes(n, src, dst)
    if not cuts or np.diff([-1] + cuts + [n]).max() - 1 > BLOCK_MAX:
        return None
    K = _kinds(t, allowed, is_cpu, q, recv, send, own, working_set, capacity, tails)
    uses_of: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for j, c in sorted(set(zip(pair_val.tolist(), pair_cons.tolist(), strict=True))):
        uses_of[c].append((j, int(val_prod[j])))
    blocks = _blocks(n, cuts, uses_of, sorted(set(zip(src.tolist(), dst.tolist(), strict=True))))
    fronts = _first_fronts(cuts[0], K)
    final: list[tuple[float, Any]] = []
    for blk in blocks:
        nxt: dict[int | None, list[_State]] = {CPU: [], ACC: []}
        for s_kind, states in fronts.items():
            if not states:
                continue
            for o in _outcomes(blk, s_kind if blk.has_s else None, K):
                for st in states:
                    tau, m, w, _ = st
                    if m + o.add_m + max(w, o.add_w) > K.cap:
                        continue  # s's call would not fit
                    back = (st, o.labels)
                    if not blk.has_e:
                        final.append((tau + o.cost, back))
                    elif o.joins:
                        nxt[ACC].append((tau + o.cost, m + o.add_m, max(w, o.add_w), back))
                    else:
                        nxt[o.e_kind].append((tau + o.cost, o.new_m, o.new_w, back))
        if blk.has_e:
            fronts = {k: _prune(v) for k, v in nxt.items()}
    if not blocks or blocks[-1].has_e:  # the last cut node is the sink: its chain point (or finish) ends the graph
        final = [(st[0], st[3]) for states in fronts.values() for st in states]
    if not final:
        return BlockPlan(np.inf, None)
    bound, back = min(final, key=lambda f: f[0])
    return BlockPlan(float(bound), _labels(n, blocks, back))


def _labels(n: int, blocks: list[_Block], back) -> np.ndarray | None:
    """Follow the back pointers to one labelling of every node (calls renumbered along the graph); None
    when a merged state lost the history."""
    per_block = []
    while back is not None:
        st, labels = back
        per_block.append(labels)
        back = st[3]
    per_block.reverse()
    if len(per_block) != len(blocks):
        return None
    out = np.full(n, -1, np.int64)
    next_call = 0
    carried = None  # the global number of s's call, from the previous block
    for blk, labels in zip(blocks, per_block, strict=True):
        local: dict[int, int] = {}
        if blk.has_s and labels[0] >= 0 and carried is not None:
            local[labels[0]] = carried
        for i, c in enumerate(labels):
            if c < 0:
                continue
            if c not in local:
                local[c] = next_call
                next_call += 1
            out[blk.nodes[i]] = local[c]
        carried = local.get(labels[-1]) if blk.has_e and labels[-1] >= 0 else None
    return out


def block_lower_bound(*args, tails: Tails | None = None) -> float:
    """:func:`block_plan`'s bound in model units (0 when the graph is skipped)."""
    plan = block_plan(*args, tails=tails)  # type: ignore[misc]  # the 13 arguments of block_plan, then tails
    return 0.0 if plan is None else plan.bound


def placement_of(problem, labels: np.ndarray, certificate) -> Solution | None:
    """A placement that realises a labelling (-1 CPU, else a call number, calls numbered in run order):
    each CPU node on its fastest allowed CPU, each call on an accelerator that allows all its nodes, has
    fewer than ``q`` calls and the most memory left (so that independent calls spread over the devices and
    run in parallel); calls keep their order on a device. None when no device takes a call."""
    topo, cost = problem.topology, problem.cost
    q = max(1, int(problem.max_subgraphs))
    accs = np.flatnonzero(~topo.is_cpu)
    cpus = np.flatnonzero(topo.is_cpu)
    n = len(labels)
    left = {int(d): float(problem.capacity[d]) for d in accs}
    count = dict.fromkeys(left, 0)
    own = problem.graph.state_bytes.astype(float) + cost.working_set
    assignment = np.zeros(n, np.int64)
    stages: list[Stage] = []
    cpu_stage: dict[int, int] = {}
    for v in np.flatnonzero(labels < 0).tolist():
        ok = cpus[problem.allowed[v, cpus]]
        if not len(ok):
            return None
        d = int(ok[np.argmin(cost.device_compute[v, ok])])
        if d not in cpu_stage:
            cpu_stage[d] = len(stages)
            stages.append(Stage((d,)))
        assignment[v] = cpu_stage[d]
    for c in range(int(labels.max()) + 1 if (labels >= 0).any() else 0):
        members = np.flatnonzero(labels == c)
        if not len(members):
            continue
        need = float(own[members].sum())
        ok = [d for d in left if count[d] < q and problem.allowed[members, d].all()]
        if not ok:
            return None
        d = max(ok, key=lambda x: (left[x] - need, -x))
        left[d] -= need
        count[d] += 1
        assignment[members] = len(stages)
        stages.append(Stage((d,)))
    return Solution(assignment, tuple(stages), certificate)


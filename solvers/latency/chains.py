"""Operator graphs shrunk for the block DP of :mod:`.blocks`: weights folded into their op, light ops into a chain.

At operator granularity a residual block is 10-14 nodes (each conv with its batch-norm and relu, the weight
nodes of each), too many for :mod:`.blocks` to enumerate, and the weight nodes (sources) leave no cut node at
all. Two contractions turn such a graph into the layer-like graph the DP solves, each keeping the DP's least
latency at most what any feasible placement of the original graph pays:

* **Weights.** A source ``w`` of zero compute everywhere, read only by ``v`` and in ``v``'s colocation class,
  goes into ``v`` (its own bytes added to ``v``'s). Evaluate puts ``w`` on ``v``'s device, whose memory holds
  both; dropping ``w``'s value only lets ``v``'s unit start earlier (``w`` computes nothing).
* **Tails.** A chain ``u -> v1 -> ... -> vm`` (each ``vi``'s only producer the one before, whose only
  consumer it is; each ``vi`` computes at most ``LIGHT`` times ``u`` on every kind: a batch-norm and a relu
  after a conv) becomes one node, the *head* ``u`` with a *tail*. A placement either keeps the tail in
  ``u``'s call with a consumer of ``vm`` (convexity then puts the whole tail there: the node is charged in
  full, *whole*), or not (*detached*): then the node is charged as ``u`` alone, and its consumers see its
  value ``jv`` only ``delay`` after its unit finishes, the least the tail can take outside (on an
  accelerator head ``sum tmin``; on a CPU head the cheaper of running the tail on the CPU and entering an
  accelerator at some ``vi``, which receives ``j(i-1)``). Moving the tail out of the calls it ran in and
  into ``u``'s unit never makes a unit finish later when ``jv``'s charges are at most those of the values
  it replaces, for every kind ``a``, ``b``, ``k`` (``R`` receive, ``S`` send, least over the device pairs of
  the kinds, as :mod:`.blocks` charges them; ``j`` any value inside the chain):

  - ``S(jv, ACC, k) <= S(j, ACC, b)``: ``u``'s call sends ``jv`` where it sent ``j``;
  - ``R(jv, a, ACC) <= R(j, b, ACC)``: a call that received ``j`` from the tail now receives ``jv``;
  - ``R(jv, a, k) <= R(jv, b, k) + S(jv, b, k)`` (the send only for an accelerator ``b``): a consumer
    receives ``jv`` from ``u``'s kind instead of the tail's.

  With the paper's uniform charges (a value costs the same at every accelerator end, CPU ends pay nothing)
  and ``jv`` no larger than the values before it these hold; where one fails the chain stops there. A cut
  node with a tail is charged as its head plus the least of its delays (its tail's bytes and working set
  dropped: a relaxation), since the DP carries a cut node's time before it knows where the consumers run.

Tests check the contracted bound against the exhaustive optimum of small operator-like residual graphs
(tests/solvers/latency/test_chains.py). Figures in ``docs/notes/latency-bounds.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .blocks import ACC, CPU, Tails, _kinds, block_lower_bound

__all__ = ["Contracted", "contract", "contracted_block_bound", "LIGHT"]

TOL = 1e-12
LIGHT = 0.5  # a tail node computes at most this share of its head, on every kind


@dataclass(frozen=True)
class Contracted:
    """The arguments of :func:`.blocks.block_plan` for the contracted graph (``t``, ``own`` and
    ``working_set`` of the heads alone), its ``tails``, and ``node`` (n,): the contracted node each original
    node went into."""

    t: np.ndarray
    allowed: np.ndarray
    edges: tuple[np.ndarray, np.ndarray]
    val_prod: np.ndarray
    pair_val: np.ndarray
    pair_cons: np.ndarray
    recv: np.ndarray
    send: np.ndarray
    own: np.ndarray
    working_set: np.ndarray
    tails: Tails
    node: np.ndarray

    def args(self, is_cpu, q, capacity) -> tuple:
        """The positional arguments of :func:`.blocks.block_plan`."""
        return (self.t, self.allowed, is_cpu, q, self.edges, self.val_prod, self.pair_val, self.pair_cons,
                self.recv, self.send, self.own, self.working_set, capacity)


def _charges_ok(K, inside: list[int], jv: int) -> bool:
    """The charge conditions of the module docstring for a chain whose values inside are ``inside`` and
    whose value out is ``jv``."""
    R, S = K.recv, K.send
    for a in (CPU, ACC):
        for b in (CPU, ACC):
            for k in (CPU, ACC):
                if R[jv, a, k] > R[jv, b, k] + (S[jv, b, k] if b == ACC else 0.0) + TOL:
                    return False
            for j in inside:
                if R[jv, a, ACC] > R[j, b, ACC] + TOL:
                    return False
                if a == ACC and any(S[jv, ACC, k] > S[j, ACC, b] + TOL for k in (CPU, ACC)):
                    return False
    return True


def _graph(n, edges, val_prod, pair_val, pair_cons):
    src = np.concatenate([np.asarray(edges[0], np.int64), val_prod[pair_val]])
    dst = np.concatenate([np.asarray(edges[1], np.int64), pair_cons])
    keep = src != dst
    pairs = sorted(set(zip(src[keep].tolist(), dst[keep].tolist(), strict=True)))
    preds: list[set[int]] = [set() for _ in range(n)]
    succs: list[set[int]] = [set() for _ in range(n)]
    for a, b in pairs:
        preds[b].add(a)
        succs[a].add(b)
    return pairs, preds, succs


def contract(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, working_set, capacity,
             colocation, light: float = LIGHT) -> Contracted:
    """The graph with weights folded and light chains turned into tails (nodes renumbered in their order,
    still topological). Arguments as for :func:`.blocks.block_plan`, plus ``colocation`` (n,) class ids."""
    n = len(t)
    K = _kinds(t, allowed, is_cpu, q, recv, send, own, working_set, capacity)
    val_prod = np.asarray(val_prod, np.int64)
    pair_val, pair_cons = np.asarray(pair_val, np.int64), np.asarray(pair_cons, np.int64)
    pairs, preds, succs = _graph(n, edges, val_prod, pair_val, pair_cons)
    used_by: dict[int, set[int]] = {}
    for j, c in zip(pair_val.tolist(), pair_cons.tolist(), strict=True):
        used_by.setdefault(j, set()).add(c)
    out_vals: list[list[int]] = [[] for _ in range(n)]
    for j in sorted(used_by):
        out_vals[int(val_prod[j])].append(j)
    zero = np.where(allowed, np.asarray(t, float), 0.0).max(axis=1) <= 0.0
    col = np.asarray(colocation, np.int64)
    head = np.arange(n)
    weights: list[list[int]] = [[] for _ in range(n)]
    for w in range(n):  # weights into their op
        if not preds[w] and len(succs[w]) == 1 and zero[w]:
            v = next(iter(succs[w]))
            if col[w] >= 0 and col[w] == col[v] and v != w:
                head[w] = v
                weights[v].append(w)
    tf = np.where(np.isfinite(K.t), K.t, np.inf)
    chain: dict[int, list[int]] = {}  # head -> its tail nodes in order
    inside: dict[int, list[int]] = {}  # head -> the values inside its chain
    for v in range(n):  # chains: v onto the chain of its only producer, which feeds v alone
        if head[v] != v or not np.isfinite(tf[v]).any():
            continue
        live = {int(head[p]) for p in preds[v]} - {v}
        if len(live) != 1:
            continue
        u = live.pop()
        end = chain[u][-1] if chain.get(u) else u
        if {int(head[s]) for s in succs[end]} != {v} or set(preds[v]) - set(weights[v]) != {end}:
            continue
        if np.any(np.nan_to_num(tf[v], posinf=0.0) > light * np.nan_to_num(tf[u], posinf=np.inf) + TOL):
            continue
        ju, jv = out_vals[end], out_vals[v]
        if len(ju) != 1 or len(jv) > 1 or used_by[ju[0]] != {v}:
            continue
        ins = inside.get(u, []) + ju
        if jv and not _charges_ok(K, ins, jv[0]):
            continue
        chain.setdefault(u, []).append(v)
        inside[u] = ins
        for m in [v] + weights[v]:
            head[m] = u
    own_w = np.asarray(own, float).copy()
    for v in range(n):
        own_w[v] += sum(own_w[w] for w in weights[v])
    tails = _tails(n, K, chain, inside, [out_vals[c[-1]] for c in chain.values()], own_w, working_set)
    return _rebuild(head, t, allowed, pairs, val_prod, pair_val, pair_cons, recv, send, own_w, working_set, tails)


def _tails(n, K, chain, inside, outs, own, working_set) -> Tails:
    """Per node (rows of the heads used): the charges of a whole tail and the delays of a detached one."""
    ws = np.asarray(working_set, float)
    t_whole = K.t.copy()
    own_whole = own.copy()
    ws_whole = ws.copy()
    delay = np.zeros((n, 2, 2))
    edge_delay = np.zeros(n)
    has = np.zeros(n, bool)
    tmin = np.where(np.isfinite(K.t), K.t, np.inf).min(axis=1)
    for (u, tail), jv in zip(chain.items(), outs, strict=True):
        has[u] = True
        t_whole[u, ACC] = K.t[u, ACC] + K.t[tail, ACC].sum()
        own_whole[u] = own[u] + own[tail].sum()
        ws_whole[u] = max(ws[u], ws[tail].max())
        low = float(tmin[tail].sum())
        edge_delay[u] = low
        delay[u, ACC, :] = low
        r_out = float(K.recv[jv[0], CPU, ACC]) if jv else 0.0  # what a consumer's call receives anyway
        best_cpu = best_acc = float(K.t[tail, CPU].sum())  # the tail on the CPU
        prefix = 0.0
        for i, v in enumerate(tail):  # the tail enters an accelerator at v, receiving the value before it
            enter = prefix + float(K.recv[inside[u][i], CPU, ACC]) + float(tmin[tail[i:]].sum())
            best_cpu = min(best_cpu, enter)
            best_acc = min(best_acc, enter - r_out)
            prefix += float(K.t[v, CPU])
        delay[u, CPU, CPU] = best_cpu
        delay[u, CPU, ACC] = best_acc
    return Tails(has, t_whole, own_whole, ws_whole, delay, edge_delay)


def _rebuild(head, t, allowed, pairs, val_prod, pair_val, pair_cons, recv, send, own, ws, tails) -> Contracted:
    """The contracted arrays: the heads keep their rows, edges and uses between different heads survive, and
    a value is kept when a use of it survives."""
    heads = np.flatnonzero(head == np.arange(len(head)))
    new = np.full(len(head), -1, np.int64)
    new[heads] = np.arange(len(heads))
    node = new[head]
    e = sorted({(int(node[a]), int(node[b])) for a, b in pairs if node[a] != node[b]})
    src = np.array([a for a, _ in e], np.int64)
    dst = np.array([b for _, b in e], np.int64)
    vp = node[val_prod]
    ok = vp[pair_val] != node[pair_cons]
    vals = np.unique(pair_val[ok])
    renum = np.full(len(val_prod), -1, np.int64)
    renum[vals] = np.arange(len(vals))
    sub = Tails(*(getattr(tails, f)[heads] for f in Tails.__dataclass_fields__))
    return Contracted(
        t=np.asarray(t)[heads], allowed=np.asarray(allowed)[heads], edges=(src, dst), val_prod=vp[vals],
        pair_val=renum[pair_val[ok]], pair_cons=node[pair_cons[ok]], recv=np.asarray(recv)[vals],
        send=np.asarray(send)[vals], own=own[heads], working_set=np.asarray(ws, float)[heads], tails=sub, node=node)


def contracted_block_bound(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, working_set,
                           capacity, colocation) -> float:
    """:func:`.blocks.block_lower_bound` on the contracted graph (0 when nothing is folded: the plain DP
    already covers that graph)."""
    c = contract(t, allowed, is_cpu, q, edges, val_prod, pair_val, pair_cons, recv, send, own, working_set,
                 capacity, colocation)
    if len(c.t) == len(t):
        return 0.0
    return block_lower_bound(*c.args(is_cpu, q, capacity), tails=c.tails)

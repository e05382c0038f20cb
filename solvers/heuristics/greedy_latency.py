"""Greedy's latency plan: Baechi's m-ETF list scheduling, on subgraph calls, simulated exactly.

m-ETF (Jeon et al., "Baechi", 2020) takes ready operators in order of their earliest start and puts
each on the device where it finishes first, among the devices whose memory still holds it.
planmap's latency model (:mod:`planmap.evaluate`, after Tarnawski et al.) runs each accelerator's
work as *calls* — convex subgraphs that receive their inputs, compute and send their outputs, all
outputs available when the call ends — at most ``q`` calls per device; CPU operators run
individually and in parallel. So the greedy schedules calls, not operators: an operator either
extends the open call of an accelerator, opens a new call there (while the device has fewer than
``q``), or runs on a CPU. A call that someone outside it has read from is *sealed* (nothing can be
added without delaying a reader), which keeps every call convex and the call graph acyclic by
construction. The schedule is simulated exactly as the evaluator computes it — transfers charged
once per value and receiving call, the sender's charge at its most expensive destination, finish
times re-propagated when a late reader raises a sealed call's send charge — so the latency the
greedy expects is the latency :func:`planmap.evaluate.evaluate` reports.
"""

from __future__ import annotations

import heapq

import numpy as np

from planmap.crossings import crossings
from planmap.errors import InfeasibleError
from planmap.problem import Certificate, Problem, Solution, Stage

from ..node_memory import node_params, stashed_bytes
from .lazy_rows import LazyRows

__all__ = ["schedule_calls"]


def _node_inputs(problem: Problem):
    """Per node: the distinct values it reads that some node produces, and per node the parameter
    values it uses."""
    g = problem.graph
    return crossings(g, np.arange(g.num_nodes)).inputs_of(g.num_nodes), node_params(problem)


def _bottom_levels(problem: Problem) -> list[float]:
    """Longest remaining compute path from each node (fastest allowed device per node)."""
    g = problem.graph
    t = np.where(problem.allowed, problem.cost.device_compute, np.inf).min(axis=1)
    t = np.where(np.isfinite(t), t, 0.0).tolist()
    indptr, ids = g.succ
    ip, il = indptr.tolist(), ids.tolist()
    bl = [0.0] * g.num_nodes
    for v in range(g.num_nodes - 1, -1, -1):
        m = 0.0
        for s in il[ip[v]: ip[v + 1]]:
            if bl[s] > m:
                m = bl[s]
        bl[v] = t[v] + m
    return bl


class _CallSchedule:
    """The exact latency simulation of calls (see the module docstring)."""

    def __init__(self, problem: Problem):
        self.p = problem
        topo, cost, g = problem.topology, problem.cost, problem.graph
        self.D = topo.num_devices
        self.is_cpu = topo.is_cpu.tolist()
        # units
        self.dev: list[int] = []
        self.cpu: list[bool] = []
        self.start: list[float] = []
        self.dur: list[float] = []
        self.fin: list[float] = []
        self.preds: list[dict[int, float]] = []
        self.succs: list[list[int]] = []
        self.rank: list[int] = []  # seal order; -1 = unsealed (nothing depends on it yet)
        self.n_sealed = 0
        self.open = [-1] * self.D  # the last call on each accelerator
        self.calls = [0] * self.D
        self.unit_of = [-1] * g.num_nodes
        self.recv_seen: set[tuple[int, int]] = set()
        self.send: dict[tuple[int, int], float] = {}
        # memory
        self.factor = cost.param_factor
        self.params: list[set[int]] = [set() for _ in range(self.D)]
        self.mem_fixed = [0.0] * self.D  # parameters + state + stash
        self.ws = [0.0] * self.D
        self.reserved = [0.0] * self.D
        self.cap = problem.capacity.tolist()
        self.state = g.state_bytes.astype(float).tolist()
        self.stash = stashed_bytes(problem).tolist()
        self.wset = cost.working_set.astype(float).tolist()
        self.vbytes_f = g.value_bytes.astype(float).tolist()
        self.vtime = g.value_time.tolist()
        # rows on demand: D x D lists up front would cost seconds and GBs on thousands of devices
        self.r_paid, self.r_lat, self.r_ibw = LazyRows(topo.recv_paid), LazyRows(topo.recv_lat), LazyRows(topo.recv_ibw)
        self.s_paid, self.s_lat, self.s_ibw = LazyRows(topo.send_paid), LazyRows(topo.send_lat), LazyRows(topo.send_ibw)
        self.host_io_l = topo.host_io.tolist()
        self.host_lat, self.host_ibw = topo.host_lat, topo.host_ibw

    # ---- units
    def new_unit(self, d: int) -> int:
        u = len(self.dev)
        self.dev.append(d)
        self.cpu.append(self.is_cpu[d])
        self.start.append(0.0)
        self.dur.append(0.0)
        self.fin.append(0.0)
        self.preds.append({})
        self.succs.append([])
        self.rank.append(-1)
        return u

    def add_edge(self, a: int, b: int, delay: float) -> None:
        old = self.preds[b].get(a)
        if old is None:
            self.preds[b][a] = delay
            self.succs[a].append(b)
            if self.rank[a] < 0:
                self.rank[a] = self.n_sealed
                self.n_sealed += 1
        elif delay > old:
            self.preds[b][a] = delay

    def propagate(self, changed) -> None:
        """Recompute start/finish of ``changed`` units and everything downstream, in seal order."""
        big = 1 << 60
        heap = [(self.rank[u] if self.rank[u] >= 0 else big + u, u) for u in set(changed)]
        heapq.heapify(heap)
        queued = {u for _, u in heap}
        while heap:
            _, u = heapq.heappop(heap)
            queued.discard(u)
            s = 0.0
            for a, w in self.preds[u].items():
                f = self.fin[a] + w
                if f > s:
                    s = f
            f = s + self.dur[u]
            moved = f != self.fin[u] or s != self.start[u]
            self.start[u], self.fin[u] = s, f
            if moved:
                for b in self.succs[u]:
                    if b not in queued:
                        queued.add(b)
                        heapq.heappush(heap, (self.rank[b] if self.rank[b] >= 0 else big + b, b))

    # ---- memory
    def mem_after(self, d: int, node: int, params: list[int]) -> float:
        new_p = sum(self.vbytes_f[v] for v in params if v not in self.params[d]) * self.factor
        return (self.mem_fixed[d] + new_p + self.state[node] + self.stash[node] + max(self.ws[d], self.wset[node]))

    def add_memory(self, d: int, node: int, params: list[int]) -> None:
        for v in params:
            if v not in self.params[d]:
                self.params[d].add(v)
                self.mem_fixed[d] += self.vbytes_f[v] * self.factor
        self.mem_fixed[d] += self.state[node] + self.stash[node]
        self.ws[d] = max(self.ws[d], self.wset[node])

    def memory(self) -> np.ndarray:
        return np.asarray(self.mem_fixed) + np.asarray(self.ws)


def _charges(sim: _CallSchedule, vals: list[int], pdev: list[int]):
    """Per input value, the receive and send charges if it is read on each device (lists k x D), by
    the subgraph-call rules: between two calls of one host-memory device both ends pay the host link;
    a measured transfer time replaces the bytes-based estimate wherever a charge is paid."""
    recv, send = [], []
    D = sim.D
    for v, a in zip(vals, pdev, strict=True):
        t = sim.vtime[v]
        nbytes = sim.vbytes_f[v]
        measured = t == t
        rp, rl, ri = sim.r_paid[a], sim.r_lat[a], sim.r_ibw[a]
        sp, sl, si = sim.s_paid[a], sim.s_lat[a], sim.s_ibw[a]
        r = [(t if measured else rl[d] + nbytes * ri[d]) if rp[d] else 0.0 for d in range(D)]
        s = [(t if measured else sl[d] + nbytes * si[d]) if sp[d] else 0.0 for d in range(D)]
        if sim.host_io_l[a]:
            io = t if measured else sim.host_lat + nbytes * sim.host_ibw
            r[a] = s[a] = io
        recv.append(r)
        send.append(s)
    return recv, send


def schedule_calls(problem: Problem, certificate: Certificate) -> tuple[Solution, float]:
    """The m-ETF call schedule: its Solution (carrying ``certificate``) and the latency it predicts
    (= evaluate's)."""
    g = problem.graph
    n = g.num_nodes
    q = problem.max_subgraphs
    sim = _CallSchedule(problem)
    ins, params = _node_inputs(problem)
    bl = _bottom_levels(problem)
    dc = problem.cost.device_compute.tolist()
    allowed = problem.allowed
    producer = g.value_node.tolist()
    cls = g.colocation.tolist()
    class_dev: dict[int, int] = {}
    # colocation: bytes a class still needs on its device once its first member is placed
    need = [sim.state[i] + sim.stash[i] + sum(float(g.value_bytes[v]) for v in params[i]) * sim.factor
            for i in range(n)]
    class_left: dict[int, float] = {}
    for i in range(n):
        if cls[i] >= 0:
            class_left[cls[i]] = class_left.get(cls[i], 0.0) + need[i]
    indptr, ids = g.pred
    npred = np.diff(indptr).tolist()
    sindptr, sids = g.succ
    sp, sl = sindptr.tolist(), sids.tolist()
    ready = [(0.0, -bl[v], v) for v in range(n) if npred[v] == 0]
    heapq.heapify(ready)
    while ready:
        _, _, w = heapq.heappop(ready)
        vals = ins[w]
        pu = [sim.unit_of[producer[v]] for v in vals]
        pdev = [sim.dev[u] for u in pu]
        recv, send = _charges(sim, vals, pdev) if vals else ([], [])
        forced = class_dev.get(cls[w]) if cls[w] >= 0 else None
        cands = [forced] if forced is not None else np.flatnonzero(allowed[w]).tolist()
        best = None  # ((finish, kind, device), kind, device, call to extend)
        for relax in (0, 1, 2):  # 0: strict; 1: ignore memory; 2: also allow more than q calls
            for d in cands:
                extra = 0.0
                if forced is None and cls[w] >= 0:
                    extra = class_left[cls[w]] - need[w]
                over = sim.mem_after(d, w, params[w]) + sim.reserved[d] + extra > sim.cap[d] * (1 + 1e-12)
                if forced is not None:
                    over = False  # reserved when the class was placed
                if over and relax == 0:
                    continue
                opts = []
                if sim.is_cpu[d]:
                    opts.append((1, -1))
                else:
                    u = sim.open[d]
                    if u >= 0 and sim.rank[u] < 0:
                        opts.append((0, u))
                    if sim.calls[d] < q or relax == 2:
                        opts.append((2, -1))
                for kind, target in opts:
                    f = _finish(sim, w, d, kind, target, vals, pu, recv, send, dc[w][d])
                    key = (f, kind, d)
                    if best is None or key < best[0]:
                        best = (key, kind, d, target)
            if best is not None:
                break
        if best is None:
            raise InfeasibleError(f"{problem.name}: operator {g.op_name[w]!r} can run on no device")
        _, kind, d, target = best
        _apply(sim, w, d, kind, target, vals, pu, recv, send, dc[w][d], params[w])
        if cls[w] >= 0:
            if forced is None:
                class_dev[cls[w]] = d
                sim.reserved[d] += class_left[cls[w]] - need[w]
            else:
                sim.reserved[d] = max(0.0, sim.reserved[d] - need[w])
        for s in sl[sp[w]: sp[w + 1]]:
            npred[s] -= 1
            if npred[s] == 0:
                rt = max((sim.fin[sim.unit_of[p]] for p in g.predecessors(s).tolist()), default=0.0)
                heapq.heappush(ready, (rt, -bl[s], s))
    expected = max(sim.fin, default=0.0)
    return _to_solution(problem, sim, n, certificate), expected


def _finish(sim: _CallSchedule, w, d, kind, target, vals, pu, recv, send, t) -> float:
    """Finish time of ``w`` for one option (0: extend call ``target``; 1: CPU; 2: new call), with the
    producers' raised send charges; effects further downstream are left to the exact update."""
    same_unit = target if kind == 0 else -2
    extra: dict[int, float] = {}
    recv_add = 0.0
    ready = 0.0
    for i, v in enumerate(vals):
        u = pu[i]
        if u == same_unit:
            continue
        if not sim.cpu[u]:
            old = sim.send.get((v, u), 0.0)
            if send[i][d] > old:
                extra[u] = extra.get(u, 0.0) + send[i][d] - old
        if kind == 1:
            r = recv[i][d]
        else:
            r = 0.0
            if kind == 2 or (v, target) not in sim.recv_seen:
                recv_add += recv[i][d]
        f = sim.fin[u] + r
        if f > ready:
            ready = f
    for u, e in extra.items():
        f = sim.fin[u] + e
        if f > ready:
            ready = f
    if kind == 1:
        return ready + t
    if kind == 0:
        return max(sim.start[target], ready) + sim.dur[target] + t + recv_add
    prev = sim.open[d]
    free = sim.fin[prev] if prev >= 0 else 0.0
    return max(free, ready) + t + recv_add


def _apply(sim: _CallSchedule, w, d, kind, target, vals, pu, recv, send, t, params) -> None:
    if kind == 0:
        c = target
    else:
        c = sim.new_unit(d)
        if kind == 2:
            prev = sim.open[d]
            if prev >= 0:
                sim.add_edge(prev, c, 0.0)
            sim.open[d] = c
            sim.calls[d] += 1
    sim.unit_of[w] = c
    changed = {c}
    for i, v in enumerate(vals):
        u = pu[i]
        if u == c:
            continue
        delay = recv[i][d] if sim.cpu[c] else 0.0
        if (v, c) not in sim.recv_seen:
            sim.recv_seen.add((v, c))
            if not sim.cpu[c]:
                sim.dur[c] += recv[i][d]
        sim.add_edge(u, c, delay)
        if not sim.cpu[u]:
            old = sim.send.get((v, u), 0.0)
            if send[i][d] > old:
                sim.send[(v, u)] = send[i][d]
                sim.dur[u] += send[i][d] - old
                changed.add(u)
    sim.dur[c] += t
    sim.add_memory(d, w, params)
    sim.propagate(changed)


def _to_solution(problem: Problem, sim: _CallSchedule, n: int, certificate: Certificate) -> Solution:
    """Accelerator calls become stages in start order; each CPU device's operators one stage."""
    stage_key = {}
    for u in range(len(sim.dev)):
        key = ("cpu", sim.dev[u]) if sim.cpu[u] else ("call", u)
        if key not in stage_key:
            stage_key[key] = (sim.start[u], u)
        else:
            stage_key[key] = min(stage_key[key], (sim.start[u], u))
    keys = sorted(stage_key, key=lambda k: stage_key[k])
    index = {k: i for i, k in enumerate(keys)}
    stages = tuple(Stage((sim.dev[k[1]] if k[0] == "call" else k[1],)) for k in keys)
    assignment = np.empty(n, np.int32)
    for v in range(n):
        u = sim.unit_of[v]
        assignment[v] = index[("cpu", sim.dev[u]) if sim.cpu[u] else ("call", u)]
    return Solution(assignment, stages, certificate)

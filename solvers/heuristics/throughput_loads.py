"""An incremental version of the evaluator's throughput load model, for local search.

:func:`planmap.evaluate.evaluate` recomputes a whole plan; a local search tries thousands of single
moves, so it needs each move's effect in O(degree). :class:`ThroughputLoads` keeps per-device loads
and memory of a device assignment (one stage per device) and updates them per move, undoably; every
move the search accepts is still confirmed by ``evaluate``.
"""

from __future__ import annotations

import numpy as np

from planmap.crossings import crossings
from planmap.problem import Problem
from planmap.vocabulary import ThroughputVariant

from ..node_memory import node_params, stashed_bytes
from .lazy_rows import LazyRows

__all__ = ["ThroughputLoads"]


class ThroughputLoads:
    """Per-device pipeline load and memory of a device assignment, updated per move.

    Mirrors the evaluator's throughput model for single-device stages: compute of the device's
    nodes; per value crossing devices, the receiver pays once per value and the producer's device
    once, at its most expensive destination; forward/backward split by the producing node; memory =
    parameters used (x training factor) + state + stashed activations x in-flight microbatches +
    the largest working set.
    """

    def __init__(self, problem: Problem, device_of: np.ndarray, in_flight: np.ndarray | None = None):
        g, cost, topo = problem.graph, problem.cost, problem.topology
        self.problem = problem
        n, D = g.num_nodes, topo.num_devices
        self.D = D
        self.dev = [int(d) for d in device_of]
        self.dc = cost.device_compute.tolist()
        self.back = g.backward.tolist()
        reads = crossings(g, np.arange(n))  # every (value, reading node) pair
        self.prod = g.value_node.tolist()
        self.consumers: dict[int, list[int]] = {}
        for v, c in reads.pairs.tolist():
            self.consumers.setdefault(v, []).append(c)
        self.inputs = reads.inputs_of(n)
        self.outputs: list[list[int]] = [[] for _ in range(n)]
        for v in self.consumers:
            self.outputs[self.prod[v]].append(v)
        # transfer charges: measured time or latency + bytes / bandwidth, where paid
        self.vbytes = g.value_bytes.astype(float).tolist()
        self.vtime = g.value_time.tolist()
        # rows on demand: D x D lists up front would cost seconds and GBs on thousands of devices
        self.r_lat, self.r_ibw, self.r_paid = LazyRows(topo.recv_lat), LazyRows(topo.recv_ibw), LazyRows(topo.recv_paid)
        self.s_lat, self.s_ibw, self.s_paid = LazyRows(topo.send_lat), LazyRows(topo.send_ibw), LazyRows(topo.send_paid)
        self.fw = [0.0] * D
        self.bw = [0.0] * D
        for v_, d in enumerate(self.dev):
            (self.bw if self.back[v_] else self.fw)[d] += self.dc[v_][d]
        self.count: dict[int, dict[int, int]] = {}
        self.charge: dict[int, list[tuple[int, float, bool]]] = {}
        for v, cs in self.consumers.items():
            cnt: dict[int, int] = {}
            for c in cs:
                cnt[self.dev[c]] = cnt.get(self.dev[c], 0) + 1
            self.count[v] = cnt
            self._charge(v, +1)
        # memory
        self.factor = cost.param_factor
        self.params = node_params(problem)
        self.state = g.state_bytes.astype(float).tolist()
        self.stash = stashed_bytes(problem).tolist()
        self.wset = cost.working_set.astype(float)
        self.pcount: list[dict[int, int]] = [{} for _ in range(D)]
        self.pbytes = [0.0] * D
        self.fixed = [0.0] * D
        self.stashed = [0.0] * D
        for v_, d in enumerate(self.dev):
            self._mem(v_, d, +1)
        dev = np.asarray(self.dev)
        self.ws = [float(self.wset[dev == d].max()) if (dev == d).any() else 0.0 for d in range(D)]
        self.wset_l = self.wset.tolist()
        self.in_flight = np.ones(D) if in_flight is None else np.asarray(in_flight, float)
        self.cap = problem.capacity.tolist()

    # -------------------------------------------------------------------------------- charges
    def _cost(self, v: int, a: int, b: int, recv: bool) -> float:
        if recv:
            if not self.r_paid[a][b]:
                return 0.0
            t = self.vtime[v]
            return t if t == t else self.r_lat[a][b] + self.vbytes[v] * self.r_ibw[a][b]
        if not self.s_paid[a][b]:
            return 0.0
        t = self.vtime[v]
        return t if t == t else self.s_lat[a][b] + self.vbytes[v] * self.s_ibw[a][b]

    def _charge(self, v: int, sign: int) -> None:
        """Add (sign=+1, recording) or remove (-1, from the record) the transfer charges of value v."""
        if sign < 0:
            for d, amount, bwd in self.charge.pop(v, ()):
                (self.bw if bwd else self.fw)[d] -= amount
            return
        p = self.dev[self.prod[v]]
        bwd = self.back[self.prod[v]]
        rec = []
        send = 0.0
        for d, c in self.count[v].items():
            if c and d != p:
                r = self._cost(v, p, d, True)
                if r:
                    rec.append((d, r, bwd))
                s = self._cost(v, p, d, False)
                if s > send:
                    send = s
        if send:
            rec.append((p, send, bwd))
        for d, amount, b in rec:
            (self.bw if b else self.fw)[d] += amount
        self.charge[v] = rec

    def _mem(self, v: int, d: int, sign: int) -> None:
        pc = self.pcount[d]
        for p in self.params[v]:
            c = pc.get(p, 0) + sign
            if c == 0:
                del pc[p]
                self.pbytes[d] -= self.vbytes[p]
            else:
                if c == 1 and sign > 0:
                    self.pbytes[d] += self.vbytes[p]
                pc[p] = c
        self.fixed[d] += sign * self.state[v]
        self.stashed[d] += sign * self.stash[v]

    # ---------------------------------------------------------------------------------- moves
    def move(self, nodes, e: int) -> list[tuple[int, int]]:
        """Move ``nodes`` to device ``e``; returns what :meth:`undo` needs."""
        touched = set()
        for v in nodes:
            touched.update(self.inputs[v])
            touched.update(self.outputs[v])
        for v in touched:
            self._charge(v, -1)
        old = []
        for v in nodes:
            a = self.dev[v]
            if a == e:
                continue
            old.append((v, a))
            for val in self.inputs[v]:
                cnt = self.count[val]
                cnt[a] -= 1
                cnt[e] = cnt.get(e, 0) + 1
            t = self.dc[v]
            if self.back[v]:
                self.bw[a] -= t[a]
                self.bw[e] += t[e]
            else:
                self.fw[a] -= t[a]
                self.fw[e] += t[e]
            self._mem(v, a, -1)
            self._mem(v, e, +1)
            self.dev[v] = e
            w = self.wset_l[v]
            if self.ws[e] >= 0 and w > self.ws[e]:
                self.ws[e] = w
            if w >= self.ws[a]:
                self.ws[a] = -1.0  # unknown: recomputed when asked
        for v in touched:
            self._charge(v, +1)
        return old

    def undo(self, old) -> None:
        for v, a in reversed(old):
            self.move([v], a)

    def _ws(self, d: int) -> float:
        if self.ws[d] < 0:
            dev = np.asarray(self.dev)
            on = dev == d
            self.ws[d] = float(self.wset[on].max()) if on.any() else 0.0
        return self.ws[d]

    def memory(self, d: int) -> float:
        return self.pbytes[d] * self.factor + self.fixed[d] + self.stashed[d] * self.in_flight[d] + self._ws(d)

    def fits(self, d: int) -> bool:
        return self.memory(d) <= self.cap[d] * (1 + 1e-12)

    def key(self) -> tuple[float, float]:
        """(objective, sum of squared loads): the second breaks ties on a plateau of the maximum."""
        if self.problem.variant is ThroughputVariant.MAX_FW_PLUS_MAX_BW:
            obj = max(self.fw) + max(self.bw)
        else:
            obj = max(f + b for f, b in zip(self.fw, self.bw, strict=True))
        return obj, sum((f + b) ** 2 for f, b in zip(self.fw, self.bw, strict=True))

    def loads(self) -> np.ndarray:
        return np.asarray(self.fw) + np.asarray(self.bw)

"""Observation features that transfer across models and clusters.

Everything is a ratio, so one network serves graphs of any size and clusters of any speed: times are
divided by the *ideal load* (the model's compute on its fastest devices spread evenly over every device),
bytes by the device's usable memory, counts by the number of groups or devices. Per layer group: compute,
parameter / stashed-activation / working-set bytes, the time to send what crosses the cut after it, its
op-kind mix (matmul and convolution, elementwise, reductions, data movement), its position; the next
few groups the same way; the open stage (load per replica, memory, replicas); what is left (groups,
devices, compute per device left, whether the rest fits fresh stages); the cluster (devices, hosts,
devices per host, network vs intra-host link, schedule, microbatches); the devices a cut takes next (the
next accelerator's and CPU's speed on the group relative to the fastest device, the time to send the cut to
a CPU, the CPU's memory: what a CPU + accelerator cluster turns on) and the action mask.
"""

from __future__ import annotations

import math

import numpy as np

from planmap.vocabulary import Mode, Schedule

from .space import NUM_ACTIONS, Partial, PipelineSpace

__all__ = ["Features", "OBS_DIM", "LOOKAHEAD"]

LOOKAHEAD = 3
_KIND_BUCKETS = (("dot", "convolution"), ("add", "multiply", "subtract", "divide", "exp", "tanh", "maximum",
                                          "negate", "rsqrt", "sqrt", "log", "logistic", "select", "compare"),
                 ("reduce",))
_GROUP = 9  # compute, params, stash, ws, cut, 4 kind shares
_DEVICE = 4  # next accelerator's and next CPU's speed on the group, cut time to a CPU, CPU memory
OBS_DIM = _GROUP + 2 * LOOKAHEAD + 4 + 5 + 9 + _DEVICE + NUM_ACTIONS


def _kind_bucket(kind: str) -> int:
    for i, words in enumerate(_KIND_BUCKETS):
        if any(w in kind for w in words):
            return i
    return len(_KIND_BUCKETS)


def sp_pair(space: PipelineSpace) -> tuple[int, int] | None:
    """The first two accelerators of the canonical order (the link a cut between accelerators takes)."""
    return (space.order[0], space.order[1]) if len(space.order) >= 2 else None


class Features:
    """Per-problem constants and the observation of a partial plan."""

    def __init__(self, space: PipelineSpace):
        self.space = space
        p = space.problem
        g, cost = p.graph, p.cost
        G, D = space.num_groups, max(1, len(space.order) + len(space.cpus))
        comp = np.where(np.isfinite(space.compute), space.compute, np.inf)
        best = comp.min(axis=1) if comp.size else np.zeros(G)
        best = np.where(np.isfinite(best), best, 0.0)
        self.ideal = max(float(best.sum()) / D, 1e-12)
        self.group_compute = best / self.ideal
        cap = float(np.median(space.capacity)) if len(space.capacity) else math.inf
        self.cap = cap if math.isfinite(cap) and cap > 0 else 1e18
        self.group_params = np.array([space._param_bytes(ps) for ps in space.params]) / self.cap
        self.group_stash = space.stash / self.cap
        self.group_ws = space.ws / self.cap
        self.best = np.maximum(best, 1e-30)
        self.cut = self._cut_times(sp_pair(space)) / self.ideal
        self.cut_cpu = self._cut_times((space.order[0], space.cpus[0])) / self.ideal if (
            space.order and space.cpus) else np.zeros(G)
        mix = np.zeros((G, len(_KIND_BUCKETS) + 1))
        first = (space.order or space.cpus or [0])[0]
        t = cost.device_compute[:, first] if p.num_devices else np.zeros(g.num_nodes)
        t = np.where(np.isfinite(t), t, 0.0)
        buckets = np.array([_kind_bucket(k) for k in g.kind], np.int64)
        np.add.at(mix, (space.group_of, buckets), t)
        self.mix = mix / np.maximum(mix.sum(axis=1, keepdims=True), 1e-30)
        topo = p.topology
        hosts = sorted(set(space.host_of))
        per_host = max(space.host_of.count(h) for h in hosts) if hosts else 1
        ratio = 1.0
        if len(space.order) >= 2:
            a, b = space.order[0], space.order[1]
            other = [d for d, h in zip(space.order, space.host_of, strict=True) if h != space.host_of[0]]
            intra = float(topo.recv_ibw[a, b] + topo.send_ibw[a, b])
            if other:
                inter = float(topo.recv_ibw[a, other[0]] + topo.send_ibw[a, other[0]])
                ratio = (inter + 1e-30) / (intra + 1e-30)
        self.cluster = np.array([
            math.log2(D) / 6, len(hosts) / 4, per_host / 16, math.log10(max(ratio, 1e-3)) / 3,
            float(p.mode is Mode.TRAINING), float(p.schedule is Schedule.ONE_F_ONE_B),
            math.log2(max(p.microbatches, 1)) / 4, float(p.replication), float(space.spmd_ok)], np.float32)

    def _cut_times(self, pair: tuple[int, int] | None) -> np.ndarray:
        """Seconds to move what crosses the cut after each group, between the devices of ``pair``."""
        sp = self.space
        p = sp.problem
        g = p.graph
        G = sp.num_groups
        out = np.zeros(G)
        if G < 2 or pair is None:
            return out
        src = g.edge_src
        keep = src >= 0
        vals, dst = g.edge_value[keep], g.edge_dst[keep]
        pg, cg = sp.group_of[g.value_node[vals]], sp.group_of[dst]
        lo, hi = np.minimum(pg, cg), np.maximum(pg, cg)
        cross = lo < hi
        vals, lo, hi = vals[cross], lo[cross], hi[cross]
        if not len(vals):
            return out
        uv, inv = np.unique(vals, return_inverse=True)
        vlo = np.full(len(uv), G, np.int64)
        vhi = np.zeros(len(uv), np.int64)
        np.minimum.at(vlo, inv, lo)
        np.maximum.at(vhi, inv, hi)
        a, b = pair
        secs = p.cost.recv_cost(uv, np.full(len(uv), a), np.full(len(uv), b)) + \
            p.cost.send_cost(uv, np.full(len(uv), a), np.full(len(uv), b))
        diff = np.zeros(G + 1)
        np.add.at(diff, vlo, secs)
        np.add.at(diff, vhi, -secs)
        return np.cumsum(diff)[:G]

    def _group(self, t: int) -> np.ndarray:
        if t >= self.space.num_groups:
            return np.zeros(_GROUP, np.float32)
        return np.concatenate([[self.group_compute[t], self.group_params[t], self.group_stash[t], self.group_ws[t],
                                self.cut[t]], self.mix[t]]).astype(np.float32)

    def _devices(self, s: Partial, t: int) -> np.ndarray:
        """How the devices a cut would take next compare on group ``t``: the next accelerator's and the next
        CPU's compute relative to the fastest device (log2), the time to send the cut after ``t`` to a CPU
        (ideal loads), and the next CPU's memory relative to the median device's (log10)."""
        sp = self.space
        out = np.zeros(_DEVICE, np.float32)
        if t >= sp.num_groups:
            return out
        if s.pointer < len(sp.order):
            out[0] = math.log2(max(float(sp.compute[t, sp.order[s.pointer]]) / self.best[t], 1e-3)) / 4
        if s.cpus < len(sp.cpus):
            cpu = sp.cpus[s.cpus]
            out[1] = math.log2(max(float(sp.compute[t, cpu]) / self.best[t], 1e-3)) / 4
            out[2] = self.cut_cpu[t]
            out[3] = math.log10(max(min(float(sp.capacity[cpu]) / self.cap, 1e6), 1e-3)) / 3
        else:
            out[1] = -1.0
        return out

    def observe(self, s: Partial, mask: np.ndarray) -> np.ndarray:
        sp = self.space
        G, D = max(sp.num_groups, 1), max(len(sp.order) + len(sp.cpus), 1)
        t = min(s.next_group, G - 1)
        ahead = []
        for j in range(1, LOOKAHEAD + 1):
            u = s.next_group + j
            ahead += [self.group_compute[u], self.cut[u]] if u < sp.num_groups else [0.0, 0.0]
        reps = len(s.devices[-1]) if s.num_stages else 0
        mem = 0.0
        if s.num_stages:
            mem = sp.stage_memory(s.params, s.fixed, s.stash, s.ws, 1) / self.cap
        open_stage = [s.compute / self.ideal / max(reps, 1), mem, math.log2(reps) / 6 if reps else -0.2,
                      s.num_stages / D]
        left = sp.devices_left(s)
        rest = float(self.group_compute[s.next_group:].sum())
        fresh = float(sp.ok[s.next_group, s.pointer, len(sp.cpus) - s.cpus])  # the rest fits fresh stages
        position = [s.next_group / G, left / D, rest / max(left, 0.5) / 4, (G - s.next_group) / G,
                    fresh]
        obs = np.concatenate([self._group(t), np.asarray(ahead, np.float32), np.asarray(open_stage, np.float32),
                              np.asarray(position, np.float32), self.cluster, self._devices(s, t),
                              mask.astype(np.float32)])
        return np.clip(np.nan_to_num(obs, nan=0.0, posinf=10.0, neginf=-10.0), -10.0, 10.0).astype(np.float32)

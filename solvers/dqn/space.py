"""The DQN's decision space: layer groups walked in order, each continuing the current stage or cutting to
a new stage on the next submesh, plus whole-plan SPMD baselines at the first step.

Layer groups are ranges of one topological order of the forward nodes of the coarsened graph (a range of a
topological order is convex, so every plan of this space is a contiguous pipeline), cut at layer
boundaries where the graph has layers and never inside a colocation class; a backward node goes with its
colocation partner (in training a layer's forward with its backward), an orphan with its latest forward
producer. Submeshes are taken from the accelerators in a canonical order (host by host): ``k`` devices
within one host (``k`` a power of two) or whole hosts, used as replicas (data parallel inside the stage,
what ``evaluate`` judges today). Taking devices in one canonical order is the symmetry pruning: plans that
differ only by which of several interchangeable devices a stage uses are one plan. Sharded stages (issue 13)
plug in later as more cut actions (a submesh and a sharding strategy).

Masks (:meth:`PipelineSpace.mask`) rule out what ``evaluate`` would reject — memory (with the most
microbatches in flight the stage's position allows), divisibility of the microbatch over replicas, devices
left (and enough left for the groups that remain, by greedy packing), pins (``allowed``), ``maxStages``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planmap.problem import Certificate, Problem, Solution, Stage, Status

__all__ = ["PipelineSpace", "Partial", "SIZES", "BASELINE_ACTIONS", "NUM_ACTIONS", "CONTINUE", "CPU", "action_name"]

SIZES = (1, 2, 4, 8, 16, 32, 64)  # submesh sizes a cut may take (a fixed vocabulary: the net's outputs)
BASELINE_ACTIONS = ("data-parallel", "fsdp", "megatron")  # whole-plan SPMD actions at the first step
CONTINUE = 0
CPU = 1 + len(SIZES)  # cut to a new stage on the next unused CPU (CPUs stand outside the accelerator order)
NUM_ACTIONS = 2 + len(SIZES) + len(BASELINE_ACTIONS)


def action_name(a: int) -> str:
    if a == CONTINUE:
        return "continue"
    if a <= len(SIZES):
        return f"cut x{SIZES[a - 1]}"
    if a == CPU:
        return "cut cpu"
    return BASELINE_ACTIONS[a - 2 - len(SIZES)]


@dataclass
class Partial:
    """Decisions so far: the start group and devices of each stage; ``next_group`` is the one to decide."""

    starts: list[int] = field(default_factory=list)
    devices: list[tuple[int, ...]] = field(default_factory=list)
    next_group: int = 0
    pointer: int = 0  # next free position in the canonical accelerator order
    cpus: int = 0  # CPUs used
    params: set = field(default_factory=set)  # parameter values of the open stage
    fixed: float = 0.0  # open stage: state bytes + parameter bytes (x factor)
    stash: float = 0.0
    ws: float = 0.0
    compute: float = 0.0  # open stage: seconds on one of its devices

    @property
    def num_stages(self) -> int:
        return len(self.starts)

    def copy(self) -> Partial:
        return Partial(list(self.starts), list(self.devices), self.next_group, self.pointer, self.cpus,
                       set(self.params), self.fixed, self.stash, self.ws, self.compute)


def _groups(problem: Problem, max_groups: int, must: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Forward node ids in order and the group id of each forward position: cuts at layer changes, topped up
    with cuts at about equal compute inside layers while there are fewer than ``max_groups``
    (never inside a colocation class), and at the positions ``must`` (the cuts of a coarser grouping, so that
    every plan of the coarser space is a plan of this one)."""
    g = problem.graph
    fwd = np.flatnonzero(~g.backward) if g.backward.any() else np.arange(g.num_nodes)
    n = len(fwd)
    pos = np.full(g.num_nodes, -1, np.int64)
    pos[fwd] = np.arange(n)
    ok = np.ones(n + 1, bool)  # ok[p]: a cut before position p is allowed
    ok[0] = ok[n] = False
    cls = g.colocation[fwd]
    for c in np.unique(cls[cls >= 0]):
        p = np.flatnonzero(cls == c)
        ok[p.min() + 1: p.max() + 1] = False
    layer = g.layer[fwd]
    change = np.zeros(n + 1, bool)
    if (layer >= 0).any():
        change[1:n] = layer[1:] != layer[:-1]
    change &= ok
    work = problem.cost.device_compute[fwd].min(axis=1) if problem.num_devices else np.zeros(n)
    work = np.where(np.isfinite(work), work, 0.0) + 1e-12
    cum = np.concatenate([[0.0], np.cumsum(work)])
    layers = np.flatnonzero(change)
    if len(layers) >= max_groups - 1:  # enough layer boundaries: cut only there
        cand, budget, cuts = layers, max_groups - 1, []
    else:  # every layer boundary, and equal-compute cuts inside the layers up to the budget
        cand, budget, cuts = np.flatnonzero(ok & ~change), max_groups - 1 - len(layers), layers.tolist()
    if len(cand) and budget > 0:
        targets = cum[-1] * np.arange(1, budget + 1) / (budget + 1)
        picks = cand[np.clip(np.searchsorted(cum[cand], targets), 0, len(cand) - 1)]
        cuts = sorted(set(cuts) | set(picks.tolist()))
    cuts = sorted(set(cuts) | {int(c) for c in must if ok[c]})
    gid = np.zeros(n, np.int64)
    for c in cuts:
        gid[c:] += 1
    return fwd, gid


class PipelineSpace:
    """Groups, device order and per-group costs of one problem; masks and plans from decisions."""

    def __init__(self, problem: Problem, max_groups: int = 32, must_cuts: tuple[int, ...] = ()):
        self.problem = problem
        g, cost, topo = problem.graph, problem.cost, problem.topology
        fwd, gid = _groups(problem, max_groups, must_cuts)
        self.num_groups = int(gid.max()) + 1 if len(gid) else 0
        self.cut_positions = tuple(int(c) for c in np.flatnonzero(np.diff(gid)) + 1)
        self.group_start = (0, *self.cut_positions) if len(gid) else ()  # forward positions where groups start
        group_of = np.full(g.num_nodes, -1, np.int64)
        group_of[fwd] = gid
        cls = g.colocation
        if g.backward.any():
            first: dict[int, int] = {}
            for v in fwd.tolist():
                if cls[v] >= 0:
                    first.setdefault(int(cls[v]), group_of[v])
            pind, pids = g.pred
            for v in np.flatnonzero(g.backward).tolist():  # partner's group, else latest forward producer
                c = int(cls[v])
                if c in first:
                    group_of[v] = first[c]
            for v in np.flatnonzero(group_of < 0).tolist():
                preds = [group_of[p] for p in pids[pind[v]: pind[v + 1]].tolist() if group_of[p] >= 0]
                group_of[v] = max(preds) if preds else self.num_groups - 1
        self.group_of = group_of
        self.members = [np.flatnonzero(group_of == k) for k in range(self.num_groups)]
        # canonical accelerator order: host by host; CPUs apart (a stage on a CPU may come anywhere)
        accs = [int(d) for d in topo.accelerators]
        self.order = sorted(accs, key=lambda d: (int(topo.device_host[d]), d))
        self.cpus = [int(d) for d in topo.cpus]
        self.host_of = [int(topo.device_host[d]) for d in self.order]
        self.type_of = [topo.signature(d) for d in self.order]
        D = topo.num_devices
        self.compute = np.zeros((self.num_groups, D))  # per group and device id
        np.add.at(self.compute, group_of, cost.device_compute)
        self.allowed = np.ones((self.num_groups, D), bool)
        np.logical_and.at(self.allowed, group_of, problem.allowed)
        pv, pn = cost.param_use
        self.params: list[set[int]] = [set() for _ in range(self.num_groups)]
        for v, node in zip(pv.tolist(), pn.tolist(), strict=True):
            self.params[group_of[node]].add(v)
        self.value_bytes = g.value_bytes
        self._param_memo: dict[frozenset, float] = {}
        self.param_factor = cost.param_factor
        self.state = np.array([g.state_bytes[m].sum() for m in self.members], float)
        self.stash = np.array([cost.stash_bytes[m].sum() for m in self.members], float)
        self.ws = np.array([cost.working_set[m].max() if len(m) else 0 for m in self.members], float)
        self.capacity = np.asarray(problem.capacity, float)  # per device id
        self.ok = self._completable()
        self._masks: dict[tuple, np.ndarray] = {}
        self._blocks: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self._slowest: dict[tuple[int, ...], np.ndarray] = {}

    def slowest(self, devs: tuple[int, ...]) -> np.ndarray:
        """Per group: its compute on the slowest of ``devs`` (a stage's replicas wait for the slowest)."""
        got = self._slowest.get(devs)
        if got is None:
            got = self._slowest[devs] = self.compute[:, list(devs)].max(axis=1)
        return got

    # ----------------------------------------------------------------------------- memory
    def in_flight_max(self, position: int, devices_after: int, groups_after: int) -> int:
        """The most microbatches a stage at ``position`` can hold, whatever the later stages are."""
        p = self.problem
        most_stages = position + 1 + min(devices_after, groups_after)
        return p.in_flight(position, most_stages)

    def _param_bytes(self, params: set) -> float:
        key = frozenset(params)
        got = self._param_memo.get(key)
        if got is None:  # sets of parameters recur across masks and replays: sum each once
            got = self._param_memo[key] = float(sum(int(self.value_bytes[v]) for v in key)) * self.param_factor
        return got

    def stage_memory(self, params: set, state: float, stash: float, ws: float, in_flight: int) -> float:
        return self._param_bytes(params) + state + stash * in_flight + ws

    def _reach(self, cap: float) -> np.ndarray:
        """reach[t]: the last group a fresh stage starting at group t holds within ``cap`` bytes (one microbatch
        in flight, a lower bound of what the schedule needs); t - 1 when not even group t fits."""
        G = self.num_groups
        out = np.full(G, -1, np.int64)
        for t in range(G):
            params: set = set()
            st = sh = w = 0.0
            u = t
            while u < G:
                params2 = params | self.params[u]
                if self.stage_memory(params2, st + self.state[u], sh + self.stash[u], max(w, self.ws[u]), 1) > cap:
                    break
                params, st, sh, w = params2, st + self.state[u], sh + self.stash[u], max(w, self.ws[u])
                u += 1
            out[t] = u - 1
        return out

    def _completable(self) -> np.ndarray:
        """ok[t, i, c]: groups t.. can be placed in fresh single-device stages on the accelerators from
        position i of the canonical order and c unused CPUs (memory with one microbatch in flight): a
        necessary condition, so masks never cut off every plan that fits when one does."""
        G, A, C = self.num_groups, len(self.order), len(self.cpus)
        caps = {float(self.capacity[d]) for d in self.order + self.cpus}
        reach = {c: self._reach(c) for c in caps}
        ok = np.zeros((G + 1, A + 1, C + 1), bool)
        ok[G] = True
        for t in range(G - 1, -1, -1):
            for i in range(A, -1, -1):
                for c in range(C + 1):
                    found = False
                    if i < A:
                        r = reach[float(self.capacity[self.order[i]])][t]
                        found = bool(ok[t + 1: r + 2, i + 1, c].any())
                    if not found and c > 0:
                        r = reach[float(self.capacity[self.cpus[C - c]])][t]
                        found = bool(ok[t + 1: r + 2, i, c - 1].any())
                    ok[t, i, c] = found
        return ok

    # ------------------------------------------------------------------------------ masks
    def devices_left(self, s: Partial) -> int:
        return len(self.order) - s.pointer + len(self.cpus) - s.cpus

    def block(self, pointer: int, k: int) -> tuple[int, ...] | None:
        """The ``k`` accelerators from ``pointer`` in canonical order, when they form a submesh: one type,
        within a host (k a power of two) or whole hosts from a host's first device (memoised)."""
        key = (pointer, k)
        if key not in self._blocks:
            self._blocks[key] = self._block(pointer, k)
        return self._blocks[key]

    def _block(self, pointer: int, k: int) -> tuple[int, ...] | None:
        order = self.order
        if pointer + k > len(order):
            return None
        if len(set(self.type_of[pointer: pointer + k])) != 1:
            return None
        hosts = self.host_of[pointer: pointer + k]
        if hosts[0] != hosts[-1]:
            starts = pointer == 0 or self.host_of[pointer - 1] != hosts[0]
            ends = pointer + k == len(order) or self.host_of[pointer + k] != hosts[-1]
            if not (starts and ends):
                return None
        return tuple(order[pointer: pointer + k])

    def cut_devices(self, s: Partial, action: int) -> tuple[int, ...] | None:
        """The devices a cut action gives the new stage (None: not available here)."""
        if action == CPU:
            return (self.cpus[s.cpus],) if s.cpus < len(self.cpus) else None
        return self.block(s.pointer, SIZES[action - 1])

    def _fits(self, devs: tuple[int, ...], t: int, mem: float) -> bool:
        return bool(self.allowed[t, list(devs)].all()) and all(mem <= self.capacity[d] * (1 - 1e-12) for d in devs)

    def mask(self, s: Partial) -> np.ndarray:
        """Valid actions for deciding group ``s.next_group`` (read-only; memoised: the mask depends only on the
        group, where the open stage starts and on which devices, the stages so far and the devices used, and
        the beam and the improvement pass ask for the same states many times)."""
        key = (s.next_group, s.starts[-1] if s.starts else -1, s.devices[-1] if s.devices else (), s.num_stages,
               s.pointer, s.cpus)
        got = self._masks.get(key)
        if got is None:
            got = self._masks[key] = self._mask(s)
            got.setflags(write=False)
        return got

    def _mask(self, s: Partial) -> np.ndarray:
        p = self.problem
        out = np.zeros(NUM_ACTIONS, bool)
        t = s.next_group
        if t >= self.num_groups:
            return out
        left_groups = self.num_groups - t - 1
        left = self.devices_left(s)
        if s.num_stages:  # continue the open stage
            infl = self.in_flight_max(s.num_stages - 1, left, left_groups)
            m = self.stage_memory(s.params | self.params[t], s.fixed + self.state[t], s.stash + self.stash[t],
                                  max(s.ws, self.ws[t]), infl)
            out[CONTINUE] = self._fits(s.devices[-1], t, m) and self._rest_ok(s, t, s.pointer, s.cpus, open_=True)
        if p.max_stages is not None and s.num_stages + 1 > p.max_stages:
            return out
        batch = p.batch_size
        m1 = self.stage_memory(self.params[t], self.state[t], self.stash[t], self.ws[t], 1)
        for a in range(1, CPU + 1):
            k = SIZES[a - 1] if a < CPU else 1
            if k > 1 and (not p.replication or (batch and batch % k)):
                continue
            devs = self.cut_devices(s, a)
            if devs is None:
                continue
            ptr, cpus = (s.pointer, s.cpus + 1) if a == CPU else (s.pointer + k, s.cpus)
            if not self._rest_ok(s, t, ptr, cpus, open_=False):
                continue
            infl = self.in_flight_max(s.num_stages, left - k, left_groups)
            out[a] = self._fits(devs, t, m1 + self.stash[t] * (infl - 1))
        if t == 0:
            out[CPU + 1:] = self.spmd_ok
        return out

    def _rest_ok(self, s: Partial, t: int, ptr: int, cpus: int, open_: bool) -> bool:
        """Whether, with group t in the open stage (``open_``) or in a new one, the groups after it can still
        be placed on what is left (:meth:`_completable`)."""
        G, C = self.num_groups, len(self.cpus)
        params = (s.params | self.params[t]) if open_ else set(self.params[t])
        st = (s.fixed if open_ else 0.0) + self.state[t]
        sh = (s.stash if open_ else 0.0) + self.stash[t]
        w = max(s.ws if open_ else 0.0, self.ws[t])
        devs = s.devices[-1] if open_ else None
        cap = float(self.capacity[list(devs)].min()) if devs else float(
            self.capacity[self.cpus[cpus - 1]] if ptr == s.pointer and cpus > s.cpus else self.capacity[
                self.order[ptr - 1]])
        u = t + 1
        while True:
            if self.ok[u, ptr, C - cpus]:
                return True
            if u >= G:
                return False
            params = params | self.params[u]
            st, sh, w = st + self.state[u], sh + self.stash[u], max(w, self.ws[u])
            if self.stage_memory(params, st, sh, w, 1) > cap:
                return False
            u += 1

    @property
    def spmd_ok(self) -> bool:
        """SPMD baselines need the artifact's dim maps (a StableHLO model) and a mesh of 2+ devices."""
        p = self.problem
        if "spmd_ok" not in p.memo:
            ok = p.original.dim_maps is not None and p.objective.value == "throughput"
            if ok:
                from planmap.sharding import logical_meshes

                meshes = logical_meshes(p.topology)
                ok = bool(meshes) and meshes[0].num_devices >= 2
            p.memo["spmd_ok"] = ok
        return bool(p.memo["spmd_ok"])

    # ------------------------------------------------------------------------------ steps
    def apply(self, s: Partial, action: int) -> float | None:
        """Apply a pipeline action to ``s``; returns the seconds of the stage it closed (an estimate for
        shaping: compute per replica), or None."""
        t = s.next_group
        closed = None
        if action == CONTINUE:
            s.params |= self.params[t]
        else:
            devs = self.cut_devices(s, action)
            assert devs is not None, "apply takes valid actions only"
            if s.num_stages:
                closed = s.compute / len(s.devices[-1])
            s.starts.append(t)
            s.devices.append(devs)
            if action == CPU:
                s.cpus += 1
            else:
                s.pointer += len(devs)
            s.params, s.fixed, s.stash, s.ws, s.compute = set(self.params[t]), 0.0, 0.0, 0.0, 0.0
        s.fixed += self.state[t]
        s.stash += self.stash[t]
        s.ws = max(s.ws, self.ws[t])
        s.compute += float(self.slowest(s.devices[-1])[t])
        s.next_group += 1
        if s.next_group == self.num_groups:
            closed = s.compute / len(s.devices[-1])
        return closed

    def solution(self, s: Partial, solver: str = "dqn") -> Solution:
        """The plan of a complete episode (every group decided)."""
        stage_of_group = np.zeros(self.num_groups, np.int64)
        for k, start in enumerate(s.starts):
            stage_of_group[start:] = k
        p = self.problem
        return Solution(stage_of_group[self.group_of], tuple(Stage(d) for d in s.devices),
                        Certificate(Status.HEURISTIC, solver), schedule=p.schedule,
                        microbatches=max(p.microbatches, 1))

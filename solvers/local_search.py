"""``local-search``: moves and swaps from the best of the other baselines, with seeded restarts.

It starts from ``options.warm_start`` or the best of ``even``, ``single``, ``greedy`` and ``metis``
(whichever answer), and improves the device assignment:

* **moves**: one operator — or one colocation class, e.g. a layer's forward and backward — to
  another device it may run on, within memory;
* **swaps**: two neighbouring operators on different devices trade devices; two devices trade
  their whole contents (this matters for heterogeneous devices and memory);
* **restarts**: from the best plan so far, a seeded random perturbation (a connected group of
  operators moved to one device) followed by a new descent; the best plan is kept.

Throughput is scored by :class:`ThroughputLoads`, an incremental version of the evaluator's load
model (compute plus each device's transfer charges; O(degree) per move), and every accepted move
is confirmed by :func:`planmap.evaluate.evaluate`. Contiguous pipelines only make moves that keep
every stage convex: a node moves to a stage between its predecessors' and successors' stages in
pipeline order, so positions stay monotone along every edge. Latency has no cheap exact delta (the
schedule is global), so candidates — nodes on a device boundary, to a neighbour's device or the CPU
— are re-split into calls and evaluated in full.

Deterministic for a given seed unless ``time_limit`` cuts a run short (``passthrough``:
``restarts`` (default 4), ``max_evaluations`` to bound the work instead of the clock).
"""

from __future__ import annotations

import time

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import Evaluation, evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status

from ._segments import adjacency, forward_mask, repair, solution_from_devices

__all__ = ["LocalSearch", "ThroughputLoads", "START_SOLVERS"]

VERSION = "1"
START_SOLVERS = ("even", "single", "greedy", "metis")
_EPS = 1e-12


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
        src = g.edge_src
        keep = src >= 0
        pairs = np.unique(np.stack([g.edge_value[keep], g.edge_dst[keep]], 1), axis=0)
        self.prod = g.value_node.tolist()
        self.consumers: dict[int, list[int]] = {}
        self.inputs: list[list[int]] = [[] for _ in range(n)]
        for v, c in pairs.tolist():
            if self.prod[v] == c:
                continue
            self.consumers.setdefault(v, []).append(c)
            self.inputs[c].append(v)
        self.outputs: list[list[int]] = [[] for _ in range(n)]
        for v in self.consumers:
            self.outputs[self.prod[v]].append(v)
        # transfer charges: measured time or latency + bytes / bandwidth, where paid
        self.vbytes = g.value_bytes.astype(float).tolist()
        self.vtime = g.value_time.tolist()
        self.r_lat, self.r_ibw, self.r_paid = topo.recv_lat.tolist(), topo.recv_ibw.tolist(), topo.recv_paid.tolist()
        self.s_lat, self.s_ibw, self.s_paid = topo.send_lat.tolist(), topo.send_ibw.tolist(), topo.send_paid.tolist()
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
        pv, pn = cost.param_use
        self.params: list[list[int]] = [[] for _ in range(n)]
        if len(pv):
            for v, c in np.unique(np.stack([pv, pn], 1), axis=0).tolist():
                self.params[c].append(v)
        self.state = g.state_bytes.astype(float).tolist()
        self.stash = (cost.stash_bytes.astype(float) if problem.mode == "training" else np.zeros(n)).tolist()
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
        if self.problem.variant == "max-fw-plus-max-bw":
            obj = max(self.fw) + max(self.bw)
        else:
            obj = max(f + b for f, b in zip(self.fw, self.bw, strict=True))
        return obj, sum((f + b) ** 2 for f, b in zip(self.fw, self.bw, strict=True))

    def loads(self) -> np.ndarray:
        return np.asarray(self.fw) + np.asarray(self.bw)


def _units(problem: Problem) -> list[list[int]]:
    """Colocation classes (one unit each) and single nodes."""
    cls = problem.graph.colocation
    units: dict[int, list[int]] = {}
    out = []
    for v, c in enumerate(cls.tolist()):
        if c >= 0:
            if c not in units:
                units[c] = []
                out.append(units[c])
            units[c].append(v)
        else:
            out.append([v])
    return out


class _Search:
    """Shared bookkeeping: clock, evaluation budget, incumbent, progress reports."""

    def __init__(self, problem: Problem, options: SolveOptions, t0: float):
        self.problem = problem
        self.options = options
        self.t0 = t0
        self.deadline = t0 + max(0.0, options.time_limit)
        self.max_evals = options.passthrough.get("max_evaluations")
        self.evals = 0
        self.rng = np.random.default_rng(options.seed)
        self.best: tuple[Solution, Evaluation] | None = None
        self.last_report = 0.0
        self.stopped = False
        self.nb = _neighbours(problem)  # undirected adjacency lists

    def out_of_budget(self) -> bool:
        if time.perf_counter() >= self.deadline:
            self.stopped = True
        if self.max_evals is not None and self.evals >= self.max_evals:
            self.stopped = True
        return self.stopped

    def evaluate(self, sol: Solution) -> Evaluation:
        self.evals += 1
        return evaluate(self.problem, sol)

    def offer(self, sol: Solution, ev: Evaluation) -> bool:
        if not ev.feasible:
            return False
        if self.best is None or ev.objective < self.best[1].objective * (1 - _EPS) - _EPS:
            self.best = (sol, ev)
            self.report(f"improved to {ev.objective:.6g}s")
            return True
        return False

    def report(self, message: str, force: bool = False) -> None:
        cb = self.options.progress
        now = time.perf_counter()
        if cb is None or (not force and now - self.last_report < 0.2):
            return
        self.last_report = now
        cb(elapsed=now - self.t0, incumbent=self.best[1].objective if self.best else None, bound=None,
           message=message)


def _neighbours(problem: Problem):
    g = problem.graph
    s, d = g.node_edges
    n = g.num_nodes
    nb: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(s.tolist(), d.tolist(), strict=True):
        nb[a].append(b)
        nb[b].append(a)
    return nb


def _perturb(search: _Search, device_of: np.ndarray, units_of, candidates_for) -> np.ndarray:
    """Move a random connected group of nodes (about 3% of them, at least 2) to one random device."""
    n = len(device_of)
    rng, nb = search.rng, search.nb
    size = max(2, n // 33)
    start = int(rng.integers(n))
    group, seen, frontier = [], {start}, [start]
    while frontier and len(group) < size:
        v = frontier.pop(0)
        group.append(v)
        for w in nb[v]:
            if w not in seen:
                seen.add(w)
                frontier.append(w)
    devs = candidates_for(group)
    if not devs:
        return device_of
    e = int(devs[int(rng.integers(len(devs)))])
    out = device_of.copy()
    for v in group:
        for u in units_of[v]:
            out[u] = e
    return repair(search.problem, out)


# ------------------------------------------------------------------------------------ throughput
def _stage_positions(problem: Problem, ev: Evaluation, sol: Solution) -> np.ndarray:
    """Pipeline position of each device (devices without a stage: -1)."""
    pos = np.full(problem.num_devices, -1, np.int64)
    for p, k in enumerate(ev.stage_order):
        for d in sol.stages[k].devices:
            pos[d] = p
    return pos


def _descend_throughput(search: _Search, device_of: np.ndarray, units: list[list[int]], unit_of: np.ndarray):
    problem = search.problem
    g = problem.graph
    cert = Certificate(Status.HEURISTIC, "local-search", version=VERSION)
    sol = solution_from_devices(problem, device_of, cert)
    ev = search.evaluate(sol)
    pos = _stage_positions(problem, ev, sol)
    G = int((pos >= 0).sum())
    infl = np.array([problem.in_flight(int(p), G) if p >= 0 else problem.in_flight(0, G + 1) for p in pos], float)
    model = ThroughputLoads(problem, device_of, infl)
    contiguous = problem.contiguous
    mask = forward_mask(problem)
    fwd = np.ones(g.num_nodes, bool) if mask is None else mask
    pind, pids = g.pred
    sind, sids = g.succ
    pl, pi, sl, si = pids.tolist(), pind.tolist(), sids.tolist(), sind.tolist()
    fwd_l = fwd.tolist()
    unit_l = unit_of.tolist()
    allowed = problem.allowed
    unit_allowed = [np.flatnonzero(allowed[u].all(axis=0)).tolist() for u in units]
    used = sorted(int(d) for d in np.flatnonzero(pos >= 0))
    pos_l = pos.tolist()

    def window(ui: int) -> tuple[int, int]:
        """Pipeline positions unit ui may take and keep positions monotone on forward edges."""
        lo, hi = 0, 1 << 30
        members = units[ui]
        for v in members:
            if not fwd_l[v]:
                continue
            for p in pl[pi[v]: pi[v + 1]]:
                if fwd_l[p] and unit_l[p] != ui:
                    lo = max(lo, pos_l[model.dev[p]])
            for s in sl[si[v]: si[v + 1]]:
                if fwd_l[s] and unit_l[s] != ui:
                    hi = min(hi, pos_l[model.dev[s]])
        return lo, hi

    def valid(ui: int) -> bool:
        if not contiguous:
            return True
        lo, hi = window(ui)
        return lo <= pos_l[model.dev[units[ui][0]]] <= hi

    current = model.key()
    improved_any = True
    while improved_any and not search.out_of_budget():
        improved_any = False
        loads = model.loads()
        # units on the most loaded devices first, each to every other device it may use
        order_dev = np.argsort(-loads, kind="stable").tolist()
        for b in order_dev[: max(1, len(used))]:
            cand = [ui for ui in range(len(units)) if model.dev[units[ui][0]] == b]
            search.rng.shuffle(cand)
            for ui in cand:
                if search.out_of_budget():
                    break
                targets = unit_allowed[ui]
                if contiguous:
                    lo, hi = window(ui)
                    targets = [e for e in targets if pos_l[e] >= 0 and lo <= pos_l[e] <= hi]
                best_move = None
                for e in targets:
                    if e == b:
                        continue
                    old = model.move(units[ui], e)
                    key = model.key()
                    ok = _better(key, current) and model.fits(e)
                    model.undo(old)
                    if ok and (best_move is None or key < best_move[0]):
                        best_move = (key, e)
                if best_move is None:
                    continue
                key, e = best_move
                old = model.move(units[ui], e)
                trial = solution_from_devices(problem, np.asarray(model.dev, np.int32), cert)
                tev = search.evaluate(trial)
                if tev.feasible and tev.objective <= ev.objective * (1 + 1e-9) + _EPS:
                    current, sol, ev = key, trial, tev
                    search.offer(sol, ev)
                    improved_any = True
                    break
                model.undo(old)
            if improved_any:
                break
        if not improved_any and not search.out_of_budget():
            improved_any, sol, ev, current = _unit_swaps(search, model, sol, ev, current, cert, units, unit_l,
                                                         order_dev[0], valid)
        if not improved_any and not search.out_of_budget():
            improved_any, sol, ev, current = _device_swaps(search, model, sol, ev, current, cert)
            if improved_any and contiguous:
                pos = _stage_positions(problem, ev, sol)
                pos_l = pos.tolist()
    return np.asarray(model.dev, np.int32), sol, ev


def _better(key, current) -> bool:
    return key[0] < current[0] * (1 - 1e-12) - _EPS or (
        key[0] <= current[0] * (1 + 1e-12) + _EPS and key[1] < current[1] * (1 - 1e-9) - _EPS)


def _unit_swaps(search: _Search, model: ThroughputLoads, sol, ev, current, cert, units, unit_l, b, valid):
    """A unit on the bottleneck device ``b`` trades devices with a neighbouring unit elsewhere."""
    problem = search.problem
    nb = search.nb
    allowed = problem.allowed
    cand = [ui for ui in range(len(units)) if model.dev[units[ui][0]] == b]
    search.rng.shuffle(cand)
    for ui in cand:
        others = sorted({unit_l[w] for v in units[ui] for w in nb[v]} - {ui})
        for wi in others:
            if search.out_of_budget():
                return False, sol, ev, current
            e = model.dev[units[wi][0]]
            if e == b or not allowed[units[ui], e].all() or not allowed[units[wi], b].all():
                continue
            old = model.move(units[ui], e) + model.move(units[wi], b)
            key = model.key()
            if _better(key, current) and model.fits(e) and model.fits(b) and valid(ui) and valid(wi):
                trial = solution_from_devices(problem, np.asarray(model.dev, np.int32), cert)
                tev = search.evaluate(trial)
                if tev.feasible and tev.objective <= ev.objective * (1 + 1e-9) + _EPS:
                    search.offer(trial, tev)
                    return True, trial, tev, key
            model.undo(old)
    return False, sol, ev, current


def _device_swaps(search: _Search, model: ThroughputLoads, sol, ev, current, cert):
    """Two devices trade their whole contents (one stage each); first improvement."""
    problem = search.problem
    dev = np.asarray(model.dev, np.int32)
    used = np.unique(dev).tolist()
    pool = [int(d) for d in (problem.topology.accelerators if len(problem.topology.accelerators)
                             else problem.topology.cpus)]
    for a in used:
        for b in pool:
            if b == a or search.out_of_budget():
                continue
            if problem.topology.signature(a) == problem.topology.signature(b):
                continue  # interchangeable devices: a swap changes nothing
            trial_dev = dev.copy()
            trial_dev[dev == a] = b
            trial_dev[dev == b] = a
            trial = solution_from_devices(problem, trial_dev, cert)
            tev = search.evaluate(trial)
            if tev.feasible and tev.objective < ev.objective * (1 - 1e-12) - _EPS:
                na, nb_ = np.flatnonzero(dev == a).tolist(), np.flatnonzero(dev == b).tolist()
                model.move(na, b)
                model.move(nb_, a)
                search.offer(trial, tev)
                return True, trial, tev, model.key()
    return False, sol, ev, current


# --------------------------------------------------------------------------------------- latency
def _latency_groups(problem: Problem, dev: np.ndarray, sol: Solution, units_of) -> list[list[int]]:
    """Groups that move as a whole: each accelerator call of ``sol``; each connected region of
    operators on one CPU; and each such region's connected parts that every accelerator can run
    (colocation partners included)."""
    is_cpu = problem.topology.is_cpu
    groups = [np.flatnonzero(sol.assignment == k).tolist() for k, st in enumerate(sol.stages)
              if not is_cpu[st.device]]
    s, d = problem.graph.node_edges
    on_cpu = is_cpu[dev]
    same = on_cpu[s] & on_cpu[d] & (dev[s] == dev[d])
    portable = problem.allowed[:, problem.topology.accelerators].all(axis=1)
    for keep, members in ((same, on_cpu), (same & portable[s] & portable[d], on_cpu & portable)):
        groups += _components(len(dev), s[keep], d[keep], np.flatnonzero(members))
    out, seen = [], set()
    for grp in groups:
        full = tuple(sorted({u for v in grp for u in units_of[v]}))
        if full not in seen:
            seen.add(full)
            out.append(list(full))
    return out


def _components(n: int, s: np.ndarray, d: np.ndarray, members: np.ndarray) -> list[list[int]]:
    """Connected components (union-find) of ``members`` under the edges (s, d)."""
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(s.tolist(), d.tolist(), strict=True):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    comps: dict[int, list[int]] = {}
    for v in members.tolist():
        comps.setdefault(find(v), []).append(v)
    return list(comps.values())


def _descend_latency(search: _Search, device_of: np.ndarray, sol: Solution, ev: Evaluation, units_of,
                     candidates_for):
    """First-improvement descent, each candidate re-split into calls and evaluated in full: whole calls
    and CPU regions moved to another device (few candidates, large steps); when none helps, boundary
    moves and neighbour swaps of single operators."""
    problem = search.problem
    cert = Certificate(Status.HEURISTIC, "local-search", version=VERSION)
    cpus = [int(d) for d in problem.topology.cpus]
    accs = [int(d) for d in problem.topology.accelerators]
    nb = search.nb
    adj = adjacency(problem)
    preds, succs = adj
    state = {"dev": device_of.copy(), "sol": sol, "ev": ev}

    def attempt(t: np.ndarray, fix: bool = False) -> bool:
        """Take ``t`` if it is better; with ``fix``, an infeasible ``t`` gets a second chance repaired
        (more calls than q: the closest placement with one call per accelerator)."""
        trial = solution_from_devices(problem, t, cert, adjacency_lists=adj)
        tev = search.evaluate(trial)
        if not tev.feasible and fix:
            t = repair(problem, t)
            trial = solution_from_devices(problem, t, cert, adjacency_lists=adj)
            tev = search.evaluate(trial)
        if tev.feasible and tev.objective < state["ev"].objective * (1 - 1e-12) - _EPS:
            state.update(dev=t, sol=trial, ev=tev)
            search.offer(trial, tev)
            return True
        return False

    def node_pass() -> bool:
        dev = state["dev"]
        dl = dev.tolist()
        # boundary nodes: a neighbour elsewhere, or first / last of their device's nodes
        boundary = [v for v in range(len(dl)) if any(dl[w] != dl[v] for w in nb[v])
                    or not any(dl[w] == dl[v] for w in preds[v]) or not any(dl[w] == dl[v] for w in succs[v])]
        search.rng.shuffle(boundary)
        improved = False
        for v in boundary:
            dev = state["dev"]
            group = units_of[v]
            allowed = set(candidates_for(group))
            targets = {int(dev[w]) for w in nb[v]} | set(cpus)
            if not any(dev[w] == dev[v] for w in preds[v]) or not any(dev[w] == dev[v] for w in succs[v]):
                targets |= set(accs)  # an end of its device's work may start or end another device's
            trials = [("move", e) for e in sorted(targets) if e != dev[v] and e in allowed]
            trials += [("swap", w) for w in nb[v] if dev[w] != dev[v] and len(units_of[w]) == 1 and len(group) == 1
                       and problem.allowed[w, dev[v]] and problem.allowed[v, dev[w]]]
            for kind, x in trials:
                if search.out_of_budget():
                    return improved
                t = dev.copy()
                if kind == "move":
                    t[group] = x
                else:
                    t[v], t[x] = dev[x], dev[v]
                if attempt(t):
                    improved = True
                    break
        return improved

    def group_pass() -> bool:
        dev = state["dev"]
        groups = _latency_groups(problem, dev, state["sol"], units_of)
        search.rng.shuffle(groups)
        for grp in groups:
            for e in candidates_for(grp):
                if search.out_of_budget():
                    return False
                if (dev[grp] == e).all():
                    continue
                t = dev.copy()
                t[grp] = e
                if attempt(t, fix=True):
                    return True
        # swaps: a call and another group trade devices (e.g. a long CPU region takes the place of a
        # short call when every accelerator already runs q calls); heaviest groups first
        single = [grp for grp in groups if len(set(dev[grp].tolist())) == 1]
        work = problem.cost.device_compute
        weight = [float(np.nan_to_num(work[grp, dev[grp[0]]]).sum()) for grp in single]
        order = sorted(range(len(single)), key=lambda i: -weight[i])
        calls = [i for i in order if not problem.topology.is_cpu[dev[single[i][0]]]]
        for i in order:
            a = single[i]
            da = int(dev[a[0]])
            for j in calls:
                b = single[j]
                db = int(dev[b[0]])
                if da == db or not problem.allowed[a, db].all() or not problem.allowed[b, da].all():
                    continue
                if search.out_of_budget():
                    return False
                t = dev.copy()
                t[a], t[b] = db, da
                if attempt(t, fix=True):
                    return True
        return False

    while not search.out_of_budget():
        if not group_pass() and not node_pass():
            break
    return state["dev"], state["sol"], state["ev"]


# -------------------------------------------------------------------------------------- solver
class LocalSearch:
    """Moves and swaps from the best baseline, with seeded random restarts."""

    name = "local-search"
    objectives = frozenset({"latency", "throughput"})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        search = _Search(problem, options, t0)
        start, start_name = self._start(problem, options, search)
        sol0, ev0 = start
        cert = Certificate(Status.HEURISTIC, self.name, version=VERSION,
                           message=f"started from {start_name} ({ev0.objective:.6g}s)")
        search.best = (sol0, ev0) if ev0.feasible else None
        n = problem.graph.num_nodes
        if n == 0:
            return sol0.with_certificate(**_cert_fields(cert, ev0, t0))
        units = _units(problem)
        unit_of = np.empty(n, np.int64)
        for i, u in enumerate(units):
            unit_of[u] = i
        units_of = [units[unit_of[v]] for v in range(n)]
        allowed = problem.allowed

        def candidates_for(group):
            members = sorted({u for v in group for u in units_of[v]})
            return np.flatnonzero(allowed[members].all(axis=0)).tolist()

        restarts = int(options.passthrough.get("restarts", 4))
        device_of = sol0.node_device()
        for attempt in range(restarts + 1):
            if search.out_of_budget():
                break
            if attempt:
                base = search.best[0].node_device() if search.best else device_of
                device_of = _perturb(search, base, units_of, candidates_for)
            if problem.objective == "latency":
                cur = solution_from_devices(problem, device_of, cert) if attempt else sol0
                cev = search.evaluate(cur) if attempt else ev0
                search.offer(cur, cev)
                if not cev.feasible and attempt:
                    continue
                _descend_latency(search, device_of, cur, cev, units_of, candidates_for)
            else:
                if attempt and not search.evaluate(solution_from_devices(problem, device_of, cert)).feasible:
                    continue
                _descend_throughput(search, device_of, units, unit_of)
            search.report(f"restart {attempt + 1}/{restarts + 1}", force=True)
        best_sol, best_ev = search.best if search.best else (sol0, ev0)
        best_sol = Solution(best_sol.assignment, best_sol.stages, cert, best_sol.schedule, best_sol.microbatches,
                            best_sol.shardings)
        return best_sol.with_certificate(**_cert_fields(cert, best_ev, t0))

    @staticmethod
    def _start(problem: Problem, options: SolveOptions, search: _Search):
        """The warm start, else the best feasible answer of the start solvers (ties: list order)."""
        from planmap import solvers

        found = []
        warm = options.warm_start
        if warm is not None and len(warm.assignment) == problem.graph.num_nodes:
            found.append(("warm start", warm, search.evaluate(warm)))
        if not found or not found[0][2].feasible:
            sub = SolveOptions(time_limit=options.time_limit, seed=options.seed, threads=options.threads)
            for name in START_SOLVERS:
                try:
                    s = solvers.get(name).solve(problem, sub)
                except (PlanmapError, ImportError):
                    continue
                found.append((name, s, search.evaluate(s)))
        if not found:
            raise InfeasibleError(f"{problem.name}: no baseline produced a placement to start from")
        name, sol, ev = min(found, key=lambda x: (not x[2].feasible, x[2].objective))
        return (sol, ev), name


def _cert_fields(cert: Certificate, ev: Evaluation, t0: float) -> dict:
    return {"objective": ev.objective, "wall_time": time.perf_counter() - t0, "message": cert.message}

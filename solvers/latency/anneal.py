"""Simulated annealing over calls: a search that leaves the local optima the call moves stop in.

The call moves of :mod:`.moves` accept only strict improvements, so they stop where every slot is used
and each single change costs more than it saves: on GNMT's layer graph a grid of cells sits in one large
call, and cutting it needs a slot freed elsewhere first (a merge that is slower on its own). Annealing
accepts such steps with a probability that falls with their cost and with a temperature that falls over
the run, so chains of moves that pass through slower placements are reachable.

The state is the placement as calls (:func:`.moves.calls_of`: accelerator calls in device run order, one
entry per CPU). A proposal changes one or two calls:

* shift the boundary between two units that exchange a value: the consumer (with its in-call ancestors
  or a short run along a path) into the producer's unit, or the producer (with its in-call descendants
  or a short run back along a path) into the consumer's;
* a node (with its in-call ancestors or descendants) onto the CPU, or a CPU node (or a short run of
  them along a path) into a neighbouring call or a new call on a device with a free slot;
* split a call at a topological cut (by node order, or the descendants or ancestors of a node) into a
  new call on a device with a free slot, at a random position among that device's calls;
* merge two calls; move a whole call to a free slot on another device; swap two calls of a device;
* two of these at once (a merge that frees a slot and a split that uses it), judged once.

Cheap checks reject a proposal before it costs an evaluation (the slot limit, where a node may run,
convexity of the calls it changes by the reachability table, the devices' memory); every other
candidate is judged exactly by :func:`planmap.evaluate.evaluate`, infeasible ones rejected. The search
is deterministic: a seeded generator and a count of evaluations decide what is found (``deadline`` is
only a safety net for callers inside a time limit). The result is the best feasible placement seen,
never worse than the start.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from planmap.evaluate import evaluate
from planmap.evaluation import Evaluation, is_memory_violation
from planmap.problem import Problem, Solution
from planmap.structure import quotient_order
from planmap.vocabulary import Mode

from .moves import MAX_NODES, Calls, _distinct, _Graph, _insert_new, _remove, _solution, calls_of, moves_budget

__all__ = ["anneal", "anneal_budget"]

SEED = 15  # the generator's seed: the same inputs give the same placement
EVAL_CAP = 40_000  # evaluations of one anneal() call at most
ANNEAL_SHARE = 0.1  # share of a time limit the budget is sized for (as moves.MOVES_SHARE)
T_START, T_END = 0.02, 0.001  # temperature as a share of the start's latency, first and last evaluation
MAX_RUN = 4  # nodes moved along a path at once
MEMORY_SLACK = 0.05  # the walk may overfill a device by this share of its memory...
PENALTY = 5.0  # ...paying this many times the overfilled share (of the latency)


def anneal_budget(problem: Problem, time_limit: float) -> int:
    """Evaluations the annealing may spend under ``time_limit`` seconds (a count, not a clock)."""
    return moves_budget(problem, time_limit, share=ANNEAL_SHARE, cap=EVAL_CAP)


class _Space:
    """The graph's data the proposals need, and the cheap checks made before an evaluation."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.gr = _Graph(problem)
        self.reach = self.gr.reach()
        self.n = problem.num_nodes
        self.src, self.dst = (np.asarray(x, np.int64) for x in problem.graph.node_edges)
        self.q = self.gr.q
        self.one_empty = not _distinct(problem)  # idle accelerators alike: the first idle one stands for all
        g, cost = problem.graph, problem.cost
        self.node_mem = g.state_bytes.astype(float) + (cost.stash_bytes if problem.mode is Mode.TRAINING else 0.0)
        self.ws = cost.working_set.astype(float)
        self.pv, self.pn = (np.asarray(x, np.int64) for x in cost.param_use)
        self.pbytes = g.value_bytes.astype(float) * cost.param_factor
        self.cap = problem.capacity * (1 + MEMORY_SLACK)

    def convex(self, nodes: np.ndarray) -> bool:
        """No path leaves ``nodes`` and re-enters it."""
        if len(nodes) <= 1:
            return True
        inside = np.zeros(self.n, bool)
        inside[nodes] = True
        between = self.reach[nodes].any(axis=0) & self.reach[:, nodes].any(axis=1)
        return not (between & ~inside).any()

    def fits(self, d: int, nodes: np.ndarray) -> bool:
        """Device ``d`` holds ``nodes`` (all its calls' nodes): parameters once, state, largest working set."""
        if self.gr.is_cpu[d]:
            return True
        inside = np.zeros(self.n, bool)
        inside[nodes] = True
        params = np.unique(self.pv[inside[self.pn]])
        need = self.node_mem[nodes].sum() + self.pbytes[params].sum() + (self.ws[nodes].max() if len(nodes) else 0.0)
        return bool(need <= self.cap[d])

    def valid(self, calls: Calls, changed: set[int]) -> bool:
        """The cheap checks for the calls on devices in ``changed``: slots, pins, convexity, memory."""
        on: dict[int, list[np.ndarray]] = {}
        for d, nodes in calls:
            on.setdefault(d, []).append(nodes)
        for d in changed:
            parts = on.get(d, [])
            if self.gr.is_cpu[d]:
                if parts and not self.problem.allowed[np.concatenate(parts), d].all():
                    return False
                continue
            if len(parts) > self.q:
                return False
            if not parts:
                continue
            everything = np.concatenate(parts)
            if not self.problem.allowed[everything, d].all() or not self.fits(d, everything):
                return False
            if not all(self.convex(p) for p in parts):
                return False
        return self.schedulable(calls)

    def schedulable(self, calls: Calls) -> bool:
        """The calls (and the CPU nodes, each a unit) depend on each other without a cycle."""
        unit = np.empty(self.n, np.int64)
        last: dict[int, int] = {}
        chain = []
        for k, (d, nodes) in enumerate(calls):
            if self.gr.is_cpu[d]:
                unit[nodes] = len(calls) + nodes
                continue
            unit[nodes] = k
            if d in last:
                chain.append((last[d], k))
            last[d] = k
        return quotient_order(self.problem.graph, unit, len(calls) + self.n, chain) is not None

    def closure(self, v: int, nodes: np.ndarray, up: bool) -> np.ndarray:
        """``v`` with its ancestors (``up``) or descendants inside ``nodes``."""
        keep = self.reach[nodes, v] if up else self.reach[v, nodes]
        return nodes[keep]

    def components(self, nodes: np.ndarray) -> list[np.ndarray]:
        """Weakly connected components of the subgraph induced by ``nodes``."""
        gr, left, out = self.gr, set(nodes.tolist()), []
        while left:
            stack, comp = [left.pop()], []
            while stack:
                v = stack.pop()
                comp.append(v)
                for x in np.concatenate([gr.succ_of(v), gr.pred_of(v)]).tolist():
                    if x in left:
                        left.remove(x)
                        stack.append(x)
            out.append(np.array(sorted(comp), np.int64))
        return out

    def diamond(self, nodes: np.ndarray, u: int, w: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """A call's ``nodes`` cut around ``u`` and a descendant ``w``: the head (``u`` with its ancestors in the
        call) and the parts that leave it, each weakly connected piece of what runs between the two (in
        parallel) and then the tail (``w`` with its descendants); None when a piece would be empty."""
        head = self.closure(u, nodes, up=True)
        tail = np.setdiff1d(self.closure(w, nodes, up=False), head)
        middle = np.setdiff1d(nodes, np.union1d(head, tail))
        if not len(head) or not len(tail) or not len(middle):
            return None
        return head, [*self.components(middle), tail]

    def free_slots(self, calls: Calls) -> list[tuple[int, int]]:
        """(device, position) for a new call: every position on a device with a free slot."""
        count = {d: 0 for d in self.gr.accs}
        for d, _ in calls:
            if d in count:
                count[d] += 1
        out, empty_seen = [], False
        for d in self.gr.accs:
            if count[d] == 0:
                if self.one_empty and empty_seen:
                    continue
                empty_seen = True
            if count[d] < self.q:
                out += [(d, pos) for pos in range(count[d] + 1)]
        return out


def _where(n: int, calls: Calls) -> np.ndarray:
    w = np.empty(n, np.int64)
    for k, (_, nodes) in enumerate(calls):
        w[nodes] = k
    return w


def _move(calls: Calls, k: int, sub: np.ndarray, to: int) -> Calls:
    """``sub`` (in call ``k``) into call ``to``; an emptied call disappears."""
    out = list(calls)
    out[k] = (calls[k][0], np.setdiff1d(calls[k][1], sub))
    out[to] = (calls[to][0], np.union1d(calls[to][1], sub))
    return [c for c in out if len(c[1])]


def _to_new(calls: Calls, k: int, sub: np.ndarray, d: int, pos: int) -> Calls:
    """``sub`` (in call ``k``) as a new call on ``d`` at position ``pos``; an emptied call disappears."""
    return _insert_new(_remove(calls, k, sub), d, pos, sub)


class _Proposals:
    """Random changes of a placement; each returns (new calls, devices whose calls changed) or None."""

    def __init__(self, sp: _Space, rng: np.random.Generator):
        self.sp, self.rng = sp, rng

    def _run(self, v: int, nodes: np.ndarray, up: bool) -> np.ndarray:
        """``v`` and up to ``MAX_RUN - 1`` more nodes of ``nodes`` along a random path from it (backwards
        when ``up``)."""
        gr, inside = self.sp.gr, set(nodes.tolist())
        run, cur = [v], v
        for _ in range(int(self.rng.integers(0, MAX_RUN))):
            nxt = [int(w) for w in (gr.pred_of(cur) if up else gr.succ_of(cur)) if int(w) in inside and w not in run]
            if not nxt:
                break
            cur = nxt[int(self.rng.integers(len(nxt)))]
            run.append(cur)
        return np.array(sorted(run), np.int64)

    def _part(self, v: int, nodes: np.ndarray, up: bool) -> np.ndarray:
        """What leaves a call with ``v``: a closure or a run (a CPU node alone or a run of CPU nodes)."""
        if self.rng.random() < 0.5:
            return self.sp.closure(v, nodes, up)
        return self._run(v, nodes, up)

    def shift(self, calls: Calls, where: np.ndarray):
        cross = np.flatnonzero(where[self.sp.src] != where[self.sp.dst])
        if not len(cross):
            return None
        e = int(cross[self.rng.integers(len(cross))])
        u, v = int(self.sp.src[e]), int(self.sp.dst[e])
        pull = bool(self.rng.integers(2))
        node, k, to = (v, where[v], where[u]) if pull else (u, where[u], where[v])
        sub = self._part(node, calls[k][1], up=pull)
        out = _move(calls, int(k), sub, int(to))
        return out, {calls[k][0], calls[to][0]}

    def to_cpu(self, calls: Calls, where: np.ndarray):
        sp = self.sp
        acc = [k for k, (d, _) in enumerate(calls) if not sp.gr.is_cpu[d]]
        if not acc or not sp.gr.cpus:
            return None
        k = acc[int(self.rng.integers(len(acc)))]
        nodes = calls[k][1]
        v = int(nodes[self.rng.integers(len(nodes))])
        sub = self._part(v, nodes, up=bool(self.rng.integers(2)))
        c = sp.gr.cpus[int(self.rng.integers(len(sp.gr.cpus)))]
        at = next((i for i, (d, _) in enumerate(calls) if d == c), None)
        if at is None:
            calls = calls + [(c, np.zeros(0, np.int64))]
            at = len(calls) - 1
        return _move(calls, k, sub, at), {calls[k][0], c}

    def from_cpu(self, calls: Calls, where: np.ndarray):
        sp = self.sp
        cpu_nodes = np.flatnonzero(sp.gr.is_cpu[np.array([d for d, _ in calls])][where])
        if not len(cpu_nodes):
            return None
        v = int(cpu_nodes[self.rng.integers(len(cpu_nodes))])
        k = int(where[v])
        sub = self._run(v, calls[k][1], up=bool(self.rng.integers(2)))
        return self._place(calls, where, k, sub)

    def _place(self, calls: Calls, where: np.ndarray, k: int, sub: np.ndarray):
        """``sub`` (from call ``k``) into a neighbouring accelerator call or a new call in a free slot."""
        sp = self.sp
        near = {int(where[w]) for w in sp.gr.neighbours(sub)} - {k}
        near = {j for j in near if not sp.gr.is_cpu[calls[j][0]]}
        slots = sp.free_slots(calls)
        options = len(near) + len(slots)
        if not options:
            return None
        i = int(self.rng.integers(options))
        if i < len(near):
            to = sorted(near)[i]
            return _move(calls, k, sub, to), {calls[k][0], calls[to][0]}
        d, pos = slots[i - len(near)]
        return _to_new(calls, k, sub, d, pos), {calls[k][0], d}

    def split(self, calls: Calls, where: np.ndarray):
        sp = self.sp
        big = [k for k, (d, nodes) in enumerate(calls) if not sp.gr.is_cpu[d] and len(nodes) > 1]
        if not big:
            return None
        k = big[int(self.rng.integers(len(big)))]
        nodes = calls[k][1]
        kind = int(self.rng.integers(3))
        if kind == 0:  # a prefix or a suffix in node (topological) order
            c = int(self.rng.integers(1, len(nodes)))
            sub = nodes[:c] if self.rng.integers(2) else nodes[c:]
        else:
            v = int(nodes[self.rng.integers(len(nodes))])
            sub = self.sp.closure(v, nodes, up=kind == 1)
            if len(sub) == len(nodes):
                return None
        slots = sp.free_slots(calls)
        if not slots:
            return None
        d, pos = slots[int(self.rng.integers(len(slots)))]
        return _to_new(calls, k, sub, d, pos), {calls[k][0], d}

    def diamond(self, calls: Calls, where: np.ndarray):
        """A call cut around two of its nodes, ``u`` and a descendant ``w``: ``u`` with its ancestors in the call stays,
        ``w`` with its descendants and each weakly connected piece of what is left (what runs between
        them, in parallel) go to free slots (merged into the previous piece when none is left)."""
        sp = self.sp
        big = [k for k, (d, nodes) in enumerate(calls) if not sp.gr.is_cpu[d] and len(nodes) > 3]
        if not big:
            return None
        k = big[int(self.rng.integers(len(big)))]
        nodes = calls[k][1]
        u = int(nodes[self.rng.integers(len(nodes))])
        below = nodes[self.sp.reach[u, nodes]]
        if len(below) < 3:
            return None
        w = int(below[self.rng.integers(1, len(below))])  # a descendant of u (below[0] is u itself)
        cut = sp.diamond(nodes, u, w)
        if cut is None:
            return None
        head, parts = cut
        state = list(calls)
        state[k] = (calls[k][0], head)
        changed = {calls[k][0]}
        last = head
        for part in parts:
            slots = sp.free_slots(state)
            if slots:
                d, pos = slots[int(self.rng.integers(len(slots)))]
                state = _insert_new(state, d, pos, part)
                changed.add(d)
                last = part
            else:
                j = next(i for i, (_, x) in enumerate(state) if len(np.intersect1d(x, last)))
                state[j] = (state[j][0], np.union1d(state[j][1], part))
        return state, changed

    def merge(self, calls: Calls, where: np.ndarray):
        acc = [k for k, (d, _) in enumerate(calls) if not self.sp.gr.is_cpu[d]]
        if len(acc) < 2:
            return None
        i, j = (acc[int(x)] for x in self.rng.choice(len(acc), 2, replace=False))
        return _move(calls, j, calls[j][1], i), {calls[i][0], calls[j][0]}

    def relocate(self, calls: Calls, where: np.ndarray):
        acc = [k for k, (d, _) in enumerate(calls) if not self.sp.gr.is_cpu[d]]
        slots = self.sp.free_slots(calls)
        if not acc or not slots:
            return None
        k = acc[int(self.rng.integers(len(acc)))]
        d, pos = slots[int(self.rng.integers(len(slots)))]
        if d == calls[k][0]:
            return None
        return _to_new(calls, k, calls[k][1], d, pos), {calls[k][0], d}

    def swap(self, calls: Calls, where: np.ndarray):
        pairs = [(i, j) for i in range(len(calls)) for j in range(i + 1, len(calls))
                 if calls[i][0] == calls[j][0] and not self.sp.gr.is_cpu[calls[i][0]]]
        if not pairs:
            return None
        i, j = pairs[int(self.rng.integers(len(pairs)))]
        out = list(calls)
        out[i], out[j] = calls[j], calls[i]
        return out, {calls[i][0]}


KINDS: tuple[tuple[str, float], ...] = (  # proposal kinds and how often each is drawn ("double": two at once)
    ("shift", 0.35), ("to_cpu", 0.08), ("from_cpu", 0.08), ("split", 0.14), ("merge", 0.08), ("relocate", 0.06),
    ("swap", 0.05), ("diamond", 0.15), ("double", 0.16))


def _propose(pr: _Proposals, calls: Calls, singles: list[Callable], weights: np.ndarray, tries: int = 20):
    """A proposal that passes the cheap checks (None after ``tries`` failures): kind ``i`` of ``singles``
    drawn by ``weights``, whose last entry is the weight of two singles at once."""
    sp = pr.sp
    for _ in range(tries):
        i = int(pr.rng.choice(len(weights), p=weights))
        state, changed = calls, set()
        for _ in range(2 if i == len(singles) else 1):
            f = singles[i] if i < len(singles) else singles[int(pr.rng.choice(len(singles), p=_single(weights)))]
            got = f(state, _where(sp.n, state))
            if got is None:
                break
            state, ch = got
            changed |= ch
        else:
            if state is not calls and sp.valid(state, changed):
                return state
    return None


def _single(weights: np.ndarray) -> np.ndarray:
    w = weights[:-1]
    return w / w.sum()


def _penalised(ev) -> float:
    """The latency, raised in proportion to the memory overfilled (the walk's value); inf when any other
    constraint is violated."""
    if ev.feasible:
        return float(ev.objective)
    if not all(is_memory_violation(v) for v in ev.violations):
        return math.inf
    over = float((np.maximum(ev.memory - ev.capacity, 0.0) / ev.capacity).sum())
    return float(ev.objective) * (1.0 + PENALTY * over)


def _feasible_start(problem: Problem, solution: Solution, budget: int) -> Evaluation | None:
    """The evaluation of ``solution`` when a search over its calls may start from it (one device per stage, no
    shardings, at most ``moves.MAX_NODES`` nodes, a positive budget, feasible); None otherwise."""
    if any(s.replicas != 1 for s in solution.stages) or solution.shardings is not None:
        return None
    if problem.num_nodes > MAX_NODES or budget <= 0:
        return None
    ev = evaluate(problem, solution)
    return ev if ev.feasible else None


def anneal(problem: Problem, solution: Solution, *, budget: int, seed: int = SEED,
           deadline: float | None = None) -> tuple[Solution, int]:
    """The best placement the annealing sees from ``solution`` within ``budget`` evaluations (``solution``
    itself when none is faster and feasible), and the number of times the best improved."""
    ev = _feasible_start(problem, solution, budget)
    if ev is None:
        return solution, 0
    sp = _Space(problem)
    rng = np.random.default_rng(seed)
    pr = _Proposals(sp, rng)
    singles: list[Callable] = [getattr(pr, name) for name, _ in KINDS[:-1]]
    weights = np.array([w for _, w in KINDS])
    weights /= weights.sum()
    best = cur = calls_of(problem, solution)
    best_val = cur_val = ev.objective
    found = evals = misses = 0
    while evals < budget and (deadline is None or time.perf_counter() < deadline):
        cand = _propose(pr, cur, singles, weights)
        if cand is None:
            misses += 1
            if misses > budget:
                break
            continue
        temp = best_val * T_START * (T_END / T_START) ** (evals / budget)
        evals += 1
        e = evaluate(problem, _solution(problem, cand))
        value = _penalised(e)
        if not np.isfinite(value):
            continue
        delta = value - cur_val
        if delta <= 0 or rng.random() < math.exp(-delta / temp):
            cur, cur_val = cand, value
            if e.feasible and cur_val < best_val * (1 - 1e-9):
                best, best_val, found = cur, cur_val, found + 1
    if not found:
        return solution, 0
    return _solution(problem, best), found

"""Call-level moves on a latency placement, each judged by :func:`planmap.evaluate.evaluate` itself.

The latency IP's own anytime search (:mod:`.search`) re-solves the MIP around the incumbent, and the
registry's local search moves one node at a time; both miss placements that need a whole set of
nodes to change call at once. On GNMT's layer graph every method stopped at 84.32 ms while a hand
placement with the embedding in a call of its own (so the encoder's two chains run in parallel on
other accelerators) reaches 82.16 ms. The moves here work on calls (an accelerator's subgraphs, run
in list order on their device) and on CPU nodes:

* take a set ``A`` out of its call — a prefix or suffix of the call in topological order, a node
  that feeds several branches (a shared producer), a branch of the call (a weakly connected
  component once its shared producers are removed), or the whole call;
* put ``A`` into a new call on an accelerator with a free slot (at every position among that
  device's calls), into a neighbouring call (one that produces for or consumes from ``A``), or on
  the CPU;
* a shared producer's move is also tried together with a second move of one branch of its old call
  (isolating the producer alone often gains nothing until a branch leaves as well);
* swap two calls of one device (their run order).

Every candidate is evaluated exactly (no cost formula of its own: memory, convexity, the slot limit
and pins are evaluate's verdict) and accepted when feasible and strictly faster (first improvement,
candidates in a fixed order). The search is deterministic: it stops after a fixed number of
evaluations or when no candidate improves, never on the clock alone (``deadline`` is a safety net for
callers inside a time limit; with it the result may depend on the machine's speed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, Stage, Status

__all__ = ["improve", "calls_of", "moves_budget", "MIN_NODES"]

MAX_CUTS = 24  # prefix/suffix cut points tried per call (evenly spread over larger calls)
MAX_SPAN = 4  # blocks in one run of CPU nodes moved together
MAX_BRANCH_CALL = 400  # calls larger than this are not searched for branches
EVAL_BUDGET = 20_000  # evaluations per improve() call (deterministic stop)
KICK_BUDGET = 2_000  # evaluations of one descent from a compound move
MOVES_SHARE = 0.2  # share of a time limit the moves' evaluation budget is sized for
EVALS_PER_NODE_SECOND = 100_000  # evaluations a second x nodes (evaluate's cost grows with the graph)
MIN_NODES = 60  # smaller graphs: the MIP itself finds what the moves would (the solver skips them)
MAX_NODES = 2_000  # larger graphs: no moves (the reachability table is n x n)

Calls = list[tuple[int, np.ndarray]]  # (device, sorted node ids), accelerator calls in device run order


def calls_of(problem: Problem, solution: Solution) -> Calls:
    """The placement as (device, nodes) per stage, in stage order; one entry per CPU device."""
    sol = solution.compact()
    return [(int(st.device), np.flatnonzero(sol.assignment == k)) for k, st in enumerate(sol.stages)]


def _solution(problem: Problem, calls: Calls) -> Solution:
    a = np.empty(problem.num_nodes, np.int32)
    stages: list[Stage] = []
    for d, nodes in calls:
        if len(nodes):
            a[nodes] = len(stages)
            stages.append(Stage((d,)))
    return Solution(a, tuple(stages), Certificate(Status.HEURISTIC, "call moves"))


class _Scorer:
    """Exact evaluation with a budget; remembers the best feasible placement seen."""

    def __init__(self, problem: Problem, calls: Calls, budget: int, deadline: float | None):
        self.problem, self.budget, self.deadline = problem, budget, deadline
        self.evals = 0
        self.calls = calls
        ev = evaluate(problem, _solution(problem, calls))
        self.value = ev.objective if ev.feasible else np.inf

    def exhausted(self) -> bool:
        return self.evals >= self.budget or (self.deadline is not None and time.perf_counter() > self.deadline)

    def score(self, calls: Calls) -> float:
        self.evals += 1
        ev = evaluate(self.problem, _solution(self.problem, calls))
        return ev.objective if ev.feasible else np.inf

    @staticmethod
    def child(parent: _Scorer, calls: Calls, value: float, budget: int) -> _Scorer:
        """A scorer for a descent from ``calls`` with its own ``budget`` (within the parent's)."""
        sc = object.__new__(_Scorer)
        sc.problem, sc.deadline, sc.evals = parent.problem, parent.deadline, 0
        sc.budget = min(budget, max(0, parent.budget - parent.evals))
        sc.calls, sc.value = calls, value
        return sc

    def better(self, value: float) -> bool:
        return value < self.value * (1 - 1e-9)


def _remove(calls: Calls, k: int, subset: np.ndarray) -> Calls:
    out = list(calls)
    out[k] = (calls[k][0], np.setdiff1d(calls[k][1], subset))
    return [c for c in out if len(c[1])]


def _insert_new(calls: Calls, d: int, pos: int, subset: np.ndarray) -> Calls:
    """``subset`` as a new call on ``d``, run as that device's ``pos``-th call."""
    on = [i for i, (dd, _) in enumerate(calls) if dd == d]
    at = on[pos] if pos < len(on) else len(calls)
    return calls[:at] + [(d, np.sort(subset))] + calls[at:]


def _merge(calls: Calls, k: int, subset: np.ndarray) -> Calls:
    out = list(calls)
    out[k] = (calls[k][0], np.union1d(calls[k][1], subset))
    return out


class _Graph:
    """What the candidate generator needs of the graph: neighbours, forks, CPUs, free devices."""

    def __init__(self, problem: Problem):
        g, topo = problem.graph, problem.topology
        self.problem = problem
        self.succ_ptr, self.succ = g.succ
        self.pred_ptr, self.pred = g.pred
        self.is_cpu = np.asarray(topo.is_cpu, bool)
        self.accs = [int(d) for d in np.flatnonzero(~self.is_cpu)]
        self.cpus = [int(d) for d in np.flatnonzero(self.is_cpu)]
        self.q = int(problem.max_subgraphs)
        outdeg = np.diff(self.succ_ptr)
        self.forks = outdeg >= 2
        # segments of the topological order between nodes that no edge jumps over (a residual block,
        # an Inception module, one layer of a chain): the blocks worth moving whole
        n = len(outdeg)
        src, dst = (np.asarray(x, np.int64) for x in g.node_edges)
        jump = np.zeros(n + 1, np.int64)
        np.add.at(jump, src + 1, 1)
        np.add.at(jump, dst, -1)
        covered = np.cumsum(jump)[:n] > 0
        self.segment = np.cumsum(~covered) - 1
        self._reach: np.ndarray | None = None

    def succ_of(self, v: int) -> np.ndarray:
        return self.succ[self.succ_ptr[v]: self.succ_ptr[v + 1]]

    def pred_of(self, v: int) -> np.ndarray:
        return self.pred[self.pred_ptr[v]: self.pred_ptr[v + 1]]

    def neighbours(self, subset: np.ndarray) -> np.ndarray:
        parts = [self.succ_of(int(v)) for v in subset] + [self.pred_of(int(v)) for v in subset]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def reach(self) -> np.ndarray:
        """(n, n) bool: ``reach[v, w]`` when ``w`` is ``v`` or a descendant of it (computed once)."""
        if self._reach is None:
            n = len(self.succ_ptr) - 1
            r = np.eye(n, dtype=bool)
            for v in range(n - 1, -1, -1):  # node ids are a topological order
                s = self.succ_of(v)
                if len(s):
                    r[v] |= r[s].any(axis=0)
            self._reach = r
        return self._reach

    def branches(self, v: int, nodes: np.ndarray) -> list[np.ndarray]:
        """The branches of shared producer ``v`` inside a call with ``nodes``: for each successor of ``v``
        in the call that no other successor reaches, the call's nodes only it reaches."""
        r = self.reach()
        s = np.intersect1d(self.succ_of(v), nodes)
        heads = [int(h) for h in s if not any(r[int(o), int(h)] for o in s if o != h)]
        if len(heads) < 2:
            return []
        out = []
        for h in heads:
            others = np.asarray(r[[o for o in heads if o != h]].any(axis=0), bool)
            only = nodes[r[h, nodes] & ~others[nodes]]
            if len(only):
                out.append(only)
        return out if len(out) > 1 else []

    def producers(self, nodes: np.ndarray) -> list[int]:
        """Shared producers that feed ``nodes`` (inside the call or just before it)."""
        near = np.union1d(nodes, self.neighbours(nodes))
        return [int(v) for v in near if self.forks[v]]


def _subsets(gr: _Graph, nodes: np.ndarray, cpu: bool = False) -> Iterator[np.ndarray]:
    """Sets worth taking out of a call with ``nodes`` (each once): shared producers, branches, cuts
    (evenly spread, and at block boundaries), on the CPU any run of up to ``MAX_SPAN`` blocks, the
    whole call."""
    seen: set[bytes] = set()

    def fresh(sub: np.ndarray) -> bool:
        key = np.asarray(sub, np.int64).tobytes()
        if key in seen:
            return False
        seen.add(key)
        return True

    for v in nodes[gr.forks[nodes]].tolist():
        yield np.array([v], np.int64)
    if len(nodes) <= MAX_BRANCH_CALL:
        for v in gr.producers(nodes):
            yield from (b for b in gr.branches(v, nodes) if fresh(b))
    m = len(nodes)
    seg = gr.segment[nodes]
    if m > 1:
        cuts = {int(round(x)) for x in np.linspace(1, m - 1, min(MAX_CUTS, m - 1))}
        edges = np.flatnonzero(np.diff(seg) != 0) + 1  # block boundaries
        cuts |= set(edges[np.linspace(0, len(edges) - 1, min(MAX_CUTS, len(edges))).astype(int)].tolist())
        for c in sorted(cuts):
            yield from (s for s in (nodes[:c], nodes[c:]) if fresh(s))
    if cpu:  # CPU nodes are separate units: any run of whole blocks may leave for an accelerator
        ids = np.unique(seg)
        for i in range(len(ids)):
            for j in range(i, min(len(ids), i + MAX_SPAN)):
                sub = nodes[(seg >= ids[i]) & (seg <= ids[j])]
                if fresh(sub):
                    yield sub
    if fresh(nodes):
        yield nodes


def _destinations(gr: _Graph, calls: Calls, subset: np.ndarray, merges: bool = True,
                  home: np.ndarray | None = None) -> Iterator[Calls]:
    """Placements with ``subset`` (already removed from ``calls``; ``home``: what is left of the call it
    left) put somewhere else."""
    count = {d: 0 for d in gr.accs}
    for d, _ in calls:
        if d in count:
            count[d] += 1
    empty = [d for d in gr.accs if count[d] == 0]
    if not _distinct(gr.problem):
        empty = empty[:1]  # empty accelerators alike (interchangeable): one suffices
    for d in empty:  # a new call on an idle accelerator first: what runs in parallel
        yield _insert_new(calls, d, 0, subset)
    for d in gr.accs:  # a new call, at each position among a busy device's calls
        if 0 < count[d] < gr.q:
            for pos in range(count[d] + 1):
                yield _insert_new(calls, d, pos, subset)
    for c in gr.cpus:
        k = next((i for i, (d, _) in enumerate(calls) if d == c), None)
        if k is None:
            yield calls + [(c, np.sort(subset))]
        elif home is None or not np.array_equal(calls[k][1], home):
            yield _merge(calls, k, subset)
    if not merges:
        return
    near = set(gr.neighbours(subset).tolist())
    for k, (_, nodes) in enumerate(calls):  # into a call that exchanges a value with it (not the one it left)
        if near.intersection(nodes.tolist()) and (home is None or not np.array_equal(nodes, home)):
            yield _merge(calls, k, subset)


def _distinct(problem: Problem) -> bool:
    """Whether empty accelerators can differ (then each is tried); cached on the problem's memo."""
    memo = problem.memo
    key = "latency.moves.distinct"
    if key not in memo:
        from .data import interchangeable_devices

        classes = interchangeable_devices(problem)
        accs = [int(d) for d in np.flatnonzero(~np.asarray(problem.topology.is_cpu, bool))]
        memo[key] = not any(set(accs) <= set(c) for c in classes)
    return bool(memo[key])


def _candidates(gr: _Graph, calls: Calls, only: set[int] | None = None) -> Iterator[tuple[Calls, int, np.ndarray]]:
    """(new placement, index of the call the set left, the set) for every single move."""
    for k, (d, nodes) in enumerate(calls):
        if only is not None and k not in only:
            continue

        def rest_of(sub: np.ndarray, nodes: np.ndarray = nodes) -> np.ndarray:
            return np.setdiff1d(nodes, sub)
        if gr.is_cpu[d]:
            for v in nodes.tolist():  # a CPU node back onto an accelerator
                sub = np.array([v], np.int64)
                yield from ((c, k, sub) for c in _destinations(gr, _remove(calls, k, sub), sub, home=rest_of(sub)))
        for sub in _subsets(gr, nodes, cpu=bool(gr.is_cpu[d])):
            rest = _remove(calls, k, sub)
            yield from ((c, k, sub) for c in _destinations(gr, rest, sub, home=rest_of(sub)))
    for k in range(len(calls)):  # reorder two calls of a device
        for j in range(k + 1, len(calls)):
            if calls[k][0] == calls[j][0] and not gr.is_cpu[calls[k][0]]:
                out = list(calls)
                out[k], out[j] = calls[j], calls[k]
                yield out, -1, np.zeros(0, np.int64)


def _descend(gr: _Graph, sc: _Scorer) -> int:
    """First-improvement descent over single moves until none improves (or the budget ends); the
    number of moves accepted."""
    accepted = 0
    while not sc.exhausted():
        for cand, _, _ in _candidates(gr, sc.calls):
            if sc.exhausted():
                return accepted
            val = sc.score(cand)
            if sc.better(val):
                sc.calls, sc.value = cand, val
                accepted += 1
                break
        else:
            return accepted
    return accepted


def _best_of(sc: _Scorer, options: Iterator[Calls]) -> tuple[Calls | None, float]:
    best, val = None, np.inf
    for cand in options:
        if sc.exhausted():
            break
        v = sc.score(cand)
        if v < val:
            best, val = cand, v
    return best, val


def _at(calls: Calls, node: int) -> int:
    return next(i for i, (_, ns) in enumerate(calls) if node in ns)


def _fan_out(gr: _Graph, sc: _Scorer, calls: Calls, k: int, v: int) -> tuple[Calls | None, float]:
    """The branches of shared producer ``v`` in call ``k`` spread over calls of their own: what follows
    the branches (nodes that more than one branch reaches) leaves the call first, so the call stays
    convex, then each branch but the first goes where it finishes soonest (or stays); each step
    chosen by exact evaluation."""
    nodes = calls[k][1]
    branches = gr.branches(v, nodes)
    if not branches:
        return None, np.inf
    spread = np.concatenate(branches)
    post = nodes[gr.reach()[v, nodes] & ~np.isin(nodes, spread) & (nodes != v)]
    state, val = calls, np.inf
    if len(post):
        first, val = _best_of(sc, _destinations(gr, _remove(calls, k, post), post, home=np.setdiff1d(nodes, post)))
        if first is None:
            return None, np.inf
        state = first
    for b in branches[1:]:
        j = _at(state, int(b[0]))
        moved, mval = _best_of(sc, _destinations(gr, _remove(state, j, b), b, home=np.setdiff1d(state[j][1], b)))
        if moved is not None and mval < val:
            state, val = moved, mval
    return (state, val) if state is not calls else (None, np.inf)


def _kicks(gr: _Graph, sc: _Scorer) -> Iterator[tuple[Calls, float]]:
    """Compound moves that need not gain on their own, with their latency: a call's branches fanned out
    over calls of their own (:func:`_fan_out`), and a shared producer moved into a new call of its own
    with one of the branches of the call it left into another (so the branches run in parallel);
    descending from them finds what neither move finds alone."""
    calls = sc.calls
    for k, (d, nodes) in enumerate(calls):
        if gr.is_cpu[d] or len(nodes) > MAX_BRANCH_CALL:
            continue
        for v in nodes[gr.forks[nodes]].tolist():
            sub = np.array([v], np.int64)
            rest = np.setdiff1d(nodes, sub)
            branches = gr.branches(v, rest)
            if not branches:
                continue
            for first in _destinations(gr, _remove(calls, k, sub), sub, merges=False):
                at = next(i for i, (dd, ns) in enumerate(first) if dd == d and np.array_equal(ns, rest))
                for b in branches:
                    for cand in _destinations(gr, _remove(first, at, b), b, merges=False):
                        if sc.exhausted():
                            return
                        yield cand, sc.score(cand)
    for k, (d, nodes) in enumerate(calls):
        if gr.is_cpu[d] or len(nodes) > MAX_BRANCH_CALL:
            continue
        for v in gr.producers(nodes):
            state, val = _fan_out(gr, sc, calls, k, v)
            if state is not None:
                yield state, val


def moves_budget(problem: Problem, time_limit: float, share: float = MOVES_SHARE, cap: int = EVAL_BUDGET) -> int:
    """Evaluations a search may spend under ``time_limit`` seconds: a count, not a clock, so the
    same inputs give the same plan (about ``share`` of the limit on an idle machine, at most ``cap``)."""
    n = max(50, problem.num_nodes)
    return int(min(cap, share * time_limit * EVALS_PER_NODE_SECOND / n))


def improve(problem: Problem, solution: Solution, *, budget: int = EVAL_BUDGET, kick_budget: int = KICK_BUDGET,
            deadline: float | None = None) -> tuple[Solution, int]:
    """The best placement the call moves reach from ``solution`` (itself when none is faster and
    feasible), and the number of improvements found. Compound moves first (iterated local search: a
    descent from a kick replaces the incumbent only when it ends strictly faster; the starts it gets
    are already local optima of single-node moves), then a descent over single moves. ``budget`` caps
    the evaluations in all, ``kick_budget`` those of one descent from a compound move."""
    if any(s.replicas != 1 for s in solution.stages) or solution.shardings is not None:
        return solution, 0
    if problem.num_nodes > MAX_NODES:
        return solution, 0
    gr = _Graph(problem)
    sc = _Scorer(problem, calls_of(problem, solution), budget, deadline)
    if not np.isfinite(sc.value):
        return solution, 0
    found = 0
    restart = True
    while restart and not sc.exhausted():
        restart = False
        for kick, val in _kicks(gr, sc):
            if sc.exhausted():
                break
            if not np.isfinite(val):
                continue
            sub = _Scorer.child(sc, kick, val, kick_budget)
            _descend(gr, sub)
            sc.evals += sub.evals
            if sc.better(sub.value):
                sc.calls, sc.value = sub.calls, sub.value
                found += 1
                restart = True
                break
    found += _descend(gr, sc)
    if not found:
        return solution, 0
    return _solution(problem, sc.calls), found

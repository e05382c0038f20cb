"""Local search's throughput descent: unit moves, unit swaps and device swaps scored incrementally.

Candidates are scored by :class:`.throughput_loads.ThroughputLoads` — (bottleneck, sum of squared
loads), so a move that relieves a device on a plateau of the maximum still counts — and the best one
is confirmed by :func:`planmap.evaluate.evaluate` before it is taken. Units (colocation classes,
e.g. a layer's forward and backward) on the most loaded devices go first. Contiguous pipelines only
make moves that keep every stage convex: a unit moves to a stage between its predecessors' and
successors' stages in pipeline order, so positions stay monotone along every forward edge.
"""

from __future__ import annotations

import numpy as np

from planmap.evaluate import Evaluation
from planmap.problem import Problem, Solution

from ..segments import forward_mask, solution_from_devices
from .local_search_state import EPS, SearchState
from .throughput_loads import ThroughputLoads

__all__ = ["descend_throughput"]


def _stage_positions(problem: Problem, ev: Evaluation, sol: Solution) -> np.ndarray:
    """Pipeline position of each device (devices without a stage: -1)."""
    pos = np.full(problem.num_devices, -1, np.int64)
    for p, k in enumerate(ev.stage_order):
        for d in sol.stages[k].devices:
            pos[d] = p
    return pos


def descend_throughput(search: SearchState, device_of: np.ndarray, units: list[list[int]], unit_of: np.ndarray):
    """Descent from ``device_of`` until no move or swap improves (or the budget ends): per round, each
    unit on the most loaded devices tries every device it may use and takes the best scoring one that
    evaluate confirms; then unit swaps, then device swaps. Returns (device_of, Solution, Evaluation)."""
    problem = search.problem
    g = problem.graph
    cert = search.certificate
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
                if tev.feasible and tev.objective <= ev.objective * (1 + 1e-9) + EPS:
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
    return key[0] < current[0] * (1 - 1e-12) - EPS or (
        key[0] <= current[0] * (1 + 1e-12) + EPS and key[1] < current[1] * (1 - 1e-9) - EPS)


def _unit_swaps(search: SearchState, model: ThroughputLoads, sol, ev, current, cert, units, unit_l, b, valid):
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
                if tev.feasible and tev.objective <= ev.objective * (1 + 1e-9) + EPS:
                    search.offer(trial, tev)
                    return True, trial, tev, key
            model.undo(old)
    return False, sol, ev, current


def _device_swaps(search: SearchState, model: ThroughputLoads, sol, ev, current, cert):
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
            if tev.feasible and tev.objective < ev.objective * (1 - 1e-12) - EPS:
                na, nb_ = np.flatnonzero(dev == a).tolist(), np.flatnonzero(dev == b).tolist()
                model.move(na, b)
                model.move(nb_, a)
                search.offer(trial, tev)
                return True, trial, tev, model.key()
    return False, sol, ev, current


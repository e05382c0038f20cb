"""Local search's latency descent: whole calls and CPU regions moved or swapped, then single operators.

The latency of a plan has no cheap exact delta — the schedule is global — so every candidate is
re-split into calls (:func:`..segments.solution_from_devices`) and evaluated in full. Candidates are
few and large first (each accelerator call and each connected CPU region to another device, or two
of them trading devices, repaired when the move leaves more than ``q`` calls on a device); when
none helps, operators on a device boundary move to a neighbour's device or the CPU, or swap with a
neighbour.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from planmap.evaluate import Evaluation
from planmap.graph import UnionFind
from planmap.problem import Problem, Solution

from ..repair import repair
from ..segments import adjacency, solution_from_devices
from .local_search_state import EPS, SearchState

__all__ = ["descend_latency"]


class _Incumbent(TypedDict):
    """The search's current placement: node devices, its solution and that solution's evaluation."""

    dev: np.ndarray
    sol: Solution
    ev: Evaluation



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
    portable = np.asarray(problem.allowed[:, problem.topology.accelerators].all(axis=1))
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
    sets = UnionFind(n)
    for a, b in zip(s.tolist(), d.tolist(), strict=True):
        sets.union(a, b)
    comps: dict[int, list[int]] = {}
    for v in members.tolist():
        comps.setdefault(sets.find(v), []).append(v)
    return list(comps.values())


def descend_latency(search: SearchState, device_of: np.ndarray, sol: Solution, ev: Evaluation, units_of,
                    candidates_for):
    """First-improvement descent, each candidate re-split into calls and evaluated in full: whole calls
    and CPU regions moved to another device (few candidates, large steps); when none helps, boundary
    moves and neighbour swaps of single operators."""
    problem = search.problem
    cert = search.certificate
    cpus = [int(d) for d in problem.topology.cpus]
    accs = [int(d) for d in problem.topology.accelerators]
    nb = search.nb
    adj = adjacency(problem)
    preds, succs = adj
    state: _Incumbent = {"dev": device_of.copy(), "sol": sol, "ev": ev}

    def attempt(t: np.ndarray, fix: bool = False) -> bool:
        """Take ``t`` if it is better; with ``fix``, an infeasible ``t`` gets a second chance repaired
        (more calls than q: the closest placement with one call per accelerator)."""
        trial = solution_from_devices(problem, t, cert, adjacency_lists=adj)
        tev = search.evaluate(trial)
        if not tev.feasible and fix:
            t = repair(problem, t)
            trial = solution_from_devices(problem, t, cert, adjacency_lists=adj)
            tev = search.evaluate(trial)
        if tev.feasible and tev.objective < state["ev"].objective * (1 - 1e-12) - EPS:
            state["dev"], state["sol"], state["ev"] = t, trial, tev
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

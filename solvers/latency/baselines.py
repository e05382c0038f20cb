"""Where the latency IP starts: the best feasible placement any quick method finds.

:func:`best_baseline` asks the given warm start, the packed splits (:func:`packed_splits`), the
contiguous split DP (:mod:`.splits`), the articulation-chain DP (:mod:`.chainstart`) and the registry's
baselines (those installed, looked up by name) for the fastest feasible placement: the MIP's warm start and
horizon. The only module of the latency IP that reaches the registry; only :mod:`.ip` imports it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions
from planmap.vocabulary import Mode, ObjectiveKind

from ..timebox import TimeBoxExpired, time_box
from .chainstart import chain_starts
from .splits import best_splits

__all__ = ["best_baseline", "packed_splits", "BASELINES"]

BASELINES = ("greedy", "local-search", "metis", "dp", "even", "single")


def _pack(problem: Problem, devices: np.ndarray, target: float) -> np.ndarray:
    """Device of each node: topological order cut into consecutive pieces (convex by construction),
    a new accelerator taking over when the current one is full or has ``target`` seconds of work;
    what fits nowhere (or cannot run on accelerators) goes to the fastest allowed CPU."""
    g, cost, topo = problem.graph, problem.cost, problem.topology
    cap = problem.capacity
    node_mem = g.state_bytes.astype(float) + (cost.stash_bytes if problem.mode is Mode.TRAINING else 0.0)
    ws = cost.working_set.astype(float)
    pv, pn = cost.param_use
    params_of: list[list[int]] = [[] for _ in range(g.num_nodes)]
    for p_, v in zip(pv.tolist(), pn.tolist(), strict=True):
        params_of[v].append(p_)
    pbytes = g.value_bytes.astype(float) * cost.param_factor
    t = np.where(problem.allowed, cost.device_compute, np.inf)
    cpus = topo.cpus
    dev = np.full(g.num_nodes, -1, np.int64)
    held: set[int] = set()
    k, mem, wmax, load = 0, 0.0, 0.0, 0.0
    for v in range(g.num_nodes):
        placed = False
        while k < len(devices):
            d = devices[k]
            if problem.allowed[v, d]:
                need = node_mem[v] + sum(pbytes[p_] for p_ in set(params_of[v]) - held) + max(0.0, ws[v] - wmax)
                if mem + need <= cap[d] * (1 - 1e-6) and (load + t[v, d] <= target or load == 0.0):
                    dev[v] = d
                    mem, wmax, load = mem + need, max(wmax, ws[v]), load + t[v, d]
                    held |= set(params_of[v])
                    placed = True
                    break
                if load == 0.0 and mem == 0.0:
                    break  # does not fit even an empty device: CPU
                k, mem, wmax, load, held = k + 1, 0.0, 0.0, 0.0, set()
                continue
            break
        if not placed:
            ok = cpus[problem.allowed[v, cpus]] if len(cpus) else cpus
            if len(ok) == 0:
                return np.full(g.num_nodes, -1, np.int64)
            dev[v] = int(ok[np.argmin(t[v, ok])])
    cls = g.colocation
    for c in np.unique(cls[cls >= 0]).tolist():  # a class goes where its heaviest member went
        members = np.flatnonzero(cls == c)
        dev[members] = dev[members[np.argmax(np.nan_to_num(cost.device_compute[members, dev[members]], posinf=0))]]
    return dev


def packed_splits(problem: Problem) -> list[Solution]:
    """Memory-aware contiguous splits (what a person does for a model that barely fits): pack the
    topological order onto as few accelerators as memory allows, and onto more with balanced work."""
    return list(_packed_splits(problem))


def _packed_splits(problem: Problem) -> Iterator[Solution]:
    """:func:`packed_splits` one at a time (one packing per accelerator count: thousands on a large
    cluster, so a time-boxed caller keeps the ones it saw)."""
    from planmap.problem import Certificate, Status

    topo = problem.topology
    acc = topo.accelerators
    if len(acc) == 0 or problem.num_nodes == 0:
        return
    t = np.where(problem.allowed[:, acc], problem.cost.device_compute[:, acc], np.inf).min(axis=1)
    total = float(t[np.isfinite(t)].sum())  # work of the nodes an accelerator can run
    seen = set()
    for k in [None, *range(1, len(acc) + 1)]:
        target = math.inf if k is None else total / k * 1.02
        dev = _pack(problem, acc, target)
        if (dev < 0).any() or dev.tobytes() in seen:  # many targets give the same packing on large clusters
            continue
        seen.add(dev.tobytes())
        yield Solution.from_devices(problem, dev, Certificate(Status.HEURISTIC, "packed split"))


def best_baseline(problem: Problem, options: SolveOptions, time_budget: float,
                  seconds: float | None = None) -> tuple[Solution | None, str, list[str]]:
    """The fastest feasible placement among ``options.warm_start`` and the registry's baselines
    (those installed; the throughput DP's max-load split counts as a latency placement too).

    ``seconds`` bounds the whole search (on thousands of devices the baselines alone can outlast the
    time limit): when it runs out the best placement found so far is returned, and when there is none
    yet, the even split (one evaluation) is the answer."""
    notes: list[str] = []
    best: list[tuple[float, Solution, str]] = []  # the best so far, kept when the time box expires
    t0 = time.perf_counter()
    try:
        with time_box(seconds):
            _search(problem, options, time_budget, best, notes,
                    None if seconds is None else t0 + seconds)
    except TimeBoxExpired:
        notes.append(f"baselines stopped after {time.perf_counter() - t0:.2f}s, their share of the time limit")
        if not best:
            _consider(problem, _even(problem, options), "even", best, notes)
    if not best:
        return None, "", notes
    return best[0][1], best[0][2], notes


def _consider(problem: Problem, sol: Solution | None, name: str, best: list, notes: list[str]) -> None:
    """Keep ``sol`` in ``best`` (one entry: objective, solution, name) when feasible and faster."""
    if sol is None:
        return
    ev = evaluate(problem, sol)
    if not ev.feasible:
        notes.append(f"{name}: infeasible ({ev.violations[0]})")
        return
    if not best or ev.objective < best[0][0]:
        best[:] = [(ev.objective, sol, name)]


def _even(problem: Problem, options: SolveOptions) -> Solution | None:
    from planmap import solvers

    try:
        return solvers.get("even").solve(problem, replace(options, warm_start=None, progress=None))
    except PlanmapError:
        return None


def _search(problem: Problem, options: SolveOptions, time_budget: float, best: list, notes: list[str],
            deadline: float | None) -> None:
    """Try every start method in turn (see :func:`best_baseline`); none is started after ``deadline``."""
    from planmap import solvers

    if options.warm_start is not None:
        _consider(problem, options.warm_start, "given warm start", best, notes)
    for sol in _packed_splits(problem):
        _consider(problem, sol, "packed split", best, notes)
    for sol in best_splits(problem):
        _consider(problem, sol, "contiguous split DP", best, notes)
    for sol in chain_starts(problem)[:1]:
        _consider(problem, sol, "articulation-chain DP", best, notes)
    share = max(1.0, min(30.0, 0.1 * time_budget))
    for name in BASELINES:
        left = math.inf if deadline is None else deadline - time.perf_counter()
        if left <= 0:
            notes.append(f"{name}: not tried (time limit)")
            continue
        try:
            solver = solvers.get(name)
        except SolverUnavailableError:
            notes.append(f"{name}: not available")
            continue
        target = problem if problem.objective in solver.objectives else None
        if target is None and name == "dp" and "throughput" in solver.objectives:
            target = replace(problem, objective=ObjectiveKind.THROUGHPUT, contiguous=True, replication=False)
        if target is None:
            continue
        base_opts = replace(options, time_limit=min(share, left), warm_start=None, progress=None)
        try:
            sol = solver.solve(target, base_opts)
        except KeyboardInterrupt:  # Ctrl-C: keep what the baselines found so far
            notes.append(f"interrupted during {name}")
            break
        except PlanmapError as e:
            notes.append(f"{name}: {e}")
            continue
        except Exception as e:  # a baseline's bug must not take the exact solver down with it
            notes.append(f"{name}: failed ({type(e).__name__}: {e})")
            continue
        if any(s.replicas != 1 for s in sol.stages):
            continue
        _consider(problem, Solution(sol.assignment, sol.stages, sol.certificate), name, best, notes)
    _polish(problem, options, share, best, notes, deadline)


POLISH_MIN_NODES = 60  # below this the MIP itself improves the start quickly


def _polish(problem: Problem, options: SolveOptions, share: float, best: list, notes: list[str],
            deadline: float | None) -> None:
    """Local search from the best start found (the baselines' own local search starts from its own
    baselines, not from the split DP's placement, which is usually the best on layer graphs): on
    Inception-v3 layers it takes the start from 217.3 to 201.8 ms."""
    from planmap import solvers

    left = math.inf if deadline is None else deadline - time.perf_counter()
    if not best or problem.num_nodes < POLISH_MIN_NODES or left <= 1.0:
        return
    try:
        solver = solvers.get("local-search")
        sol = solver.solve(problem, replace(options, time_limit=min(share, left), warm_start=best[0][1], progress=None))
    except (SolverUnavailableError, PlanmapError) as e:
        notes.append(f"local search from the start: {e}")
        return
    _consider(problem, Solution(sol.assignment, sol.stages, sol.certificate), f"local search from {best[0][2]}",
              best, notes)

"""Baselines that need no search: the "expert" even split, and everything on one accelerator.

``even`` is what a person does by hand (the human-expert splits of the papers): cut the model into
contiguous pieces of equal work, one per accelerator, at layer boundaries when the graph knows its
layers. Work is measured as each node's time on the device that gets it, so two GPU generations
get pieces in proportion to their speed. In training, the cut is made on the forward graph and
each backward node follows its forward partner (colocation class), as in the papers.

``single`` puts the whole model on one accelerator (the papers' "one accelerator" baseline): the
fastest one whose memory holds it, else the fastest one, reported as over memory. Only a cluster
without accelerators runs it on a CPU.
"""

from __future__ import annotations

import time

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.vocabulary import ObjectiveKind

from ..repair import follow_colocation, single_device

__all__ = ["EvenSplit", "SingleDevice", "even_split"]

VERSION = "1"


def _pipeline_devices(problem: Problem) -> np.ndarray:
    topo = problem.topology
    devs = topo.accelerators if len(topo.accelerators) else topo.cpus
    k = len(devs)
    if problem.max_stages is not None:
        k = min(k, problem.max_stages)
    return devs[: max(1, min(k, problem.graph.num_nodes))]


def even_split(problem: Problem, devices: np.ndarray) -> np.ndarray:
    """Device of each node: contiguous cuts of the (forward) topological order with equal work."""
    g, cost = problem.graph, problem.cost
    fwd = ~g.backward if g.backward.any() else np.ones(g.num_nodes, bool)
    idx = np.flatnonzero(fwd)
    k = len(devices)
    t = cost.device_compute[np.ix_(idx, devices)]
    t = np.where(np.isfinite(t), t, np.nan)
    # speed of each device relative to the first, from the nodes both can run
    base = np.nansum(t[:, 0])
    scale = np.array([np.nansum(t[:, j]) / base if base > 0 else 1.0 for j in range(k)])
    w = np.nan_to_num(t[:, 0], nan=0.0)
    share = (1.0 / scale) / (1.0 / scale).sum()
    targets = np.cumsum(share)[:-1] * w.sum()
    cum = np.cumsum(w)
    layers = g.layer[idx]
    cuts_ok = np.ones(len(idx) + 1, bool)
    if (layers >= 0).any():
        change = np.ones(len(idx) + 1, bool)
        change[1:-1] = layers[1:] != layers[:-1]
        cuts_ok = change
    candidates = np.flatnonzero(cuts_ok)
    cuts = []
    last = 0
    for target in targets:
        pos = np.searchsorted(cum, target) + 1  # first index after the cumulative target
        cand = candidates[(candidates > last) & (candidates < len(idx))]
        if len(cand) == 0:
            break
        c = int(cand[np.argmin(np.abs(cand - pos))])
        cuts.append(c)
        last = c
    piece = np.searchsorted(np.asarray(cuts, int), np.arange(len(idx)), side="right")
    dev = np.full(g.num_nodes, devices[0], np.int32)
    dev[idx] = devices[piece]
    return follow_colocation(problem, dev, fwd)


class EvenSplit:
    """The human-expert baseline: contiguous pieces of equal work, one per accelerator."""

    name = "even"
    objectives = frozenset(ObjectiveKind)

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        dev = even_split(problem, _pipeline_devices(problem))
        sol = Solution.from_devices(problem, dev, Certificate(Status.HEURISTIC, self.name, version=VERSION),
                                    schedule=(problem.schedule if problem.objective is ObjectiveKind.THROUGHPUT
                                              else None),
                                    microbatches=max(problem.microbatches, 1))
        ev = evaluate(problem, sol)
        return sol.with_certificate(objective=ev.objective, wall_time=time.perf_counter() - t0)


class SingleDevice:
    """Everything on one accelerator: the fastest whose memory holds the whole model."""

    name = "single"
    objectives = frozenset(ObjectiveKind)

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        sol, ev = single_device(problem, Certificate(Status.HEURISTIC, self.name, version=VERSION),
                                deadline=t0 + options.time_limit)
        return sol.with_certificate(objective=ev.objective, wall_time=time.perf_counter() - t0)


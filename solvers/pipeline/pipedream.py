"""``pipedream``: PipeDream's planner (Narayanan et al., SOSP 2019) as a baseline under planmap's evaluator.

PipeDream splits a *chain of layers* into consecutive stages, each optionally replicated, by a
dynamic program. Following Tarnawski et al.'s reproduction (``dp.cpp -pipeDream``), the operator
graph is first turned into such a chain:

1. nodes are grouped into layers — by the graph's layer ids when it has them, otherwise by
   contracting biconnected components (the tails of the edges of one component form a layer),
   which is how PipeDream's profiler sees branchy blocks (an Inception block, a residual block);
2. the layers are put in one topological order (linearised).

The stages are then contiguous ranges of that chain, found by the same exact DP as ``dp``
(:mod:`planmap.solvers.pipeline.engine`) restricted to the chain's prefixes — so the plan is costed
exactly as :func:`planmap.evaluate.evaluate` costs it, with replication when the problem allows
it. The gap to ``dp`` is what the layer-chain restriction costs.

``pipedream`` with solver option ``granularity: unit`` skips step 1 (a chain of units): a fast,
good upper bound the ``dp`` solver starts from.
"""

from __future__ import annotations

import time

import numpy as np

from planmap.errors import InfeasibleError
from planmap.graph import UnionFind, topological_order
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.vocabulary import ObjectiveKind

from .engine import to_solution
from .ideals import pack
from .prepare import prepare
from .stage_units import Units, build_units, strong_components

__all__ = ["PipeDream", "layer_chain", "chain_ideals"]

VERSION = "1"


def _biconnected_tails(k: int, pairs: np.ndarray) -> np.ndarray:
    """Label per unit (its set's smallest unit): the tails of the edges of each biconnected component merged."""
    adj: list[list[tuple[int, int]]] = [[] for _ in range(k)]
    for e, (a, b) in enumerate(pairs.tolist()):
        adj[a].append((b, e))
        adj[b].append((a, e))
    sets = UnionFind(k)
    disc = [-1] * k
    low = [0] * k
    clock = 0
    estack: list[int] = []
    for root in range(k):
        if disc[root] >= 0:
            continue
        disc[root] = low[root] = clock
        clock += 1
        stack = [(root, -1, iter(adj[root]))]
        while stack:
            v, pe, it = stack[-1]
            advanced = False
            for w, e in it:
                if e == pe:
                    continue
                if disc[w] < 0:
                    estack.append(e)
                    disc[w] = low[w] = clock
                    clock += 1
                    stack.append((w, e, iter(adj[w])))
                    advanced = True
                    break
                if disc[w] < disc[v]:
                    estack.append(e)
                    low[v] = min(low[v], disc[w])
            if advanced:
                continue
            stack.pop()
            if stack:
                u = stack[-1][0]
                low[u] = min(low[u], low[v])
                if low[v] >= disc[u]:  # u separates: pop one biconnected component
                    tails = []
                    while True:
                        x = estack.pop()
                        tails.append(int(pairs[x, 0]))
                        if x == pe:
                            break
                    for t in tails[1:]:
                        sets.union(tails[0], t)
    return np.array([sets.find(x) for x in range(k)], np.int64)


def layer_chain(problem: Problem, units: Units, granularity: str = "layer") -> np.ndarray:
    """Rank of each unit's layer in one topological order of the layers (ties share a rank)."""
    g = problem.graph
    U = units.num_units
    if granularity == "unit":
        label = np.arange(U)
    elif (g.layer >= 0).any():
        key = np.full(U, -1, np.int64)
        lay = g.layer.astype(np.int64)
        np.maximum.at(key, units.unit_of, np.where(lay >= 0, lay, -1))
        label = np.where(key >= 0, key, key.max(initial=0) + 1 + np.arange(U))
    else:
        label = _biconnected_tails(U, units.edges)
    _, label = np.unique(label, return_inverse=True)
    k = int(label.max()) + 1
    edges = units.edges.reshape(-1, 2)
    ea, eb = label[edges[:, 0]], label[edges[:, 1]]
    keep = ea != eb
    _, comp = strong_components(k, ea[keep], eb[keep])
    ca, cb = comp[ea[keep]], comp[eb[keep]]
    inner = ca != cb
    pairs = np.unique(np.stack([ca[inner], cb[inner]], 1), axis=0) if inner.any() else np.zeros((0, 2), np.int64)
    nc = int(comp.max()) + 1
    first = np.full(nc, U, np.int64)
    np.minimum.at(first, comp[label], np.arange(U))
    order = topological_order(nc, pairs, first)
    rank = np.empty(nc, np.int64)
    rank[order] = np.arange(nc)
    return rank[comp[label]]


def chain_ideals(unit_rank: np.ndarray, num_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Ideals of the DP (reversed pipeline) order that are suffixes of the chain, and DP unit ids."""
    dp_unit = num_units - 1 - np.arange(num_units)  # DP numbering of pipeline unit u
    k = int(unit_rank.max()) + 1 if num_units else 0
    rows = np.zeros((k + 1, num_units), bool)
    for c in range(1, k + 1):
        rows[c, dp_unit[unit_rank >= k - c]] = True
    return pack(rows), dp_unit


class PipeDream:
    """PipeDream's layer-chain planner (with stage replication when allowed), exactly costed."""

    name = "pipedream"
    objectives = frozenset({ObjectiveKind.THROUGHPUT})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        granularity = str(options.passthrough.get("granularity", "layer"))
        units = build_units(problem)
        rank = layer_chain(problem, units, granularity)
        bits, dp_unit = chain_ideals(rank, units.num_units)
        unit_of = dp_unit[units.unit_of]
        prep = prepare(problem, bits=bits, unit_of=unit_of, num_units=units.num_units)
        res = prep.engine.run(np.inf, problem.variant)
        if not np.isfinite(res.value):
            raise InfeasibleError(f"{problem.name}: no split of the {len(bits) - 1} {granularity}s into stages fits "
                                  "the devices' memory")
        cert = Certificate(Status.HEURISTIC, self.name, objective=res.value, version=VERSION,
                           message=f"chain of {len(bits) - 1} {granularity}s", options={"granularity": granularity},
                           wall_time=time.perf_counter() - t0)
        return to_solution(problem, prep.unit_of, prep.bits, prep.classes, res, cert)

"""Per-node memory terms the baseline heuristics build their estimates from.

:func:`planmap.evaluate.evaluate` charges a device its distinct parameters (x ``param_factor``), the
state of its nodes, stashed activations x in-flight microbatches and its largest working set. The
heuristics (greedy's simulations and fill, local search's incremental loads, METIS's memory
balance, the repair DP) rebuild parts of that per node, and each used to spell the same steps out;
they live here so that every heuristic reads the cost model the same way, down to the order of the
floating-point additions (plans must not change when a heuristic is refactored).
"""

from __future__ import annotations

import numpy as np

from planmap.problem import Problem

__all__ = ["node_params", "add_param_bytes", "stashed_bytes", "node_memory"]


def _param_pairs(problem: Problem) -> np.ndarray | None:
    """Distinct (parameter value, node) uses, sorted by value then node; None without parameters."""
    pv, pn = problem.cost.param_use
    if not len(pv):
        return None
    return np.unique(np.stack([pv, pn], 1), axis=0)


def node_params(problem: Problem) -> list[list[int]]:
    """Per node, the distinct parameter values it uses (ascending) — what the simulations count
    once per device as nodes arrive and leave."""
    params: list[list[int]] = [[] for _ in range(problem.graph.num_nodes)]
    pairs = _param_pairs(problem)
    if pairs is not None:
        for v, node in pairs.tolist():
            params[node].append(v)
    return params


def add_param_bytes(problem: Problem, out: np.ndarray) -> np.ndarray:
    """Add to ``out`` (n,), in place, each node's parameter bytes x ``param_factor`` — a parameter
    counted at every node that uses it, so sums over a set of nodes are conservative. Returns ``out``.

    In place rather than returned separately so callers keep their order of additions (base first,
    then one parameter after another), and with it their exact floating-point results."""
    pairs = _param_pairs(problem)
    if pairs is not None:
        np.add.at(out, pairs[:, 1], problem.graph.value_bytes[pairs[:, 0]] * problem.cost.param_factor)
    return out


def stashed_bytes(problem: Problem) -> np.ndarray:
    """(n,) activation bytes each node keeps per in-flight microbatch: the stash in training, none in
    inference (nothing waits for a backward pass)."""
    if problem.mode == "training":
        return problem.cost.stash_bytes.astype(float)
    return np.zeros(problem.graph.num_nodes)


def node_memory(problem: Problem) -> tuple[np.ndarray, float]:
    """Conservative per-node bytes (parameters counted at every use) and the largest working set."""
    g, cost = problem.graph, problem.cost
    mem = add_param_bytes(problem, g.state_bytes.astype(float).copy())
    if problem.mode == "training":
        stash = cost.stash_bytes.astype(float)
        mem += stash * (problem.in_flight(0, max(1, problem.num_devices)) if problem.objective == "throughput" else 1)
    ws = float(cost.working_set.max()) if g.num_nodes else 0.0
    return mem, ws

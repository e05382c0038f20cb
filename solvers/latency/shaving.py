"""Refuting a latency by branching on where one node runs: on a CPU, or on an accelerator.

:func:`.cuts.probe_lower_bound` refutes "latency <= L" by propagation: drop every (node, device) pair
whose bound exceeds ``L``, recompute the bounds, repeat. Each node's bound is the cheapest over
everything its ancestors and descendants may do, so two nodes may each keep an option only through
choices of the other that contradict each other (ResNet-50 layers: a stem layer is cheap on the CPU
when the layers after it run on accelerators, and cheap on an accelerator when they stay on the CPU).
Branching one level deep sees that: with the node on CPUs only, and then on accelerators only,
propagation runs again; a side it refutes is removed for good (no placement of latency at most ``L``
uses it), and when both sides are refuted so is ``L``. This is shaving (singleton consistency) on
the device kind; every step is a refutation by the same valid bounds, so the result stays a lower
bound (tests check it against exhaustive enumeration).

Nodes are tried most ambiguous first: those whose least bound on a CPU and on an accelerator are
closest (on ResNet-50 the stem layers, where the trade-off between CPU compute and transfers is).
ResNet-50 layers (1 CPU, 4 accelerators, 70% full): propagation alone does not refute 100 ms;
branching on a stem layer does (the best placement known: 139.04 ms).
"""

from __future__ import annotations

import time

import numpy as np

from .cuts import refutes

__all__ = ["branch_refutes", "BRANCH_NODES"]

BRANCH_NODES = 16  # nodes tried per level, most ambiguous first


def branch_order(allowed: np.ndarray, through: np.ndarray, cpu: np.ndarray, nodes: int) -> list[int]:
    """Up to ``nodes`` nodes that may still run on both kinds, the closest least bounds first."""
    th = np.where(allowed, through, np.inf)
    both = np.asarray(allowed[:, cpu].any(axis=1) & allowed[:, ~cpu].any(axis=1), dtype=bool)
    diff = np.abs(th[:, cpu].min(axis=1) - th[:, ~cpu].min(axis=1))
    return [int(v) for v in np.argsort(np.where(both, diff, np.inf), kind="stable") if both[v]][:nodes]


def branch_refutes(allowed: np.ndarray, level: float, bounds_of, is_cpu: np.ndarray, *, rounds: int,
                   deadline: float, load_of=None, nodes: int = BRANCH_NODES) -> bool:
    """Whether "latency <= ``level``" (model units) is refuted by propagation, or by propagation
    after fixing one node to the CPUs or to the accelerators (both sides refuted), for up to ``nodes``
    nodes (:func:`branch_order`). Running out of time (``deadline``, ``time.perf_counter()``) refutes nothing."""
    if refutes(allowed, level, bounds_of, rounds, deadline, load_of):
        return True
    cpu = np.asarray(is_cpu, bool)
    if cpu.all() or not cpu.any() or time.perf_counter() > deadline:
        return False
    a = allowed.copy()
    for v in branch_order(a, bounds_of(a).through, cpu, nodes):
        kept = []
        for side in (cpu, ~cpu):
            if time.perf_counter() > deadline:
                return False
            trial = a.copy()
            trial[v, ~side] = False
            if trial[v].any() and not refutes(trial, level, bounds_of, rounds, deadline, load_of):
                kept.append(side)
        if time.perf_counter() > deadline:
            return False
        if not kept:
            return True
        if len(kept) == 1:  # one side refuted: shave it off and propagate again
            a[v, ~kept[0]] = False
            if refutes(a, level, bounds_of, rounds, deadline, load_of):
                return True
    return False

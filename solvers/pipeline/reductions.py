"""Lossless reductions of the DP's unit graph before its ideals are enumerated.

The ideals of a DAG multiply with every node that may independently be in or out: a node of zero
cost hanging off one other node (a shape op, a summary, a dropped output — Tarnawski et al.'s GNMT
graphs have 17) doubles the ideals each, so 17 of them turn a graph of ~18,000 ideals into millions.
Two reductions come before the enumeration:

* **colour classes** are contracted and strongly connected components of the contracted graph fused
  (:func:`planmap.solvers.pipeline.stage_units.build_units`, the paper's
  ``fuseStronglyConnectedComponentsInForward``);
* **free leaves** are merged into their one neighbour (:func:`merge_free_leaves`, the paper's merging
  of zero-cost forward nodes with one neighbour), repeatedly, so a chain of them folds up.

Why merging a free leaf ``a`` into its neighbour ``b`` loses no optimum. Conditions: every node-level
edge that touches a node of ``a`` joins it to a node of ``b`` (and none reads an entry argument);
``a`` costs nothing on every device ``b`` may use (compute zero there, ``a`` allowed there); ``a``
holds no state, no stash (whether or not its stage recomputes, under ``remat: auto``), no parameter,
and its largest working set is at most ``b``'s. Take any feasible contiguous plan and move ``a`` to
``b``'s stage:

1. *Contiguity.* ``a``'s only neighbour is ``b``, so ``a`` is a source or a sink of the contiguity
   graph. Removing a source or sink from a convex set keeps it convex (no path passes through it);
   adding it to ``b``'s stage keeps that convex (any path between ``a`` and the stage enters or
   leaves through the edge to ``b``, which is inside). The stage quotient loses at most the edges
   between ``a``'s old stage and ``b``'s and gains none, so the pipeline order stays valid; a stage
   left empty is dropped (fewer stages never hurt: the DP allows any number up to the devices).
2. *Load.* ``a``'s compute is zero on ``b``'s device. Every transfer that touches ``a`` is a value of
   ``b`` read by ``a`` or a value of ``a`` read by ``b``; both become local, and no other value gains
   a consuming device, so each device's receive and send charges can only fall (forward and backward
   separately, so the max-fw + max-bw variant and replicated stages' loads can only fall too;
   ``a`` has no parameter, so no all-reduce grows).
3. *Memory.* ``b``'s device gains no state, stash or parameter bytes, and its largest working set is
   unchanged (``a``'s is at most ``b``'s); ``a``'s old device only loses.

So the moved plan is feasible and no worse, and some optimum keeps ``a`` with ``b``: the DP over the
reduced graph is exact for the unreduced one.
"""

from __future__ import annotations

import numpy as np

from planmap.graph import topological_order
from planmap.problem import Problem

from .stage_units import Units, remat_problem, unit_memory

__all__ = ["merge_free_leaves"]


def _free_units(problem: Problem, units: Units) -> np.ndarray:
    """(U,) units that cost nothing wherever they may run and hold no memory of their own."""
    g, U = problem.graph, units.num_units
    uo = units.unit_of
    compute = np.where(problem.allowed, problem.cost.device_compute, 0.0)
    busy = np.zeros(U, bool)
    np.logical_or.at(busy, uo, compute.max(axis=1) > 0)
    state, stash, _ = unit_memory(problem, uo, U)
    if problem.remat_choice:  # free whether or not its stage recomputes (planmap.remat_stages)
        stash = stash + unit_memory(remat_problem(problem), uo, U)[1]
    reads_arg = np.zeros(U, bool)
    np.logical_or.at(reads_arg, uo[g.edge_dst], g.edge_src < 0)
    return ~busy & (state == 0) & (stash == 0) & ~reads_arg


def merge_free_leaves(problem: Problem, units: Units) -> tuple[Units, int]:
    """``units`` with every free leaf merged into its one neighbour (see the module docstring for the
    conditions and the proof), and how many units were merged away."""
    g, U = problem.graph, units.num_units
    if U <= 1:
        return units, 0
    free = _free_units(problem, units)
    _, _, ws = unit_memory(problem, units.unit_of, U)
    allowed = np.ones((U, problem.num_devices), bool)  # where every node of the unit may run
    np.logical_and.at(allowed, units.unit_of, problem.allowed)
    s, d = g.node_edges
    label = np.arange(U)
    merged = 0
    changed = True
    while changed:
        changed = False
        us, ud = label[units.unit_of[s]], label[units.unit_of[d]]
        cross = us != ud
        pairs = np.unique(np.concatenate([np.stack([us[cross], ud[cross]], 1), np.stack([ud[cross], us[cross]], 1)]),
                          axis=0)
        degree = np.bincount(pairs[:, 0], minlength=U) if len(pairs) else np.zeros(U, np.int64)
        for a, b in pairs.tolist():
            if (degree[a] != 1 or not free[a] or label[a] != a or label[b] != b or ws[a] > ws[b]
                    or (allowed[b] & ~allowed[a]).any()):
                continue
            label[label == a] = b
            merged += 1
            changed = True
            degree[b] = -1  # b's neighbourhood changed: look at it again in the next round
    if not merged:
        return units, 0
    return _renumber(units, label), merged


def _renumber(units: Units, label: np.ndarray) -> Units:
    """Units after relabelling, numbered in a topological order of the merged unit graph (ties by
    first node, as :func:`build_units` numbers them)."""
    keep, node_unit = np.unique(label[units.unit_of], return_inverse=True)
    k = len(keep)
    remap = np.full(len(label), -1, np.int64)
    remap[keep] = np.arange(k)
    e = units.edges
    pairs = remap[label[e]] if len(e) else np.zeros((0, 2), np.int64)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs = np.unique(pairs, axis=0) if len(pairs) else pairs.reshape(0, 2)
    first_node = np.full(k, len(node_unit), np.int64)
    np.minimum.at(first_node, node_unit, np.arange(len(node_unit)))
    order = topological_order(k, pairs, first_node)
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)
    return Units(rank[node_unit], k, rank[pairs].reshape(-1, 2), units.contig)

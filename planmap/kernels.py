"""Kernel launches per node: what the per-kernel overhead of a device type is paid for.

XLA fuses elementwise ops and data movement into the contraction / reduction / loop they feed, so a
fused node costs one launch per "anchor" op, or one loop kernel when it has no anchor; constants,
reshapes and the like cost none. Used by the problem assembly (coarse nodes) and the sharding tables
(each op's share of its fused node).
"""

from __future__ import annotations

import numpy as np

from planmap.graph import OpGraph

__all__ = ["kernel_roles", "kernel_counts"]

# Kernels a node launches (each pays the device type's opOverhead): XLA fuses elementwise ops and data
# movement into the contraction / reduction / loop they feed, so a fused node costs one launch per
# "anchor" op, or one loop kernel when it has no anchor; constants, reshapes and the like cost none.
_KERNEL_FREE = frozenset({
    "stablehlo.constant", "stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.get_tuple_element",
    "stablehlo.tuple", "stablehlo.bitcast_convert", "stablehlo.iota", "stablehlo.optimization_barrier",
    "sdy.sharding_constraint", "func.return", "chlo.constant", "chlo.constant_like", "sdy.constant",
})


def kernel_roles(original: OpGraph) -> tuple[np.ndarray, np.ndarray]:
    """(anchor, work) int arrays over the ops of ``original``: an anchor (contraction, reduction, control
    flow, call) launches its own kernel; a work op without an anchor in its fusion makes one loop kernel."""
    from planmap.frontend.costs import BODY_OPS, SPECIAL

    kinds = np.asarray(original.kind, dtype=object)
    anchor = np.array([k in SPECIAL or k in BODY_OPS or k.startswith("stablehlo.custom_call") for k in kinds],
                      np.int64)
    work = np.array([k not in _KERNEL_FREE for k in kinds], np.int64)
    return anchor, work


def kernel_counts(graph: OpGraph, original: OpGraph) -> np.ndarray:
    """Kernel launches per node: its anchor ops (contractions, reductions, control flow, calls), or one
    loop-fusion kernel for a node of only elementwise/data-movement ops, or none for free ops."""
    anchor, work = kernel_roles(original)
    if graph.num_nodes == 0:
        return np.zeros(0)
    starts = graph.members_indptr[:-1]
    empty = np.diff(graph.members_indptr) == 0
    anchors = np.where(empty, 0, np.add.reduceat(anchor[graph.members], starts))
    any_work = np.where(empty, 0, np.add.reduceat(work[graph.members], starts)) > 0
    return np.where(anchors > 0, anchors, any_work.astype(np.int64)).astype(float)

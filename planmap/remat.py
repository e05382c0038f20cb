"""Activation checkpointing at the op level: which of a stage's ops its backward pass runs again.

The cost model (:mod:`planmap.cost`) charges a checkpointed stage on the coarse graph: a repeated
layer's forward nodes cost twice, and the stage stashes per microbatch only the values that leave a
layer's forward (:func:`layer_boundary`). A plan states the same decision in the artifact's op ids
(``StageDoc.remat``) so the runtime can realise it: the ops of :func:`remat_ops` are the forward
ops whose results the backward rebuilds from the stashed boundary values instead of keeping them.
An op that makes a boundary value (a layer's output, a graph result) is never among them: its
results are stashed, which is where the recomputation starts.
"""

from __future__ import annotations

import numpy as np

from planmap.graph import OpGraph

__all__ = ["layer_forward", "layer_boundary", "remat_ops"]


def layer_forward(g: OpGraph) -> np.ndarray:
    """(n,) bool: forward nodes inside a repeated layer, which activation checkpointing runs again."""
    return ~g.backward & (g.layer >= 0)


def layer_boundary(g: OpGraph) -> np.ndarray:
    """(values,) bool: values a checkpointed forward keeps: made outside any layer (or by an argument),
    or read by a forward node of another layer (a layer's output, the next layer's input)."""
    keep = np.ones(g.num_values, bool)
    made = g.value_node >= 0
    prod = np.where(made, g.value_node, 0)
    inside = made & layer_forward(g)[prod]
    keep[inside] = False
    src = g.edge_src
    fw_edge = (src >= 0) & ~g.backward[g.edge_dst]
    leaves = fw_edge & (g.layer[g.edge_dst] != g.layer[np.maximum(src, 0)])
    keep[g.edge_value[leaves]] = True
    keep[g.results] = True
    return keep


def remat_ops(coarse: OpGraph, original: OpGraph, nodes: np.ndarray) -> np.ndarray:
    """Sorted ids of the original ops, among the members of coarse ``nodes``, that a checkpointed
    stage recomputes in its backward: members of repeated-layer forward nodes whose results are
    all interior to their layer (the op-level form of :func:`layer_boundary`)."""
    again = layer_forward(coarse)
    nodes = np.asarray(nodes, np.int64)
    nodes = nodes[again[nodes]]
    if len(nodes) == 0:
        return np.zeros(0, np.int64)
    node_of = coarse.original_to_node
    ops = np.sort(np.concatenate([coarse.members_of(int(i)) for i in nodes])).astype(np.int64)
    # values of the original graph that leave their producer's layer forward
    src = original.edge_src
    made = src >= 0
    p_node = node_of[np.maximum(src, 0)]
    d_node = node_of[original.edge_dst]
    leaves = made & (p_node != d_node) & ~coarse.backward[d_node] & (coarse.layer[d_node] != coarse.layer[p_node])
    boundary = np.zeros(original.num_values, bool)
    boundary[original.edge_value[leaves]] = True
    boundary[original.results] = True
    makes_boundary = np.zeros(original.num_nodes, bool)
    vals = np.flatnonzero(boundary & (original.value_node >= 0))
    makes_boundary[original.value_node[vals]] = True
    return ops[~makes_boundary[ops]]

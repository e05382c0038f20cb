"""Input-free cheap values: recomputed by every stage that reads them, never sent between stages.

Constants, iotas and shape-only ops (``broadcast_in_dim``, ``reshape``, ``convert``) whose inputs are
entry arguments or other such values cost nothing to rebuild where they are read, and the runtime
(:mod:`planmap.runtime.split`) rebuilds them in each consuming stage instead of sending them: a
splat constant broadcast to ``8x128x3072`` is made from one scalar, while sending it costs 12.6 MB
on a link. The cost model follows the same rule (one definition, here): coarsening drops the uses of
such values across coarse nodes, so no solver and no evaluation charges them as transfers, and a
splat constant holds no resident bytes (XLA materialises it inside the fusion that reads it).
"""

from __future__ import annotations

import numpy as np

from planmap.graph import OpGraph

__all__ = ["RECOMPUTED_OPS", "recomputed_nodes"]

RECOMPUTED_OPS = frozenset({
    "stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.broadcast",
    "stablehlo.reshape", "stablehlo.convert",
})


def recomputed_nodes(graph: OpGraph) -> np.ndarray:
    """(n,) bool per node of an original (op-level) graph: a cheap op computed from entry arguments and
    other such ops only, which each consuming stage recomputes. Coarse nodes are never recomputed."""
    out = np.zeros(graph.num_nodes, bool)
    if RECOMPUTED_OPS.isdisjoint(graph.kind):  # one pass in C; most long chains have none
        return out
    candidates = [i for i, k in enumerate(graph.kind) if k in RECOMPUTED_OPS]
    if not candidates:
        return out
    indptr, preds = graph.pred
    for i in candidates:  # ids are a topological order, so every predecessor is decided before i
        out[i] = bool(out[preds[indptr[i]: indptr[i + 1]]].all())
    return out

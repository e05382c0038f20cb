"""What ``planmap inspect`` shows about a model: a plain, JSON-friendly summary of an OpGraph.

Kept apart from the CLI so that notebooks and tests get the same numbers the command prints.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from planmap.graph import OpGraph

__all__ = ["inspect_graph", "peak_live_bytes"]


def _share(x: float, total: float) -> float:
    return float(x / total) if total > 0 else 0.0


def peak_live_bytes(graph: OpGraph) -> int:
    """The most bytes of op results alive at once when the ops run one by one in topological order.

    A result is alive from the op that makes it to its last reader (to the end for the entry
    function's results); arguments are not counted (they are the parameter and data bytes). This is
    the activation memory a single-device run needs at its peak, not the sum over all values, which
    counts every intermediate as if none were ever freed.
    """
    n = graph.num_nodes
    produced = np.flatnonzero(graph.value_node >= 0)
    if n == 0 or not len(produced):
        return 0
    start = graph.value_node[produced].astype(np.int64)
    last = np.full(graph.num_values, -1, np.int64)
    np.maximum.at(last, graph.edge_value, graph.edge_dst.astype(np.int64))
    last[graph.results] = n - 1
    end = np.maximum(last[produced], start)
    delta = np.zeros(n + 1, np.int64)
    np.add.at(delta, start, graph.value_bytes[produced])
    np.add.at(delta, end + 1, -graph.value_bytes[produced])
    return int(np.cumsum(delta[:n]).max())


def inspect_graph(graph: OpGraph, *, top: int = 10, coarse: dict[str, OpGraph] | None = None) -> dict[str, Any]:
    """Summary of ``graph``: op counts, FLOPs, bytes, heaviest ops and layers, coarsened sizes.

    ``coarse`` maps level names (``fuse``, ``layers``) to coarsened graphs; computed when omitted.
    """
    from planmap.frontend.coarsening import coarsen_levels

    if coarse is None:
        coarse = coarsen_levels(graph, ("fuse", "layers"))
    total = graph.total_flops
    param_bytes = int(sum(graph.value_bytes[a.value] for a in graph.args if a.role == "param"))
    data_bytes = int(sum(graph.value_bytes[a.value] for a in graph.args if a.role != "param"))
    counts = Counter(graph.kind)
    heaviest = np.argsort(-graph.flops, kind="stable")[:top]
    layers_graph = coarse.get("layers")
    layers = []
    if layers_graph is not None:
        order = np.argsort(-layers_graph.flops, kind="stable")[:top]
        layers = [{"node": int(i), "name": layers_graph.op_name[i], "kind": layers_graph.kind[i],
                   "layer": int(layers_graph.layer[i]), "backward": bool(layers_graph.backward[i]),
                   "ops": int(layers_graph.members_indptr[i + 1] - layers_graph.members_indptr[i]),
                   "flops": float(layers_graph.flops[i]), "share": _share(float(layers_graph.flops[i]), total)}
                  for i in order]
    return {
        "name": graph.name,
        "format": graph.meta.get("format"),
        "ops": graph.num_nodes,
        "values": graph.num_values,
        "edges": graph.num_edges,
        "flops": total,
        "bytes_accessed": float(graph.bytes_accessed.sum()),
        "parameter_bytes": param_bytes,
        "data_bytes": data_bytes,
        "activation_bytes": peak_live_bytes(graph),
        "constant_bytes": int(graph.state_bytes.sum()),
        "arguments": [{"index": a.index, "name": a.name, "type": str(a.type), "role": a.role} for a in graph.args],
        "op_counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "heaviest_ops": [{"node": int(i), "kind": graph.kind[i], "name": graph.op_name[i], "dtype": graph.dtype[i],
                          "flops": float(graph.flops[i]), "bytes": float(graph.bytes_accessed[i]),
                          "share": _share(float(graph.flops[i]), total)} for i in heaviest],
        "heaviest_layers": layers,
        "coarsened": {level: {"nodes": g.num_nodes, **{k: v for k, v in g.meta.get("coarsening", {}).items()
                                                        if k in ("repeated_layers", "method", "not_convex")}}
                      for level, g in coarse.items()},
        "backward_ops": int(graph.backward.sum()),
        "unknown_op_kinds": dict(graph.meta.get("unknown_ops", {})),
        "loops": list(graph.meta.get("loops", [])),
        "shardings": graph.meta.get("shardings", {}),
        "measured_devices": sorted(graph.measured),
    }

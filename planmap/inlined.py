"""An op-level graph with the bodies of chosen calls spliced in place of the call nodes.

XLA inlines every call before it fuses, schedules and assigns buffers, so the memory of a program
that calls ``log_softmax`` depends on the callee's ops (which of its values are buffers, which die
early). The front end records the callees' bodies (:mod:`planmap.frontend.callees`,
``OpGraph.meta["callees"]``); :func:`inline_calls` builds the graph XLA sees for the calls asked for,
and the maps that carry a stage's ops, its values' shard counts and per-op buffers over to it.
Everything else about the graph (ids in topological order, the other nodes' columns) is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.frontend.recompute import recomputed_nodes
from planmap.graph import OpGraph, TensorType

__all__ = ["Inlined", "inline_calls", "carry_over"]


@dataclass(frozen=True)
class Inlined:
    """``graph`` (calls replaced by their bodies); ``node_of`` ((new nodes,) the original op each new node
    comes from); ``value_of`` ((original values,) the new id of each original value); ``inner`` ((new
    nodes,) True for an op of an inlined body); ``first`` ((original ops,) the first new node of each)."""

    graph: OpGraph
    node_of: np.ndarray
    value_of: np.ndarray
    inner: np.ndarray
    first: np.ndarray


def inline_calls(g: OpGraph, calls: set[int]) -> Inlined:
    """``g`` with each call node in ``calls`` whose callee body ``g.meta`` records replaced by that body."""
    bodies, callee = g.meta.get("callees", {}), g.meta.get("calls", {})
    calls = {i for i in calls if callee.get(i) in bodies}
    n_args = len(g.args)
    value_of = np.full(g.num_values, -1, np.int64)
    value_of[:n_args] = np.arange(n_args)
    cols: dict[str, list] = {k: [] for k in ("kind", "op_name", "flops", "bytes", "out", "dtype", "outputs", "dims",
                                             "maps", "operands", "node_of", "inner", "vnode", "vindex", "vbytes")}
    cols["vnode"] += [-1] * n_args
    cols["vindex"] += list(range(n_args))
    cols["vbytes"] += [int(b) for b in g.value_bytes[:n_args]]
    first = np.zeros(g.num_nodes, np.int64)
    outs_of = _outputs_by_op(g)
    nv = n_args
    for i in range(g.num_nodes):
        first[i] = len(cols["kind"])
        ins = [int(value_of[v]) for v in (g.operands[i] if g.operands is not None else ())]
        if i in calls:
            nv = _splice(cols, bodies[callee[i]], ins, outs_of[i], value_of, nv, g, i)
            continue
        _append(cols, g.kind[i], g.op_name[i], float(g.flops[i]), ins, g.outputs[i] if g.outputs else (),
                [int(g.value_bytes[v]) for v in outs_of[i]], i, False, nv,
                dims=g.dims[i] if g.dims is not None else None,
                dmap=g.dim_maps[i] if g.dim_maps is not None else None)
        value_of[outs_of[i]] = np.arange(nv, nv + len(outs_of[i]))
        nv += len(outs_of[i])
    node_of = np.asarray(cols["node_of"], np.int64)
    edges = {(v, d) for d, ops in enumerate(cols["operands"]) for v in ops}
    outer = np.flatnonzero(~np.isin(g.edge_dst, sorted(calls)))  # captured values keep their edges
    edges |= {(int(value_of[v]), int(first[d])) for v, d in zip(g.edge_value[outer], g.edge_dst[outer], strict=True)}
    ev, ed = (np.asarray(x, np.int64) for x in zip(*sorted(edges, key=lambda e: (e[1], e[0])), strict=True)) \
        if edges else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    n = len(cols["kind"])
    graph = OpGraph(
        name=g.name, kind=cols["kind"], op_name=cols["op_name"], flops=cols["flops"], bytes_accessed=cols["bytes"],
        out_bytes=cols["out"], state_bytes=np.zeros(n), dtype=cols["dtype"], value_node=cols["vnode"],
        value_index=cols["vindex"], value_bytes=cols["vbytes"], edge_value=ev, edge_dst=ed, args=g.args,
        results=value_of[np.asarray(g.results, np.int64)], outputs=cols["outputs"], dims=cols["dims"],
        meta={k: v for k, v in g.meta.items() if k not in ("calls", "callees")}, operands=cols["operands"],
        dim_maps=cols["maps"] if g.dim_maps is not None else None)
    return Inlined(graph, node_of, value_of, np.asarray(cols["inner"], bool), first)


def _outputs_by_op(g: OpGraph) -> list[np.ndarray]:
    made = g.value_node.astype(np.int64)
    order = np.argsort(made, kind="stable")
    ptr = np.searchsorted(made[order], np.arange(g.num_nodes + 1))
    return [order[ptr[i]: ptr[i + 1]] for i in range(g.num_nodes)]


def _append(cols: dict[str, list], kind: str, name: str, flops: float, ins: list[int], outputs, nbytes: list[int],
            origin: int, inner: bool, nv: int, *, dims=None, dmap=None) -> None:
    cols["kind"].append(kind)
    cols["op_name"].append(name)
    cols["flops"].append(flops)
    cols["bytes"].append(float(sum(nbytes)))
    cols["out"].append(int(sum(nbytes)))
    cols["dtype"].append(outputs[0].dtype if len(outputs) else "")
    cols["outputs"].append(tuple(outputs))
    cols["dims"].append(dims)
    cols["maps"].append(dmap)
    cols["operands"].append(tuple(ins))
    cols["node_of"].append(origin)
    cols["inner"].append(inner)
    node = len(cols["kind"]) - 1
    cols["vnode"] += [node] * len(nbytes)
    cols["vindex"] += list(range(len(nbytes)))
    cols["vbytes"] += nbytes


def _splice(cols: dict[str, list], body: dict, ins: list[int], outs: np.ndarray, value_of: np.ndarray, nv: int,
            g: OpGraph, i: int) -> int:
    """Append ``body``'s ops for call ``i`` (operands ``ins``, new ids); map the call's results ``outs``."""
    ref = list(ins)  # references: the callee's arguments, then its ops' results in order
    for kind, operands, results in zip(body["kinds"], body["operands"], body["outputs"], strict=True):
        types = tuple(TensorType(tuple(s), d) for s, d, _ in results)
        nbytes = [int(b) for _, _, b in results]
        elems = float(sum(np.prod(t.shape) for t in types))
        _append(cols, kind, g.op_name[i], elems, [ref[r] for r in operands], types,
                nbytes, i, True, nv)
        ref += list(range(nv, nv + len(nbytes)))
        nv += len(nbytes)
    value_of[outs] = [ref[r] for r in body["returns"]]
    return nv


def carry_over(g: OpGraph, flat: Inlined, cheap: np.ndarray, split: np.ndarray | None,
               at_ops: dict[int, float] | None) -> tuple[np.ndarray, np.ndarray | None, dict[int, float] | None]:
    """Per-op and per-value columns of ``g`` carried over to ``flat.graph``: ``cheap`` ((n,) bool; an
    inlined body's constants and the shape ops on them are cheap too), ``split`` ((values,) shard counts;
    an inlined value takes the count of the call's operand or result of its size, else 1) and ``at_ops``
    ({op id: bytes}, by the op's new id)."""
    h = flat.graph
    new_cheap = (cheap[flat.node_of] & ~flat.inner) | (recomputed_nodes(h) & flat.inner)
    new_split = None
    if split is not None:
        new_split = np.ones(h.num_values)
        new_split[flat.value_of[flat.value_of >= 0]] = split[flat.value_of >= 0]
        for v in np.flatnonzero((h.value_node >= 0) & flat.inner[np.maximum(h.value_node, 0)]):
            i = int(flat.node_of[h.value_node[v]])
            near = [int(u) for u in (*g.operands[i], *np.flatnonzero(g.value_node == i))
                    if g.value_bytes[u] == h.value_bytes[v]] if g.operands is not None else []
            new_split[v] = max((split[u] for u in near), default=1.0)
    moved = None if at_ops is None else {int(flat.first[i]): b for i, b in at_ops.items()}
    return new_cheap, new_split, moved

"""Coarsening: fewer, bigger nodes for the solvers, with the mapping back to every original op.

Placement MIPs and pipeline DPs scale with the number of nodes; a 48-layer GPT-2 has ~6,000 ops of
which only ~300 do heavy work. Levels:

* ``fuse`` — every *cheap* op (elementwise, data movement, constants, reductions, cheap calls) is
  merged into a neighbour, the way XLA fuses: into its unique consumer or producer, else (a source
  such as a constant) into its earliest consumer, else into its latest producer, else its earliest
  consumer — the first of these that is in the same scope. Heavy ops
  (contractions, loops, collectives, custom calls) stay one per node. Merges never cross a scope
  boundary of the name stacks (``layer3`` vs ``layer4``) nor the forward/backward boundary, so the
  next level can group whole layers. Unnamed ops (hoisted constants) join any neighbour.
* ``layers`` — after fusing, all nodes of one name-stack scope and direction (``layer3`` forward,
  ``layer3`` backward, ``embed``, ``head``) become one node, when that set is convex in the graph
  (otherwise it is left fused and listed in ``meta["coarsening"]["not_convex"]``). Without usable
  names, the graph's own ``layer`` ids (a profiled graph's) group the nodes; without those, repeated
  layers are found structurally (:mod:`planmap.frontend.repeats`).
* ``auto`` — ``layers`` when repeated layers are found, else ``fuse``. ``none`` — the graph as is.

Every merge goes through :class:`~planmap.frontend.partition.Partition`, so the coarse graph is a
DAG and its node ids are a topological order. Coarse nodes carry: summed FLOPs and state bytes;
external traffic only as bytes accessed (values read from outside once, outputs written once — never
less than the heaviest member's own bytes); the dtype and name of the heaviest member; the dimension
roles of its contraction when it holds exactly one; ``backward``; ``layer``; and, in training graphs,
a colocation class per named scope (layer, embed, head) pairing its forward and backward nodes, as
Tarnawski et al. require for training (at the ``fuse`` level too: all fused nodes of one layer share
its class). Colocation classes that come
with the graph (a profiled graph's) are kept; two classes that meet in one coarse node merge.
``meta["coarsening"]`` reports the reduction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from planmap.frontend import costs as C
from planmap.frontend.namestack import common_scope, label_ops
from planmap.frontend.nogc import gc_paused
from planmap.frontend.partition import Partition
from planmap.frontend.recompute import recomputed_nodes
from planmap.frontend.repeats import tandem_blocks
from planmap.graph import OpGraph

__all__ = ["coarsen", "coarsen_levels", "LEVELS", "is_cheap"]

LEVELS = ("auto", "none", "fuse", "layers")
_HEAVY_CHEAP_BODY = 1.0  # a call/composite whose FLOPs per byte is below this fuses like elementwise code
_CHEAP = C.ELEMENTWISE | C.DATA_MOVEMENT | C.FREE | frozenset(
    ["stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.select_and_scatter", "stablehlo.scatter",
     "stablehlo.map", "stablehlo.batch_norm_inference", "stablehlo.batch_norm_training",
     "stablehlo.batch_norm_grad"])
_CHEAP_IF_LOW_INTENSITY = frozenset(["func.call", "stablehlo.composite"])
_COLLECTIVES = frozenset(["stablehlo.all_gather", "stablehlo.all_to_all", "stablehlo.collective_permute",
                          "stablehlo.collective_broadcast", "stablehlo.send", "stablehlo.recv"])


def is_cheap(kind: str, flops: float, nbytes: float) -> bool:
    """Whether an op of this kind and cost is fused into a neighbour rather than kept as a node."""
    if kind in _COLLECTIVES:
        return False
    if kind in _CHEAP:
        return True
    return kind in _CHEAP_IF_LOW_INTENSITY and flops < _HEAVY_CHEAP_BODY * max(nbytes, 1.0)


def coarsen(graph: OpGraph, level: str = "auto") -> OpGraph:
    """The coarsened graph at ``level`` (see module docstring); ``none`` returns ``graph`` itself."""
    return coarsen_levels(graph, (level,))[level]


def coarsen_levels(graph: OpGraph, levels: Sequence[str]) -> dict[str, OpGraph]:
    """``{level: coarsen(graph, level)}`` for several levels, sharing the work they have in common.

    Every level but ``none`` starts from the same name-stack labels and the same fused partition, so
    both are computed once (``inspect`` wants ``fuse`` and ``layers`` of graphs of 10⁵ ops). At most
    one of ``layers`` and ``auto`` may be asked for: both contract the fused partition further.
    """
    for level in levels:
        if level not in LEVELS:
            raise ValueError(f"coarsen level requires one of {', '.join(LEVELS)}, but got {level!r}")
    grouped = [lv for lv in levels if lv in ("layers", "auto")]
    if len(set(grouped)) > 1:
        raise ValueError(f"coarsen_levels takes at most one of 'layers' and 'auto', but got {list(levels)}")
    out: dict[str, OpGraph] = {}
    for level in levels:
        if level == "none" or graph.num_nodes == 0:
            out[level] = graph
    todo = sorted((lv for lv in dict.fromkeys(levels) if lv not in out), key=lambda lv: lv != "fuse")  # fuse first
    if not todo:
        return out
    with gc_paused():
        _coarsen_into(graph, todo, out)
    return out


def _coarsen_into(graph: OpGraph, todo: list[str], out: dict[str, OpGraph]) -> None:
    """Fuse once, then build each level of ``todo`` (``fuse`` first) into ``out``."""
    src, dst = graph.node_edges
    part = Partition(graph.num_nodes, src, dst)
    labels = label_ops(graph.op_name)
    # group label: (scope id or -1, backward flag or None); unnamed ops are wildcards
    # per group id (lists: group ids are node ids), updated as groups merge
    scope = labels.group.tolist()
    direction = [b if nm else None for b, nm in zip(graph.backward.tolist(), graph.op_name, strict=True)]
    cheap = [False] * graph.num_nodes if graph.measured else _cheap_ops(graph)
    _fuse(part, cheap, scope, direction)
    n_fused = len(part.members)
    for level in todo:
        report: dict[str, Any] = {"level": level, "ops": int(graph.n_original), "input_nodes": graph.num_nodes,
                                  "fused": n_fused}
        layer_of_group: dict[int, int] = {}
        if level in ("layers", "auto"):
            method, n_layers, not_convex = _group_layers(part, graph, labels, scope, direction, layer_of_group)
            report.update(method=method, repeated_layers=n_layers, layers=len(part.members))
            if not_convex:
                report["not_convex"] = not_convex
            if level == "auto" and n_layers == 0:
                report["level"] = "fuse"
        report["nodes"] = len(part.members)
        out[level] = _build(graph, part, labels, scope, direction, layer_of_group, report)


def _cheap_ops(graph: OpGraph) -> list[bool]:
    """:func:`is_cheap` of every op, decided once per kind (per op only for calls and composites)."""
    by_kind = {k: is_cheap(k, 0.0, 0.0) for k in set(graph.kind) if k not in _CHEAP_IF_LOW_INTENSITY}
    cheap: list = list(map(by_kind.get, graph.kind))  # None for the kinds decided per op, filled in below
    for i, kind in enumerate(graph.kind):
        if kind in _CHEAP_IF_LOW_INTENSITY:
            cheap[i] = is_cheap(kind, float(graph.flops[i]), float(graph.bytes_accessed[i]))
    return cheap


def _fuse(part: Partition, cheap: list, scope: list, direction: list) -> None:
    """Merge cheap groups into neighbours until nothing changes (each merge is DAG-safe).

    A group merges only into a compatible one: the same scope and direction, or either unknown (-1,
    None). The hot loop of coarsening (a merge per op on a long elementwise chain), so the test is
    inline, a group's unique consumer (its first choice, see :meth:`Partition.absorb_targets`) is
    tried without building the list of targets, and the partition's methods are bound once."""
    members, absorb_targets, merge = part.members, part.absorb_targets, part.absorb
    succs: list[set[int]] = part.succs  # type: ignore[assignment]  # a live group's entry is never None
    changed = True
    while changed:
        changed = False
        for g in part.groups:
            if not cheap[g] or g not in members:
                continue
            sg, dg = scope[g], direction[g]
            target = None
            s = succs[g]
            if len(s) == 1:
                for t in s:
                    st, dt = scope[t], direction[t]
                    if (sg < 0 or st < 0 or sg == st) and (dg is None or dt is None or dg == dt):
                        target = t
            if target is None:
                for t in absorb_targets(g):
                    st, dt = scope[t], direction[t]
                    if (sg < 0 or st < 0 or sg == st) and (dg is None or dt is None or dg == dt):
                        target = t
                        break
            if target is None:
                continue
            merge(g, target)
            if scope[target] < 0:
                scope[target] = sg
            if direction[target] is None:
                direction[target] = dg
            cheap[target] = cheap[target] and cheap[g]
            changed = True


def _group_layers(part: Partition, graph: OpGraph, labels: Any, scope: list, direction: list,
                  layer_of_group: dict[int, int]) -> tuple[str | None, int, list[str]]:
    """Contract each (scope, direction) set; structural repeats when names give no layers."""
    not_convex: list[str] = []
    sets: dict[tuple[int, bool], list[int]] = {}
    for g in part.groups:
        if scope[g] >= 0:
            sets.setdefault((scope[g], bool(direction[g])), []).append(g)
    layer_scope = np.full(len(labels.group_names), -1, np.int64)
    sel = labels.group >= 0
    layer_scope[labels.group[sel]] = labels.layer[sel]  # a scope's ops all share its layer id
    has_layers = bool((layer_scope >= 0).any())
    if has_layers:
        for (s, back), groups in sets.items():
            head = _contract_convex(part, groups, scope)
            if head is None:
                not_convex.append(labels.group_names[s] + (" (backward)" if back else ""))
                continue
            direction[head] = back
            scope[head] = s
            layer_of_group[head] = int(layer_scope[s])  # -1: a named scope that is not a repeated layer
        return "names", len(labels.layer_names), not_convex
    if (graph.layer >= 0).any():  # layer ids given with the graph (a profiled graph's "layer" field)
        by_layer: dict[tuple[int, bool], list[int]] = {}
        for g in part.groups:
            ids = graph.layer[part.members[g]]
            if (ids >= 0).any() and len(set(ids[ids >= 0].tolist())) == 1:
                by_layer.setdefault((int(ids[ids >= 0][0]), bool(graph.backward[part.members[g]].any())),
                                    []).append(g)
        for (layer, back), groups in sorted(by_layer.items()):
            head = _contract_convex(part, groups, {g: -1 for g in part.members})
            if head is None:
                not_convex.append(f"layer {layer}" + (" (backward)" if back else ""))
                continue
            direction[head] = back
            layer_of_group[head] = layer
        return "layer ids", len({layer for layer, _ in by_layer}), not_convex
    # no usable names: tandem repeats of node signatures in topological order
    order = part.groups
    cheap_op = _cheap_ops(graph)
    sig = [_signature(graph, part.members[g], cheap_op) for g in order]
    repeats = tandem_blocks(sig)
    n_layers = 0
    for blocks in repeats:
        for a, b in blocks:
            head = part.contract(order[a:b])  # an interval of a topological order is convex
            layer_of_group[head] = n_layers
            n_layers += 1
    return ("structure" if n_layers else None), n_layers, not_convex


def _contract_convex(part: Partition, groups: list[int], scope: list[int] | dict[int, int]) -> int | None:
    """Contract ``groups`` if convex, absorbing unlabelled groups on the way; None if impossible."""
    S = set(groups)
    for _ in range(8):
        S, violators = part.convex_closure(S)
        if not violators:
            return part.contract(S)
        if any(scope[v] >= 0 for v in violators):
            return None
        S |= violators
    return None


def _signature(graph: OpGraph, members: Sequence[int], cheap_op: list[bool]) -> int:
    """A hash of the multiset of a group's (kind, output types), cheap ops left out unless all are cheap."""
    kind, outputs = graph.kind, graph.outputs
    items = sorted((kind[i], outputs[i] if outputs is not None else ()) for i in members if not cheap_op[i])
    if not items:
        items = sorted((graph.kind[i], ()) for i in members)
    return hash(tuple(items))


def _build(graph: OpGraph, part: Partition, labels: Any, scope: list, direction: list,
           layer_of_group: dict[int, int], report: dict[str, Any]) -> OpGraph:
    """Materialise the partition as an OpGraph (node ids = topological positions)."""
    node_of, order = part.assignment()
    structural = report.get("method") == "structure"
    k = len(order)
    vnode = graph.value_node
    # values that survive: arguments, results, and values used outside their producer's group, unless
    # each reader recomputes them (input-free cheap values, as the runtime does)
    prod_group = np.where(vnode >= 0, node_of[np.maximum(vnode, 0)], -1)
    e_val, e_dst = graph.edge_value, node_of[graph.edge_dst]
    recomputed = np.zeros(graph.num_values, bool)
    if not graph.measured:
        recomputed[vnode >= 0] = recomputed_nodes(graph)[vnode[vnode >= 0]]
    external_use = (prod_group[e_val] != e_dst) & ~recomputed[e_val]
    keep = vnode < 0
    keep[e_val[external_use]] = True
    keep[graph.results] = True
    new_id = np.cumsum(keep) - 1
    kept = np.flatnonzero(keep)
    pairs = np.unique(np.stack([e_dst[external_use], new_id[e_val[external_use]]], 1), axis=0) \
        if external_use.any() else np.zeros((0, 2), np.int64)
    edge_dst, edge_value = pairs[:, 0], pairs[:, 1]
    v_node = prod_group[kept]
    # value_index: position among the node's surviving outputs (argument index for arguments)
    v_index = np.where(v_node < 0, graph.value_index[kept], 0)
    counters: dict[int, int] = {}
    for j in np.flatnonzero(v_node >= 0):
        g = int(v_node[j])
        v_index[j] = counters.get(g, 0)
        counters[g] = v_index[j] + 1
    v_bytes = graph.value_bytes[kept]
    # costs
    flops = np.bincount(node_of, weights=graph.flops, minlength=k)
    state = np.bincount(node_of, weights=graph.state_bytes, minlength=k).astype(np.int64)
    in_bytes = np.bincount(edge_dst, weights=v_bytes[edge_value].astype(np.float64), minlength=k)
    out_mask = v_node >= 0
    out_bytes = np.bincount(v_node[out_mask], weights=v_bytes[out_mask].astype(np.float64), minlength=k)
    max_member_bytes = np.zeros(k)
    np.maximum.at(max_member_bytes, node_of, graph.bytes_accessed)
    nbytes = np.maximum(in_bytes + out_bytes, max_member_bytes)
    heaviest = _heaviest_member(graph, node_of, k)
    sizes = np.bincount(node_of, minlength=k)
    kinds, names, dtypes, dims, outputs = [], [], [], [], []
    layer = np.full(k, -1, np.int32)
    backward = np.zeros(k, bool)
    member_lists = []
    has_dims = np.array([d is not None for d in graph.dims], bool) if graph.dims is not None else None
    for c, g in enumerate(order):
        mem = np.sort(np.fromiter(part.members[g], np.int64, len(part.members[g])))
        h = int(heaviest[c])
        is_layer = g in layer_of_group
        if sizes[c] == 1:
            kinds.append(graph.kind[h])
            names.append(graph.op_name[h])
        else:
            kinds.append("planmap.layer" if is_layer else "planmap.fusion")
            if is_layer and structural:  # found by repetition: the names say nothing, number the blocks
                names.append(_block_name(layer_of_group[g]))
            elif is_layer:  # the scope's own name stack, not diluted by absorbed unnamed ops
                own = [graph.op_name[i] for i in mem[labels.group[mem] == scope[g]]] if scope[g] >= 0 else []
                names.append(_common_name(own or [graph.op_name[i] for i in mem])
                             or (labels.group_names[scope[g]] if scope[g] >= 0 else ""))
            else:
                names.append(graph.op_name[h])
        dtypes.append(graph.dtype[h])
        contractions = mem[has_dims[mem]] if has_dims is not None else mem[:0]
        dims.append(graph.dims[contractions[0]] if graph.dims is not None and len(contractions) == 1 else None)
        outputs.append(tuple(_value_type(graph, int(v)) for v in kept[(v_node == c)]))
        if is_layer:
            layer[c] = layer_of_group[g]
        else:  # a fused node: the layer of its members, if any
            member_layers = graph.layer[mem]
            layer[c] = member_layers.max() if (member_layers >= 0).any() else -1
        backward[c] = bool(direction[g]) if direction[g] is not None else bool(graph.backward[h])
        member_lists.append(mem)
    indptr, members = _gather_members(graph, member_lists)
    if (graph.colocation >= 0).any():  # classes given with the graph (profiled, or coarsened before)
        colocation = _merge_classes(graph.colocation, node_of, k)
    else:
        colocation = np.full(k, -1, np.int32)
        if backward.any() and not backward.all():  # training: a scope's forward and backward share a device
            node_scope = np.array([scope[g] for g in order], np.int64)
            named = node_scope >= 0
            if named.any():
                _, dense = np.unique(node_scope[named], return_inverse=True)
                colocation[named] = dense
    measured = {}
    for dev, times in graph.measured.items():
        measured[dev] = np.bincount(node_of, weights=np.nan_to_num(times, nan=0.0), minlength=k)
        unsupported = np.zeros(k, bool)
        np.logical_or.at(unsupported, node_of, np.isnan(times))
        measured[dev][unsupported] = np.nan
    meta = dict(graph.meta)
    meta["coarsening"] = report
    if structural and not meta.get("layer_names"):
        meta["layer_names"] = [_block_name(i) for i in range(report["repeated_layers"])]
    return OpGraph(
        name=graph.name, kind=kinds, op_name=names, flops=flops, bytes_accessed=nbytes, out_bytes=out_bytes,
        state_bytes=state, dtype=dtypes, value_node=v_node, value_index=v_index, value_bytes=v_bytes,
        edge_value=edge_value, edge_dst=edge_dst, args=[_remap_arg(a, new_id) for a in graph.args],
        results=new_id[graph.results], outputs=outputs, dims=dims, colocation=colocation, backward=backward,
        layer=layer, measured=measured, value_time=graph.value_time[kept], members_indptr=indptr,
        members=members, n_original=graph.n_original, meta=meta)


def _gather_members(graph: OpGraph, member_lists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, members)`` of the coarse nodes whose members (nodes of ``graph``) are ``member_lists``:
    each coarse node lists the original ops of its members, in member order (one gather, no per-op loop)."""
    indptr = np.zeros(len(member_lists) + 1, np.int64)
    if not member_lists:
        return indptr, np.zeros(0, np.int32)
    nodes = np.concatenate(member_lists)
    starts = graph.members_indptr[nodes].astype(np.int64)
    lens = graph.members_indptr[nodes + 1].astype(np.int64) - starts
    # position j of the output reads graph.members[starts[n] + (j - first output slot of n)] for its node n
    offsets = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    members = graph.members[offsets + np.arange(len(offsets))]
    node_counts = np.add.reduceat(lens, np.cumsum([0, *map(len, member_lists[:-1])])) if len(nodes) else lens
    indptr[1:] = np.cumsum(node_counts)
    return indptr, members


def _merge_classes(classes: np.ndarray, node_of: np.ndarray, k: int) -> np.ndarray:
    """Colocation classes of coarse nodes: two classes that meet in one node become one class."""
    parent = list(range(int(classes.max()) + 1))

    def find(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    first = np.full(k, -1, np.int64)
    for node, c in zip(node_of.tolist(), classes.tolist(), strict=True):
        if c < 0:
            continue
        if first[node] < 0:
            first[node] = c
        else:
            parent[find(c)] = find(int(first[node]))
    out = np.array([find(int(c)) if c >= 0 else -1 for c in first], np.int64)
    named = out >= 0
    if named.any():
        out[named] = np.unique(out[named], return_inverse=True)[1]
    return out.astype(np.int32)


def _heaviest_member(graph: OpGraph, node_of: np.ndarray, k: int) -> np.ndarray:
    """Per coarse node, the member with the most FLOPs (ties: most bytes, then the first)."""
    order = np.lexsort((np.arange(graph.num_nodes)[::-1], graph.bytes_accessed, graph.flops, node_of))
    last = np.r_[np.flatnonzero(np.diff(node_of[order])), len(order) - 1]
    return order[last][:k]


def _block_name(layer: int) -> str:
    """The name of a repeated layer found from structure alone (no usable names in the artifact)."""
    return f"block{layer}"


def _common_name(names: list[str]) -> str:
    return "/".join(common_scope(n for n in names if n))


def _value_type(graph: OpGraph, v: int):
    node = int(graph.value_node[v])
    if node < 0 or graph.outputs is None:
        return graph.args[int(graph.value_index[v])].type if node < 0 and graph.args else None
    outs = graph.outputs[node]
    i = int(graph.value_index[v])
    return outs[i] if i < len(outs) else None


def _remap_arg(arg: Any, new_id: np.ndarray) -> Any:
    from dataclasses import replace

    return replace(arg, value=int(new_id[arg.value]))

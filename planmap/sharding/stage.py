"""Pipeline stages of a whole-cluster plan as sharding problems of their own: the sub-graph of a stage's
ops and its :class:`~planmap.sharding.tables.ShardingTables` on the stage's submesh.

A whole-cluster plan (issue 13) runs each pipeline stage on its own submesh and shards it there. The
sharding model of one stage is the model of the stage's *sub-graph* of ``problem.original``
(:func:`stage_graph`): its ops in original order, the parameters and data arguments they read, and one
new argument per value produced by another stage and read here (what the stage receives; role "data").
Input-free cheap values (constants, iotas, broadcasts of them: :mod:`planmap.frontend.recompute`) are
not received: the ops that make them are copied into every stage that reads them, as the runtime
rebuilds them, and dropped from a stage none of whose ops reads them. Arguments no op reads belong to
the stage holding op 0, so every argument is counted in exactly one stage. When ``ops`` is every op,
the sub-graph is the original graph with the same ids, and :func:`stage_tables` equals
:meth:`ShardingTables.from_problem`.

The sub-graph's ``meta["stage"]`` (:class:`StageMap`) maps its op, value and argument ids back to the
original's, so a stage's layout can be written into the plan's one :class:`~planmap.problem.Shardings`
dict (keyed by original ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.graph import Arg, OpGraph
from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.tables import ShardingTables, fused_op_costs, gradient_params, graph_operands, graph_outputs

__all__ = ["StageMap", "stage_graph", "stage_tables", "stage_ops", "stage_map", "batch_dims"]


@dataclass(frozen=True, eq=False)
class StageMap:
    """Ids of a stage's sub-graph in the original graph: ``ops[i]`` (original op of sub op ``i``),
    ``values[v]`` (original value of sub value ``v``), ``args[k]`` (original argument index of sub
    argument ``k``, -1 for a value received from another stage), ``received`` (sub value ids of those),
    ``sent`` (sub value ids produced here and read by ops outside the stage), ``own`` (per sub op: one of
    the stage's given ops, not a recomputed op copied from another stage), ``batch`` (per sub value: the
    dim that carries the data arguments' batch dim, -1 for none — :func:`batch_dims`)."""

    ops: np.ndarray
    values: np.ndarray
    args: np.ndarray
    received: np.ndarray
    sent: np.ndarray
    own: np.ndarray
    batch: np.ndarray

    def value_of(self, original_value: int) -> int | None:
        """The sub value id of an original value id (None when the stage does not hold it)."""
        k = int(np.searchsorted(self.values, original_value))
        return k if k < len(self.values) and int(self.values[k]) == original_value else None

    def op_of(self, original_op: int) -> int | None:
        """The sub op id of an original op id (None when the stage does not run it)."""
        k = int(np.searchsorted(self.ops, original_op))
        return k if k < len(self.ops) and int(self.ops[k]) == original_op else None


def _ro(a: Any, dtype: Any) -> np.ndarray:
    out = np.ascontiguousarray(np.asarray(a, dtype))
    out.setflags(write=False)
    return out


def _consumers(original: OpGraph) -> list[list[int]]:
    per: list[list[int]] = [[] for _ in range(original.num_values)]
    for v, d in zip(original.edge_value.tolist(), original.edge_dst.tolist(), strict=True):
        per[v].append(d)
    return per


def stage_ops(original: OpGraph, ops: np.ndarray, recomputed: np.ndarray | None = None) -> np.ndarray:
    """The original op ids a stage runs (sorted): its ops, except recomputed ops none of its other ops
    reads (their readers' stages rebuild them), plus the recomputed ops its ops read, transitively."""
    from planmap.frontend.recompute import recomputed_nodes

    if recomputed is None:
        recomputed = recomputed_nodes(original)
    ops = np.unique(np.asarray(ops, np.int64))
    if len(ops) == 0 or ops[0] < 0 or ops[-1] >= original.num_nodes:
        raise ValueError(f"a stage requires op ids in [0, {original.num_nodes}), but got {len(ops)} ids "
                         f"in [{ops.min(initial=0)}, {ops.max(initial=0)}]")
    indptr, succ = original.succ
    has_readers = np.diff(indptr) > 0
    roots = ops[~recomputed[ops] | ~has_readers[ops]]
    keep = np.zeros(original.num_nodes, bool)
    keep[roots] = True
    operands = graph_operands(original)
    todo = roots.tolist()
    while todo:
        i = todo.pop()
        for v in operands[i]:
            p = int(original.value_node[v])
            if p >= 0 and recomputed[p] and not keep[p]:
                keep[p] = True
                todo.append(p)
    return np.flatnonzero(keep)


def batch_dims(original: OpGraph) -> np.ndarray:
    """(values,) per value of ``original``, the dim that carries the batch dim (dim 0) of the data arguments,
    followed forward through the ops' DimMaps; -1 where none does (parameters, their gradients, values
    that reduce the batch away). A value received from another stage splits "like data" only along it."""
    out = np.full(original.num_values, -1, np.int64)
    for a in original.args:
        if a.role == "data" and a.type.rank:
            out[a.value] = 0
    if original.dim_maps is None:
        return out
    operands = graph_operands(original)
    results: list[list[int]] = [[] for _ in range(original.num_nodes)]
    for v, node in enumerate(original.value_node.tolist()):
        if node >= 0:
            results[node].append(v)
    for i, dm in enumerate(original.dim_maps):
        if dm is None or not results[i]:
            continue
        d = next((dm.operands[k][j] for k, v in enumerate(operands[i])
                  if 0 <= (j := int(out[v])) < len(dm.operands[k]) and dm.operands[k][j] >= 0), -1)
        out[results[i]] = d
    return out


def stage_graph(original: OpGraph, ops: np.ndarray, batch: np.ndarray | None = None) -> OpGraph:
    """The sub-graph of ``original`` that a stage of the original op ids ``ops`` runs (module doc);
    ``meta["stage"]`` holds its :class:`StageMap` (``batch``: :func:`batch_dims` of ``original``, computed
    when not given)."""
    ops_in = np.unique(np.asarray(ops, np.int64))
    eff = stage_ops(original, ops_in)
    n = original.num_nodes
    inside = np.zeros(n, bool)
    inside[eff] = True
    operands = graph_operands(original)
    outputs = graph_outputs(original)
    vnode = original.value_node
    produced = np.zeros(original.num_values, bool)
    produced[vnode >= 0] = inside[vnode[vnode >= 0]]
    used = np.zeros(original.num_values, bool)
    for i in eff.tolist():
        used[list(operands[i])] = True
    is_arg = vnode < 0
    owns_unused = bool(ops_in[0] == 0)
    read_anywhere = np.zeros(original.num_values, bool)
    read_anywhere[original.edge_value] = True
    arg_kept = [a for a in original.args if used[a.value] or (owns_unused and not read_anywhere[a.value])]
    received = np.flatnonzero(used & ~produced & ~is_arg)
    values = np.unique(np.concatenate([[a.value for a in arg_kept], received, np.flatnonzero(produced)])
                       .astype(np.int64))
    new_id = np.full(original.num_values, -1, np.int64)
    new_id[values] = np.arange(len(values))
    op_id = np.full(n, -1, np.int64)
    op_id[eff] = np.arange(len(eff))
    args = [Arg(k, a.name, a.type, a.role, int(new_id[a.value])) for k, a in enumerate(arg_kept)]
    for v in received.tolist():
        node, idx = int(vnode[v]), int(original.value_index[v])
        name = f"{original.op_name[node] or original.kind[node]}#{idx}"
        args.append(Arg(len(args), name, outputs[node][idx], "data", int(new_id[v])))
    arg_pos = {a.value: a.index for a in args}
    sub_vnode = np.where(produced[values], op_id[np.maximum(vnode[values], 0)], -1)
    sub_vindex = np.array([int(original.value_index[v]) if produced[v] else arg_pos[int(new_id[v])]
                           for v in values.tolist()], np.int64)
    keep_edge = inside[original.edge_dst]
    consumers = _consumers(original)
    sent = [v for v in np.flatnonzero(produced).tolist() if any(not inside[d] for d in consumers[v])]
    results = _results(original, arg_kept, produced, used, sent, new_id)
    g = original
    sub = OpGraph(
        name=g.name, kind=[g.kind[i] for i in eff], op_name=[g.op_name[i] for i in eff], flops=g.flops[eff],
        bytes_accessed=g.bytes_accessed[eff], out_bytes=g.out_bytes[eff], state_bytes=g.state_bytes[eff],
        dtype=[g.dtype[i] for i in eff], value_node=sub_vnode, value_index=sub_vindex,
        value_bytes=g.value_bytes[values], edge_value=new_id[g.edge_value[keep_edge]],
        edge_dst=op_id[g.edge_dst[keep_edge]], args=args, results=results,
        outputs=[outputs[i] for i in eff], dims=None if g.dims is None else [g.dims[i] for i in eff],
        colocation=g.colocation[eff], backward=g.backward[eff], layer=g.layer[eff],
        measured={k: m[eff] for k, m in g.measured.items()}, value_time=g.value_time[values],
        meta={**g.meta},
        operands=[[int(new_id[v]) for v in operands[i]] for i in eff],
        dim_maps=None if g.dim_maps is None else [g.dim_maps[i] for i in eff])
    sub.meta["stage"] = StageMap(
        ops=_ro(eff, np.int64), values=_ro(values, np.int64),
        args=_ro([a.index for a in arg_kept] + [-1] * len(received), np.int64),
        received=_ro(new_id[received], np.int64), sent=_ro(new_id[np.asarray(sent, np.int64)], np.int64),
        own=_ro(np.isin(eff, ops_in), bool), batch=_ro((batch_dims(original) if batch is None else batch)[values],
                                                        np.int64))
    return sub


def _results(original: OpGraph, arg_kept: list[Arg], produced: np.ndarray, used: np.ndarray, sent: list[int],
             new_id: np.ndarray) -> list[int]:
    """Sub value ids a stage returns, laid out so that :func:`gradient_params` finds each of its
    parameters' gradients made here: [the original's first result, or a stand-in] + per parameter its
    gradient (or the parameter itself: none here) + the other original results it holds + what it sends."""
    held = produced | np.isin(np.arange(original.num_values), [a.value for a in arg_kept])
    grad_of = {p: v for v, p in gradient_params(original).items() if produced[v]}
    first = [int(original.results[0])] if len(original.results) and held[original.results[0]] else []
    if not first:
        first = [int(np.flatnonzero(held | used)[0])]
    params = [grad_of.get(a.value, a.value) for a in arg_kept if a.role == "param"]
    listed = set(first + params)
    rest = [int(v) for v in original.results.tolist() if held[v] and v not in listed]
    listed.update(rest)
    rest += [v for v in sent if v not in listed]
    return [int(new_id[v]) for v in first + params + rest]


def stage_map(graph: OpGraph) -> StageMap | None:
    """The :class:`StageMap` of a stage's sub-graph (None for any other graph)."""
    m = graph.meta.get("stage")
    return m if isinstance(m, StageMap) else None


def _memo(problem: Any, key: str) -> dict:
    cache = problem.memo.get(key)
    if cache is None:
        cache = problem.memo[key] = {}
    return cache


def stage_tables(problem: Any, ops: np.ndarray, mesh: LogicalMesh) -> ShardingTables:
    """Sharding tables of the stage of original op ids ``ops`` on ``mesh`` (a LogicalMesh over the stage's
    devices): the tables of :func:`stage_graph` with the problem's topology, mode, optimizer,
    microbatches, memory headroom and fused op costs (a recomputed op copied from another stage costs no
    time here: XLA fuses it into its readers, and its own stage charges it once). Cached in
    ``problem.memo`` per (ops, mesh)."""
    from planmap.kernels import kernel_counts

    ops = np.unique(np.asarray(ops, np.int64))
    key = (ops.tobytes(), mesh.key)
    tables = _memo(problem, "stage_tables")
    hit = tables.get(key)
    if hit is not None:
        return hit
    graphs = _memo(problem, "stage_graphs")
    sub = graphs.get(ops.tobytes())
    if sub is None:
        batch = problem.memo.get("batch_dims")
        if batch is None:
            batch = problem.memo["batch_dims"] = batch_dims(problem.original)
        sub = graphs[ops.tobytes()] = stage_graph(problem.original, ops, batch)
    smap = sub.meta["stage"]
    original = problem.original
    costs = _memo(problem, "stage_op_costs")
    t = int(problem.topology.device_type[mesh.devices[0]])
    if t not in costs:
        kernels = kernel_counts(original, original)
        costs[t] = (kernels, fused_op_costs(problem, t, kernels))
    kernels, (roofline, launch) = costs[t]
    own = smap.own  # copies of recomputed ops are fused into their readers: no time of their own
    out = ShardingTables.build(sub, problem.topology, mesh, mode=problem.mode, optimizer=problem.cost.optimizer,
                               kernels=kernels[smap.ops], microbatches=problem.microbatches,
                               memory_headroom=problem.memory_headroom,
                               op_costs=(roofline[smap.ops] * own, launch[smap.ops] * own))
    tables[key] = out
    return out

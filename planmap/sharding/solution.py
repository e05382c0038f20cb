"""SPMD solutions: a layout on a mesh as a :class:`~planmap.problem.Solution`, and back.

An SPMD solution is one stage over the mesh's devices (in row-major mesh order) with every node of
the problem's graph on it, and :class:`~planmap.problem.Shardings` holding the plan's view of the
layout: mesh axes by name, PartitionSpec entries of every argument that is not replicated (``args``,
by argument index) and of every op result (``values``, by (op id of the original graph, result
number)) — :func:`pinned_layout`.
Plans that record fewer values (the :func:`~planmap.sharding.spmd.compress`-ed overrides of older
plans, or hand-written ones) are completed by :func:`~planmap.sharding.spmd.propagate`.

Axis names say what an axis does (:func:`axis_names`), the same for every SPMD solver: ``data``
splits the batch dim of data arguments, ``tensor`` splits parameters but no data, ``fsdp`` both;
anything else is ``a0``, ``a1``, … (by position). :class:`TablesCache` keeps the sharding tables of
one problem per mesh, so the evaluator and the solvers build them once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.specs import Spec, from_partition_spec, is_valid, partition_spec, replicated
from planmap.sharding.spmd import propagate
from planmap.sharding.tables import ShardingTables, graph_outputs

__all__ = ["TablesCache", "tables_cache", "axis_names", "mesh_axes", "REPLICATED_AXIS", "spmd_solution",
           "solution_mesh", "solution_overrides", "layout_of", "pinned_layout"]


class TablesCache:
    """Sharding tables of one problem, per mesh (by sizes and device order); owned by the problem."""

    def __init__(self, problem: Any) -> None:
        self._problem = problem
        self._tables: dict[tuple, ShardingTables] = {}

    def get(self, mesh: LogicalMesh) -> ShardingTables:
        t = self._tables.get(mesh.key)
        if t is None:
            t = ShardingTables.from_problem(self._problem, mesh)
            self._tables[mesh.key] = t
        return t


def tables_cache(problem: Any) -> TablesCache:
    """The problem's :class:`TablesCache` (kept in ``problem.memo``: built once per problem)."""
    cache = problem.memo.get("sharding_tables")
    if cache is None:
        cache = problem.memo["sharding_tables"] = TablesCache(problem)
    return cache


def axis_names(tables: ShardingTables, specs: Mapping[int, Spec]) -> tuple[str, ...]:
    """Role names of the mesh axes of a layout: ``data`` (splits a data argument's batch dim, dim 0, and
    no parameter), ``fsdp`` (both), ``tensor`` (parameters, no data batch dim), else ``a<k>``. A role a
    previous axis already took is suffixed with the axis position (``data1``) so names stay distinct."""
    n = tables.mesh.num_axes
    batch, params = [False] * n, [False] * n
    for a in tables.graph.args:
        spec = specs.get(a.value, replicated(a.type.rank))
        if a.role == "param":
            for dim in spec:
                for ax in dim:
                    params[ax] = True
        elif a.role == "data" and spec:
            for ax in spec[0]:
                batch[ax] = True
    names: list[str] = []
    for k in range(n):
        role = ("fsdp" if params[k] else "data") if batch[k] else "tensor" if params[k] else f"a{k}"
        names.append(role if role not in names else f"{role}{k}")
    return tuple(names)


REPLICATED_AXIS = "a0"  # the one axis of a layout that splits nothing (the canonical form of its mesh)


def mesh_axes(names: Sequence[str], sizes: Sequence[int], specs: Mapping[int, Spec]) -> tuple[tuple[str, int], ...]:
    """The ``(axis, size)`` pairs a plan records for a layout on a mesh of these axes. A layout that uses no axis
    (every value replicated) runs the same on any shape of its devices, so its mesh is written in one canonical
    form — one axis ``a0`` over all of them — and ``planmap check`` requires that form: otherwise a reshaped mesh
    would be a different plan with the same evaluation."""
    if not any(dim for spec in specs.values() for dim in spec):
        return ((REPLICATED_AXIS, math.prod(sizes)),)
    return tuple(zip(names, sizes, strict=True))


def spmd_solution(problem: Any, tables: ShardingTables, specs: Mapping[int, Spec], certificate: Any) -> Any:
    """The Solution of a complete layout (``{value id: spec}``, e.g. from :func:`propagate`) on
    ``tables.mesh``: one stage over the mesh, role-named axes, compressed shardings."""
    from planmap.problem import Shardings, Solution, Stage

    g, mesh = tables.graph, tables.mesh
    names = axis_names(tables, specs)
    axes = mesh_axes(names, mesh.axis_sizes, specs)
    arg_of = {a.value: a.index for a in g.args}
    args, values = {}, {}
    for v, spec in sorted(pinned_layout(tables, specs).items()):
        entries = tuple(tuple(e) if isinstance(e, list) else e for e in partition_spec(spec, names))
        if v in arg_of:
            args[arg_of[v]] = entries
        else:
            values[(int(g.value_node[v]), int(g.value_index[v]))] = entries
    stage = Stage(tuple(int(d) for d in mesh.devices), axes)
    return Solution(np.zeros(problem.graph.num_nodes, np.int32), (stage,), certificate,
                    microbatches=problem.microbatches, shardings=Shardings(axes, args, values))


def pinned_layout(tables: ShardingTables, specs: Mapping[int, Spec]) -> dict[int, Spec]:
    """What a plan records of a complete layout: every argument that is not replicated (the runtime
    replicates the others: axis names say ``data`` only where data arguments are split) and every op
    result (each result of each op). The runtime pins each recorded value with a sharding constraint, so
    the compiled program follows the layout the plan was costed with instead of the partitioner's own
    propagation, which differs from :func:`propagate` wherever costs tie or the cost models disagree
    (the :func:`compress`-ed overrides alone reproduce the layout only under planmap's propagation)."""
    out = {a.value: specs[a.value] for a in tables.graph.args if specs[a.value] != replicated(a.type.rank)}
    for i in range(tables.num_ops):
        for v in tables.unit_values(i):
            out[v] = specs[v]
    return out


def solution_mesh(problem: Any, solution: Any) -> LogicalMesh:
    """The mesh of an SPMD solution: its one stage's devices (row-major) with the shardings' axis sizes
    (``ValueError`` with the reason when they do not form one)."""
    sh = solution.shardings
    if solution.num_stages != 1:
        raise ValueError(f"an SPMD plan runs one stage over the mesh, but this one has {solution.num_stages} stages")
    stage = solution.stages[0]
    sizes = tuple(int(s) for _, s in sh.mesh_axes)
    names = [n for n, _ in sh.mesh_axes]
    if len(set(names)) != len(names):
        raise ValueError(f"the mesh axis names {names} are not distinct")
    if stage.mesh_axes and tuple(stage.mesh_axes) != tuple(sh.mesh_axes):
        raise ValueError(f"the stage's mesh {dict(stage.mesh_axes)} differs from the plan mesh {dict(sh.mesh_axes)}")
    if int(np.prod(sizes)) != stage.replicas:
        raise ValueError(f"the mesh {dict(sh.mesh_axes)} needs {int(np.prod(sizes))} devices, "
                         f"but the stage has {stage.replicas}")
    topo = problem.topology
    if len({int(topo.device_type[d]) for d in stage.devices}) > 1:
        raise ValueError("the mesh mixes device types; an SPMD stage runs on devices of one type")
    return LogicalMesh.build(topo, sizes, stage.devices)


def _checked(spec_entries: Sequence, shape: tuple[int, ...], names: Sequence[str], sizes: Sequence[int],
             what: str) -> Spec:
    if len(spec_entries) != len(shape):
        raise ValueError(f"the sharding of {what} has {len(spec_entries)} entries, "
                         f"but the tensor has rank {len(shape)}")
    try:
        spec = from_partition_spec(spec_entries, names)
    except ValueError as e:
        raise ValueError(f"the sharding of {what}: {e}") from None
    if not is_valid(spec, shape, sizes):
        raise ValueError(f"the sharding {list(spec_entries)} of {what} (shape {list(shape)}) is invalid on the "
                         f"mesh {dict(zip(names, sizes, strict=True))}: an axis used twice or a dim not divisible "
                         "by its axes")
    return spec


def solution_overrides(tables: ShardingTables, shardings: Any) -> dict[int, Spec]:
    """The recorded shardings as propagation overrides ``{value id: spec}`` (``ValueError`` naming the
    first argument index, op id or spec that does not fit the graph and mesh)."""
    g = tables.graph
    names = [n for n, _ in shardings.mesh_axes]
    sizes = tables.mesh.axis_sizes
    outputs = graph_outputs(g)
    by_index = {a.index: a for a in g.args}
    out: dict[int, Spec] = {}
    for i, entries in sorted(shardings.args.items()):
        a = by_index.get(int(i))
        if a is None:
            raise ValueError(f"the plan shards argument {i}, but the model has {len(g.args)} arguments")
        out[a.value] = _checked(entries, a.type.shape, names, sizes, f"argument {i} ({a.name})")
    for (op, r), entries in sorted(shardings.values.items()):
        if not 0 <= op < g.num_nodes or not 0 <= r < len(outputs[op]):
            raise ValueError(f"the plan constrains op {op} result {r}, which the model does not have "
                             f"({g.num_nodes} ops)")
        v = int(np.flatnonzero((g.value_node == op) & (g.value_index == r))[0])
        out[v] = _checked(entries, tables.shapes[v], names, sizes, f"op {op} result {r} ({g.op_name[op]})")
    return out


def layout_of(problem: Any, solution: Any) -> tuple[ShardingTables, dict[int, Spec]]:
    """(tables, complete layout) of an SPMD solution: its recorded overrides expanded by :func:`propagate`."""
    mesh = solution_mesh(problem, solution)
    tables = tables_cache(problem).get(mesh)
    return tables, propagate(tables, solution_overrides(tables, solution.shardings))

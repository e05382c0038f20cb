"""Whole-cluster plans and per-stage layouts: the plan's one :class:`~planmap.problem.Shardings` dict read
as a complete layout per stage (:func:`stage_layouts`), and written from them (:func:`stages_solution`).

A plan of several sharded stages keeps ONE dict keyed as a one-stage SPMD plan's (argument index;
(original op id, result number)), each spec in the axis names of the stage that *owns* the tensor: a
value's producer's stage, an argument's first stage that reads it (its lowest stage index). Every other
stage that holds the tensor — a value received from another stage, a parameter two stages read (tied
embeddings), a recomputed constant — holds it in the owner's spec *restricted by name* to its own axes
(:func:`restrict`): an axis name it does not have, or one whose size no longer divides the dim, is
dropped. That is the runtime's rule too (both take it from :func:`planmap.sharding.owner.held_spec`), so
the evaluator costs the transfer the runtime does: a ``device_put`` from the sender's layout to that one.
A plan written from layouts (:func:`stages_solution`) records every op result a stage runs, as an SPMD
plan does, so the runtime pins the costed layout instead of leaving values to XLA's propagation.

Because a stage's received values take their specs from their senders' layouts, and a training stage
both sends activations forward and receives gradients back, :func:`stage_layouts` propagates the stages
in sweeps (forward order, then backward order) until no received spec changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.owner import argument_owners, held_spec
from planmap.sharding.solution import axis_names, mesh_axes, pinned_layout
from planmap.sharding.specs import Spec, from_partition_spec, is_valid, partition_spec, replicated
from planmap.sharding.spmd import Propagation
from planmap.sharding.stage import StageMap, stage_map, stage_tables
from planmap.sharding.tables import ShardingTables, graph_operands

__all__ = ["StageLayout", "stage_op_ids", "stage_mesh", "restrict", "stage_layouts", "stages_solution"]

Named = tuple[tuple[str, ...], ...]  # a spec by axis names: per dim, the names splitting it


@dataclass(frozen=True, eq=False)
class StageLayout:
    """One stage of a whole-cluster plan: its original op ids, mesh and axis names (``("_",)`` for a
    single device without axes), sharding tables and complete layout ``{sub value id: spec}``."""

    index: int
    ops: np.ndarray
    mesh: LogicalMesh
    names: tuple[str, ...]
    tables: ShardingTables
    layout: dict[int, Spec]

    @property
    def map(self) -> StageMap:
        m = stage_map(self.tables.graph)
        assert m is not None  # stage tables always carry their map
        return m


def stage_op_ids(problem: Any, assignment: np.ndarray, num_stages: int) -> list[np.ndarray]:
    """Per stage, the original op ids of the coarse nodes assigned to it (sorted)."""
    g = problem.graph
    per: list[list[np.ndarray]] = [[] for _ in range(num_stages)]
    for i, k in enumerate(np.asarray(assignment).tolist()):
        per[k].append(g.members_of(i))
    return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, np.int64) for p in per]


def stage_mesh(topology: Any, stage: Any) -> tuple[LogicalMesh, tuple[str, ...]]:
    """The LogicalMesh of a plan stage (its devices row-major over its axes) and the axis names
    (``ValueError`` with the reason when they do not form one)."""
    names = tuple(n for n, _ in stage.mesh_axes)
    sizes = tuple(int(s) for _, s in stage.mesh_axes)
    if len({int(topology.device_type[d]) for d in stage.devices}) > 1:
        raise ValueError(f"the stage on {topology.names[stage.devices[0]]} mixes device types; a sharded stage "
                         "runs on devices of one type")
    if not names:
        if stage.replicas > 1:
            raise ValueError(f"the stage on {topology.names[stage.devices[0]]} has {stage.replicas} devices but no "
                             "mesh axes")
        return LogicalMesh.build(topology, (1,), stage.devices), ("_",)
    if len(set(names)) != len(names):
        raise ValueError(f"the mesh axis names {list(names)} of a stage are not distinct")
    if math.prod(sizes) != stage.replicas:
        raise ValueError(f"the stage mesh {dict(stage.mesh_axes)} needs {math.prod(sizes)} devices, but the stage "
                         f"has {stage.replicas}")
    return LogicalMesh.build(topology, sizes, stage.devices), names


def _named(entries: Sequence) -> Named:
    return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries)


def restrict(named: Named, names: Sequence[str], sizes: Sequence[int], shape: Sequence[int]) -> Spec:
    """A spec by axis names held by a stage with axes ``names``/``sizes``
    (:func:`planmap.sharding.owner.held_spec`, the runtime's rule too), as axis indices."""
    index = {n: i for i, n in enumerate(names)}
    spec = tuple(tuple(index[a] for a in dim) for dim in held_spec(named, names, sizes, shape))
    return spec if is_valid(spec, shape, sizes) else replicated(len(shape))


def _owned(named: Named, st: StageLayout, v: int, what: str) -> Spec:
    """The spec of a tensor in its owner's stage (``ValueError`` for unknown axes or an invalid split)."""
    shape = st.tables.shapes[v]
    if len(named) != len(shape):
        raise ValueError(f"the sharding of {what} has {len(named)} entries, but the tensor has rank {len(shape)}")
    try:
        spec = from_partition_spec(named, st.names)
    except ValueError as e:
        raise ValueError(f"the sharding of {what} (stage {st.index}): {e}") from None
    if not is_valid(spec, shape, st.mesh.axis_sizes):
        raise ValueError(f"the sharding {[list(d) for d in named]} of {what} (shape {list(shape)}) is invalid on "
                         f"stage {st.index}'s mesh {dict(zip(st.names, st.mesh.axis_sizes, strict=True))}")
    return spec


def _argument_reads(graph: Any) -> list[tuple[int, int]]:
    """(op, argument index) of every op operand of ``graph`` that is an argument."""
    index = {a.value: a.index for a in graph.args}
    return [(op, index[v]) for op, vals in enumerate(graph_operands(graph)) for v in vals if v in index]


def _op_owners(num_ops: int, stage_ops: Sequence[np.ndarray]) -> np.ndarray:
    """The stage of every original op (-1: none), from each stage's original op ids."""
    owner = np.full(num_ops, -1, np.int64)
    for k, ops in enumerate(stage_ops):
        owner[ops] = k
    return owner


def _overrides(problem: Any, stages: list[StageLayout], shardings: Any, owner: np.ndarray) -> list[dict[int, Spec]]:
    """Per stage, the plan's specs as propagation overrides ``{sub value id: spec}`` (module doc); ``owner``:
    the stage of every original op."""
    original = problem.original
    outputs = original.outputs or ()
    over: list[dict[int, Spec]] = [{} for _ in stages]
    arg_owner = argument_owners(owner, _argument_reads(original))
    for i, entries in sorted(shardings.args.items()):
        i, named = int(i), _named(entries)
        holders = [(st, pos) for st in stages for pos in np.flatnonzero(st.map.args == i).tolist()]
        if not 0 <= i < len(original.args):
            raise ValueError(f"the plan shards argument {i}, but the model has {len(original.args)} arguments")
        first = arg_owner.get(i, holders[0][0].index if holders else -1)
        for st, pos in holders:
            v = st.tables.graph.args[pos].value
            what = f"argument {i} ({original.args[i].name})"
            over[st.index][v] = (_owned(named, st, v, what) if st.index == first else
                                 restrict(named, st.names, st.mesh.axis_sizes, st.tables.shapes[v]))
    for (op, r), entries in sorted(shardings.values.items()):
        op, r, named = int(op), int(r), _named(entries)
        if not 0 <= op < original.num_nodes or not 0 <= r < len(outputs[op]):
            raise ValueError(f"the plan constrains op {op} result {r}, which the model does not have "
                             f"({original.num_nodes} ops)")
        for st in stages:
            sub = st.map.op_of(op)
            if sub is None:
                continue
            g = st.tables.graph
            v = int(np.flatnonzero((g.value_node == sub) & (g.value_index == r))[0])
            what = f"op {op} result {r} ({original.op_name[op]})"
            over[st.index][v] = (_owned(named, st, v, what) if st.index == int(owner[op]) else
                                 restrict(named, st.names, st.mesh.axis_sizes, st.tables.shapes[v]))
    return over


def _received(original: Any, stages: list[StageLayout], props: list[Propagation], owner: np.ndarray,
              k: int) -> dict[int, Spec]:
    """Stage ``k``'s received values in their senders' current specs, restricted to its axes."""
    st = stages[k]
    out: dict[int, Spec] = {}
    for w in st.map.received.tolist():
        v = int(st.map.values[w])
        src = stages[int(owner[int(original.value_node[v])])]
        sv = src.map.value_of(v)
        shape = st.tables.shapes[w]
        named: Named = ((),) * len(shape) if sv is None else tuple(
            tuple(src.names[a] for a in dim) for dim in props[src.index].spec(sv))
        out[w] = restrict(named, st.names, st.mesh.axis_sizes, shape)
    return out


def stage_layouts(problem: Any, solution: Any) -> list[StageLayout]:
    """Every stage of a whole-cluster ``solution`` with its complete layout (module doc); ``ValueError``
    with the reason when a stage's mesh or a recorded spec does not fit."""
    ops = stage_op_ids(problem, solution.assignment, solution.num_stages)
    stages = []
    for k, stage in enumerate(solution.stages):
        if len(ops[k]) == 0:
            raise ValueError(f"stage {k} has no nodes")
        mesh, names = stage_mesh(problem.topology, stage)
        stages.append(StageLayout(k, ops[k], mesh, names, stage_tables(problem, ops[k], mesh), {}))
    owner = _op_owners(problem.original.num_nodes, ops)
    over = _overrides(problem, stages, solution.shardings, owner)
    props = [Propagation(st.tables, over[st.index]) for st in stages]
    S = len(stages)
    sweeps = [list(range(S)), list(range(S - 1, -1, -1))]
    for sweep in range(2 * S + 2):
        changed = False
        for k in sweeps[sweep % 2]:
            for w, spec in _received(problem.original, stages, props, owner, k).items():
                if w not in over[k] and props[k].spec(w) != spec:
                    props[k].update({w: spec})
                    changed = True
        if not changed:
            break
    return [StageLayout(st.index, st.ops, st.mesh, st.names, st.tables, props[st.index].specs()) for st in stages]


def _recorded(tables: ShardingTables, specs: Mapping[int, Spec]) -> dict[int, Spec]:
    """What the plan records of a stage's layout: every op result (:func:`~planmap.sharding.solution.pinned_layout`:
    the runtime pins them, so XLA compiles the costed layout rather than its own propagation), the arguments
    that are not replicated, and the model's data arguments even when replicated (the runtime would otherwise
    split an unrecorded one over a ``data`` axis by its batch rule)."""
    out = pinned_layout(tables, specs)
    m = stage_map(tables.graph)
    for a in tables.graph.args:
        if a.role == "data" and m is not None and int(m.args[a.index]) >= 0:
            out[a.value] = specs[a.value]
    return out


def stages_solution(problem: Any, assignment: np.ndarray, layouts: Sequence[tuple[ShardingTables, Mapping[int, Spec]]],
                    certificate: Any, *, schedule: str | None = None, microbatches: int | None = None) -> Any:
    """The Solution of a whole-cluster plan from each stage's tables (:func:`stage_tables`, in stage order)
    and complete layout: stages on the tables' meshes with role-named axes (``()`` for one device), and
    what each layout records (:func:`_recorded`) in the one Shardings dict in the owners' axis names (module
    doc). A received value's or a shared argument's spec in a non-owning stage is not recorded: the plan gives
    it the owner's spec restricted to that stage's axes."""
    from planmap.problem import Shardings, Solution, Stage

    stages, args, values = [], {}, {}
    backward, vnode = problem.original.backward, problem.original.value_node
    op_owner = _op_owners(problem.original.num_nodes, stage_op_ids(problem, assignment, len(layouts)))
    arg_owner = argument_owners(op_owner, _argument_reads(problem.original))
    held: set[int] = set()  # arguments an earlier stage holds (the owner of one that no stage's own op reads)
    for k, (tables, specs) in enumerate(layouts):
        m = stage_map(tables.graph)
        if m is None:
            raise ValueError("stages_solution requires stage tables (planmap.sharding.stage.stage_tables)")
        single, g = tables.mesh.num_devices == 1, tables.graph
        # roles from the model's arguments; a stage reading no data argument of the model takes the batch role
        # from the activations it receives from forward ops (dim 0 the batch), never from gradients flowing
        # back or a parameter's gradient (their splits follow the sender's backward)
        inputs = any(a.role == "data" and a.type.rank and m.args[a.index] >= 0 for a in g.args)
        other = {w for w in m.received.tolist()
                 if inputs or m.batch[w] != 0 or backward[int(vnode[int(m.values[w])])]}
        own_args = {k: s for k, s in specs.items() if k not in other}
        names = ("_",) if single else axis_names(tables, own_args)
        stages.append(Stage(tuple(int(d) for d in tables.mesh.devices),
                            () if single else mesh_axes(names, tables.mesh.axis_sizes, specs)))
        for v, spec in sorted(_recorded(tables, specs).items()):
            entries = tuple(tuple(e) if isinstance(e, list) else e for e in partition_spec(spec, names))
            node = int(g.value_node[v])
            if node < 0:
                i = int(m.args[next(a.index for a in g.args if a.value == v)])
                if i >= 0 and arg_owner.get(i, k if i not in held else -1) == k:
                    args[i] = entries
            elif m.own[node]:
                values[(int(m.ops[node]), int(g.value_index[v]))] = entries
        held.update(int(i) for i in m.args.tolist() if i >= 0)
    return Solution(np.asarray(assignment, np.int32), tuple(stages), certificate, schedule=schedule,
                    microbatches=problem.microbatches if microbatches is None else microbatches,
                    shardings=Shardings((), args, values))

"""SPMD evaluation of a sharding layout, the default layout (propagation) and its compression.

A *layout* gives every value (argument and op result) a :data:`~planmap.sharding.specs.Spec`, as a
``{value id: spec}`` dict. With every value's spec fixed, the cost of the program decomposes per op:
each op takes its locally cheapest strategy whose result spec is its value's spec, paying compute +
its own collectives + resharding each operand from the spec it is held in into the spec the strategy
requires — so :func:`evaluate_spmd` is exact for the model of :mod:`planmap.sharding.tables`.

:func:`propagate` fills in a layout from a few overrides (arguments replicated unless overridden; an
op, unless overridden, takes the result spec of its cheapest strategy given its operands' specs, ties
to the lowest strategy index) and :func:`compress` keeps only what differs from that default, so a
plan records a handful of specs and ``propagate(tables, compress(tables, specs)) == specs``.

Entry points for the integration: :func:`tables_for` (a :class:`~planmap.problem.Problem` and a mesh →
tables of ``problem.original``) and :func:`evaluate_spmd`.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.cost import OPTIMIZER_STATES, param_memory_factor
from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.reshard import reshard_collectives
from planmap.sharding.specs import Spec, from_assignment, is_valid, replicated, shards
from planmap.sharding.strategies import strategy_collectives
from planmap.sharding.tables import ShardingTables

__all__ = ["SpmdEvaluation", "evaluate_spmd", "Propagation", "propagate", "compress", "tables_for", "data_axes",
           "zero_param_bytes"]


def tables_for(problem: Any, mesh: LogicalMesh) -> ShardingTables:
    """The sharding tables of a :class:`~planmap.problem.Problem` on ``mesh`` (its un-coarsened graph,
    topology, mode, optimizer, microbatches and memory headroom)."""
    return ShardingTables.from_problem(problem, mesh)


@dataclass(frozen=True)
class SpmdEvaluation:
    """What a layout costs. Times in seconds per device; ``step_time`` = ``microbatch_time`` ×
    microbatches (gradient accumulation). ``memory`` (bytes per device) = ``memory_parts`` summed:
    params (with gradients and optimizer state in training), data, stash, peak working set.
    ``collectives``: ``(kind, axes, bytes per device, count)`` per microbatch, op collectives and
    reshards together. ``choice``/``op_time``: per op, the strategy taken and its seconds."""

    step_time: float
    microbatch_time: float
    compute: float
    comm: float
    reshard: float
    memory: float
    memory_parts: dict[str, float]
    capacity: float
    feasible: bool
    collectives: tuple[tuple[str, tuple[int, ...], int, int], ...]
    choice: np.ndarray
    op_time: np.ndarray

    def count(self, kind: str) -> int:
        """Number of collectives of ``kind`` per microbatch."""
        return sum(c[3] for c in self.collectives if c[0] == kind)


def _local_cost(t: ShardingTables, i: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(own cost, reshard cost) per strategy of op ``i`` given the spec rows its operands are held in."""
    own = t.compute[i] + t.comm[i]
    moves = np.zeros(len(own))
    for e in range(int(t.edge_ptr[i]), int(t.edge_ptr[i + 1])):
        k, v = int(t.edge_pos[e]), int(t.edge_value[e])
        moves = moves + t.edge_matrix[e][rows[v], t.in_index[i][k]]
    for v in t.unit_values(i):
        if v in t.grad_edge:
            moves = moves + t.edge_matrix[t.grad_edge[v]][t.out_index[i], rows[_param_value(t, v)]]
    return own, moves


def _param_value(t: ShardingTables, grad: int) -> int:
    return t.unit_values(t.grad_param[grad])[0]


def _row(t: ShardingTables, u: int, spec: Spec, v: int) -> int:
    row = t.spec_row(u, spec) if is_valid(spec, t.shapes[v], t.mesh.axis_sizes) else None
    if row is None:
        raise ValueError(f"spec {spec} of value {v} (shape {t.shapes[v]}) is not a result spec of any strategy "
                         f"of {'argument' if u >= t.num_ops else 'op'} {u} on mesh {t.mesh.shape}")
    return row


def _op_row(t: ShardingTables, i: int, specs: Mapping[int, Spec], *, default: int | None = None) -> int | None:
    """Row of the spec an op's results are given (all results share one per-axis assignment, whatever
    their ranks), or ``default`` if none is given."""
    given = {v: specs[v] for v in t.unit_values(i) if v in specs}
    rows = {_row(t, i, spec, v) for v, spec in given.items()}
    if len(rows) > 1:
        raise ValueError(f"op {i} ({t.graph.kind[i]}) has results with different specs {sorted(given.values())}; "
                         "every result of an op shares one spec")
    return rows.pop() if rows else default


def _spec_of(t: ShardingTables, u: int, row: int, v: int) -> Spec:
    return from_assignment(t.out_specs[u][row], len(t.shapes[v]))


class Propagation:
    """The default layout (:func:`propagate`) kept up to date while argument specs are set one at a time:
    setting an argument's spec recomputes only the ops whose operands' specs change, in topological order
    (the Megatron baseline decides parameter specs in op order, each from the layout so far)."""

    def __init__(self, tables: ShardingTables, overrides: Mapping[int, Spec] | None = None) -> None:
        t = self.tables = tables
        self._overrides = dict(overrides or {})
        self._fixed = {i: row for i in range(t.num_ops)
                       if (row := _op_row(t, i, self._overrides)) is not None}
        consumers: list[list[int]] = [[] for _ in range(t.graph.num_values)]
        for v, i in zip(t.edge_value.tolist(), t.edge_dst.tolist(), strict=True):
            if i < t.num_ops:  # a gradient's edge into its parameter's unit: the parameter's spec does not follow
                consumers[v].append(i)
        self._consumers = consumers
        self.rows = np.zeros(t.graph.num_values, np.int64)
        for pos, a in enumerate(t.graph.args):
            spec = self._overrides.get(a.value, replicated(a.type.rank))
            self.rows[a.value] = _row(t, t.num_ops + pos, spec, a.value)
        for i in range(t.num_ops):
            self.rows[list(t.unit_values(i))] = self._op_row(i)

    def _op_row(self, i: int) -> int:
        row = self._fixed.get(i)
        if row is None:
            own, moves = _local_cost(self.tables, i, self.rows)
            row = int(self.tables.out_index[i][int(np.argmin(own + moves))])
        return row

    def set_argument(self, value: int, spec: Spec) -> None:
        """Give argument ``value`` the spec ``spec`` and update every op downstream of it."""
        t = self.tables
        row = _row(t, int(t.value_unit[value]), spec, value)
        if row == self.rows[value]:
            return
        self.rows[value] = row
        dirty = list(self._consumers[value])
        heapq.heapify(dirty)
        done = -1
        while dirty:
            i = heapq.heappop(dirty)
            if i == done:
                continue
            done = i
            vals = t.unit_values(i)
            row = self._op_row(i)
            if vals and row != self.rows[vals[0]]:
                self.rows[list(vals)] = row
                for v in vals:
                    for c in self._consumers[v]:
                        heapq.heappush(dirty, c)

    def spec(self, value: int) -> Spec:
        return _spec_of(self.tables, int(self.tables.value_unit[value]), int(self.rows[value]), value)

    def specs(self) -> dict[int, Spec]:
        """Every value's spec."""
        return {v: self.spec(v) for v in range(self.tables.graph.num_values)}


def propagate(tables: ShardingTables, overrides: Mapping[int, Spec] | None = None) -> dict[int, Spec]:
    """The default layout: every value's spec given ``overrides`` ({value id: spec})."""
    return Propagation(tables, overrides).specs()


def _rows(t: ShardingTables, specs: Mapping[int, Spec]) -> np.ndarray:
    rows = np.zeros(t.graph.num_values, np.int64)
    for pos, a in enumerate(t.graph.args):
        if a.value not in specs:
            raise ValueError(f"the layout gives no spec for argument {a.index} ({a.name})")
        rows[a.value] = _row(t, t.num_ops + pos, specs[a.value], a.value)
    for i in range(t.num_ops):
        row = _op_row(t, i, specs)
        if row is None and t.unit_values(i):
            raise ValueError(f"the layout gives no spec for the results of op {i} ({t.graph.op_name[i]})")
        rows[list(t.unit_values(i))] = row or 0
    return rows


def compress(tables: ShardingTables, specs: Mapping[int, Spec]) -> dict[int, Spec]:
    """The overrides that reproduce ``specs`` under :func:`propagate`: arguments that are not replicated,
    and op results (the first result of the op) whose spec differs from the default given the operands."""
    t = tables
    rows = _rows(t, specs)
    out: dict[int, Spec] = {a.value: specs[a.value] for a in t.graph.args if specs[a.value] != replicated(a.type.rank)}
    for i in range(t.num_ops):
        vals = t.unit_values(i)
        if not vals:
            continue
        own, moves = _local_cost(t, i, rows)
        if int(t.out_index[i][int(np.argmin(own + moves))]) != rows[vals[0]]:
            out[vals[0]] = specs[vals[0]]
    return out


def data_axes(tables: ShardingTables, specs: Mapping[int, Spec]) -> tuple[int, ...]:
    """The mesh axes that split a data argument's batch dim (dim 0) in the layout ``specs``."""
    return tuple(sorted({ax for a in tables.graph.args if a.role == "data" and a.type.rank
                         for ax in specs.get(a.value, ((),))[0]}))


def zero_param_bytes(tables: ShardingTables, specs: Mapping[int, Spec], zero: int) -> float:
    """Bytes per device of the parameters with their gradients and optimizer state under ZeRO stage
    ``zero`` (training): stage 1 shards the optimizer state, stage 2 also the gradients, over the data
    axes the parameter's own spec does not use (flat shards: no divisibility needed); the weights stay
    in their spec. Stage 0 (and inference) is the tables' own parameter memory."""
    g, data = tables.graph, data_axes(tables, specs)
    states = OPTIMIZER_STATES[tables.optimizer]
    total = 0.0
    for a in g.args:
        if a.role != "param":
            continue
        spec = specs[a.value]
        own = {ax for dim in spec for ax in dim}
        held = float(g.value_bytes[a.value]) / shards(spec, tables.mesh.axis_sizes)
        if tables.mode != "training" or zero <= 0:
            total += held * param_memory_factor(tables.mode, tables.optimizer)
            continue
        extra = float(np.prod([tables.mesh.axis_sizes[ax] for ax in data if ax not in own]))
        total += held * (1.0 + (1.0 / extra if zero >= 2 else 1.0) + states / extra)
    return total


def evaluate_spmd(tables: ShardingTables, value_specs: Mapping[int, Spec], *, zero: int = 0) -> SpmdEvaluation:
    """Step time, memory and collectives of a complete layout ({value id: spec} for every value).
    ``zero``: ZeRO stage 1 or 2 for the memory (:func:`zero_param_bytes`); the collectives stay those
    of the layout (the optimizer update is not in the graph: its all-gather of the updated parameter
    shards is not charged)."""
    t = tables
    rows = _rows(t, value_specs)
    n = t.num_ops
    choice = np.zeros(n, np.int64)
    op_time = np.zeros(n)
    compute = comm = reshard = stash = peak = 0.0
    coll: Counter = Counter()
    for i in range(n):
        own, moves = _local_cost(t, i, rows)
        vals = t.unit_values(i)
        ok = t.out_index[i] == rows[vals[0]] if vals else np.ones(len(own), bool)
        s = int(np.flatnonzero(ok)[np.argmin((own + moves)[ok])])
        choice[i] = s
        op_time[i] = own[s] + moves[s]
        compute += float(t.compute[i][s])
        comm += float(t.comm[i][s])
        reshard += float(moves[s])
        stash += float(t.memory[i][s])
        peak = max(peak, float(t.working[i][s]))
        for kind, axes, b in strategy_collectives(t.sets[i], s, t.mesh, float(t.graph.out_bytes[i])):
            coll[(kind, axes, round(b))] += 1
        for e in range(int(t.edge_ptr[i]), int(t.edge_ptr[i + 1])):
            v, k = int(t.edge_value[e]), int(t.edge_pos[e])
            src = int(t.value_unit[v])
            p_asg, q_asg = t.out_specs[src][rows[v]], t.sets[i].inputs[k][s]
            for kind, axes, b in reshard_collectives(p_asg, q_asg, float(t.graph.value_bytes[v]), t.mesh):
                coll[(kind, axes, round(b))] += 1
        for v in vals:
            if v in t.grad_param:  # the gradient ends in its parameter's layout
                p_asg, q_asg = t.out_specs[i][rows[v]], t.out_specs[t.grad_param[v]][rows[_param_value(t, v)]]
                for kind, axes, b in reshard_collectives(p_asg, q_asg, float(t.graph.value_bytes[v]), t.mesh):
                    coll[(kind, axes, round(b))] += 1
    params = data = 0.0
    for pos, a in enumerate(t.graph.args):
        u = n + pos
        s = int(np.flatnonzero(t.out_index[u] == rows[a.value])[0])
        if a.role == "param":
            params += float(t.memory[u][s])
        else:
            data += float(t.memory[u][s])
    if zero > 0:
        params = zero_param_bytes(t, value_specs, zero)
    parts = {"params": params, "data": data, "stash": stash, "working": peak}
    memory = sum(parts.values())
    mb_time = compute + comm + reshard
    return SpmdEvaluation(
        step_time=mb_time * t.microbatches, microbatch_time=mb_time, compute=compute, comm=comm, reshard=reshard,
        memory=memory, memory_parts=parts, capacity=t.capacity, feasible=memory <= t.capacity,
        collectives=tuple(sorted((k, a, b, c) for (k, a, b), c in coll.items())), choice=choice, op_time=op_time)

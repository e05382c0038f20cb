"""Sharding strategies of one op on a logical mesh, derived from its :class:`~planmap.graph.DimMap`.

Each mesh axis (of size > 1) gets one role: ``none`` (the op is replicated over it), ``out d`` (result
dim ``d`` is split; operand dims mapped to ``d`` are split alike), ``slot s`` (reduction slot ``s`` is
split: every device holds partial sums, all-reduced over the axis) or ``slot s + out d`` (the partial
sums are reduce-scattered so the result leaves dim ``d`` split; the operands' ``d`` dims are NOT split
over that axis). A strategy is one role per axis; the product over axes is enumerated in a fixed
order and filtered to valid combinations (every spec divisible; an operand dim may not take two
different axes' roles that collide). Enumeration depends only on shapes, the map and the mesh sizes,
so :func:`enumerate_strategies` results are shared by repeated layers; costs are added per node by
:func:`strategy_costs`. Specs are held in assignment form (per axis: the dim, or -1) — see
:mod:`planmap.sharding.specs`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planmap.graph import DimMap
from planmap.sharding.mesh import LogicalMesh
from planmap.sharding.specs import Spec, assignments_valid, valid_specs

__all__ = ["Strategy", "StrategySet", "enumerate_strategies", "argument_strategies", "unit_strategies",
           "strategy_costs"]

Collective = tuple[str, tuple[int, ...], float]  # (kind, mesh axes, bytes per device)


@dataclass(frozen=True)
class Strategy:
    """One way to run an op: its result spec, the spec each operand must arrive in, and its cost.

    ``compute`` and ``comm`` are seconds per device; ``collectives`` lists ``(kind, axes, bytes)``
    of the collectives the op itself issues (all-reduce of partial sums, reduce-scatter)."""

    out: Spec
    inputs: tuple[Spec, ...]
    compute: float
    comm: float
    collectives: tuple[Collective, ...] = ()

    @property
    def cost(self) -> float:
        return self.compute + self.comm


@dataclass(frozen=True, eq=False)
class StrategySet:
    """All strategies of one op signature on one mesh's sizes, as arrays (K strategies, A axes).

    ``out`` (K, A): result assignment; ``inputs``: per operand (K, A); ``slot`` (K, A) bool: the axis
    is on a reduction slot (partial sums); ``scatter`` (K, A) bool: of those, reduce-scattered into
    an out dim (``slot`` & ``scatter``) rather than all-reduced; ``divisor`` (K,): product of the sizes
    of every axis the op splits its work over."""

    out: np.ndarray
    inputs: tuple[np.ndarray, ...]
    slot: np.ndarray
    scatter: np.ndarray
    divisor: np.ndarray

    @property
    def size(self) -> int:
        return len(self.out)


def _inverse(dims: Sequence[int], rank: int) -> list[int]:
    """Per result dim, the operand dim mapped to it (-1: none, -2: several — an axis on it is invalid)."""
    inv = [-1] * rank
    for j, d in enumerate(dims):
        if d >= 0:
            inv[d] = j if inv[d] == -1 else -2
    return inv


def enumerate_strategies(result_shape: Sequence[int], operand_shapes: Sequence[Sequence[int]], dim_map: DimMap,
                         sizes: Sequence[int]) -> StrategySet:
    """Every valid strategy of an op with this result shape, operand shapes and map on a mesh of ``sizes``.

    Order: the product over axes (axis 0 slowest) of the roles ``none``, ``out 0..r-1``, ``slot s``,
    ``slot s + out d`` — so index 0 is the fully replicated strategy."""
    r, n_ops, n_axes = len(result_shape), len(operand_shapes), len(sizes)
    slots = [s for s, entries in enumerate(dim_map.reduced) if any(j >= 0 for j in entries)]
    roles = [(-1, -1)] + [(d, -1) for d in range(r)] + [(-1, s) for s in slots] + \
        [(d, s) for s in slots for d in range(r)]
    options = [roles if size > 1 else roles[:1] for size in sizes]
    combo = np.array(list(itertools.product(*options)), np.int64).reshape(-1, n_axes, 2)
    out_dim, slot = combo[..., 0], combo[..., 1]
    ok = assignments_valid(out_dim, result_shape, sizes)
    inputs = []
    for k in range(n_ops):
        inv = np.array(_inverse(dim_map.operands[k], r) + [-1], np.int64)  # index -1 -> no result dim
        via_out = np.where(slot >= 0, -1, inv[np.where(out_dim >= 0, out_dim, r)])
        slot_dim = np.array([entries[k] for entries in dim_map.reduced] + [-1], np.int64)
        via_slot = slot_dim[np.where(slot >= 0, slot, len(dim_map.reduced))]
        asg = np.where(slot >= 0, via_slot, via_out)
        ok &= ~np.any(asg == -2, axis=1)
        asg = np.maximum(asg, -1)
        ok &= assignments_valid(asg, operand_shapes[k], sizes)
        inputs.append(asg)
    sz = np.asarray(sizes, np.int64)
    used = (out_dim >= 0) | (slot >= 0)
    divisor = np.prod(np.where(used, sz, 1), axis=1)
    return StrategySet(out_dim[ok], tuple(a[ok] for a in inputs), (slot >= 0)[ok], ((slot >= 0) & (out_dim >= 0))[ok],
                       divisor[ok])


def argument_strategies(shape: Sequence[int], sizes: Sequence[int]) -> StrategySet:
    """An argument's strategies: every valid spec of its shape (replicated first); no work."""
    out = valid_specs(shape, sizes)
    false = np.zeros(out.shape, bool)
    return StrategySet(out, (), false, false, np.ones(len(out), np.int64))


def unit_strategies(n_operands: int, n_axes: int) -> StrategySet:
    """A unit op (no DimMap): the one strategy with everything replicated and the full work."""
    rep = np.full((1, n_axes), -1, np.int64)
    false = np.zeros((1, n_axes), bool)
    return StrategySet(rep, (rep,) * n_operands, false, false, np.ones(1, np.int64))


def strategy_costs(sset: StrategySet, mesh: LogicalMesh, roofline: float, launch: float,
                   out_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """(compute, comm) seconds per strategy of a node: roofline / divisor + launch, and the all-reduce
    (per-device result bytes) or reduce-scatter (per-device bytes before the scatter) per slot axis."""
    sz = np.asarray(mesh.axis_sizes, np.int64)
    compute = roofline / sset.divisor + launch
    out_split = sset.out >= 0
    res_dev = out_bytes / np.prod(np.where(out_split, sz, 1), axis=1)
    before = out_bytes / np.prod(np.where(out_split & ~sset.scatter, sz, 1), axis=1)
    comm = np.zeros(sset.size)
    for a in range(mesh.num_axes):
        reduce_ = sset.slot[:, a] & ~sset.scatter[:, a]
        if reduce_.any():
            comm += np.where(reduce_, mesh.allreduce(res_dev, a), 0.0)
        if sset.scatter[:, a].any():
            comm += np.where(sset.scatter[:, a], mesh.reduce_scatter(before, a), 0.0)
    return compute, comm


def strategy_collectives(sset: StrategySet, s: int, mesh: LogicalMesh, out_bytes: float) -> tuple[Collective, ...]:
    """The ``(kind, axes, bytes)`` collectives strategy ``s`` issues (one entry per kind)."""
    sz = np.asarray(mesh.axis_sizes, np.int64)
    out_split = sset.out[s] >= 0
    res_dev = out_bytes / int(np.prod(np.where(out_split, sz, 1)))
    before = out_bytes / int(np.prod(np.where(out_split & ~sset.scatter[s], sz, 1)))
    ar = tuple(int(a) for a in np.flatnonzero(sset.slot[s] & ~sset.scatter[s]))
    rs = tuple(int(a) for a in np.flatnonzero(sset.scatter[s]))
    return tuple(c for c in (("all-reduce", ar, res_dev), ("reduce-scatter", rs, before)) if c[1] and out_bytes > 0)

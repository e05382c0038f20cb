"""SPMD baselines that need no search: data parallel, FSDP (ZeRO-3) and Megatron tensor parallel (and the
replicated layout, the sharding solver's fallback).

Each fixes a few argument specs (and nothing else) and lets the default propagation of
:mod:`planmap.sharding.spmd` lay out every op; the result is judged by :func:`planmap.evaluate.evaluate`.
A training layout that does not fit memory takes the lowest ZeRO stage under which it does (:func:`with_zero`).

* ``data-parallel``: a 1-D mesh over all accelerators; data arguments split on their batch dim (dim 0),
  parameters replicated.
* ``fsdp``: data parallel, and each parameter split along the data axis on its largest divisible dim
  (gathered where it is used; its gradient and optimizer state stay split).
* ``megatron``: a (data, tensor) mesh with the tensor axis inside a host — every intra-host size that
  divides is tried and the best under the evaluator kept. Data arguments split over ``data``; the
  parameters of matmuls alternate column / row splits over ``tensor`` by the standard rule: for each
  ``dot_general`` (in op order) whose rhs is a parameter (through converts / transposes / reshapes),
  if its lhs is not already split over ``tensor`` on the contracting dim, split the rhs's free dim
  (column parallel), else its contracting dim (row parallel). Attention heads follow by propagation.
* ``replicated`` (not a registry name): every value replicated on the 1-D mesh, each device running the whole
  program on the whole batch — the single-device plan as an SPMD layout. A launch-bound model (small
  kernels, whose launches every device pays) runs no faster split, and the collectives only add; this
  layout keeps the sharding solver's anytime answer no worse than one device when the IP has no time.

A cluster whose devices cannot form a mesh (mixed device types, hosts of different sizes) raises
:class:`~planmap.errors.SolverUnavailableError` ("not applicable"), which ``auto`` skips.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from planmap.errors import SolverUnavailableError
from planmap.evaluate import Evaluation, evaluate
from planmap.graph import OpGraph
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.sharding import LogicalMesh, ShardingTables, Spec, logical_meshes, propagate, replicated
from planmap.sharding.solution import spmd_solution, tables_cache
from planmap.sharding.spmd import Propagation

__all__ = ["DataParallel", "FSDP", "Megatron", "data_parallel", "fsdp", "megatron", "meshes_or_raise",
           "BASELINES", "with_zero", "ZERO_STAGES", "fsdp_overrides", "replicated_everywhere"]

VERSION = "1"
_PASS_THROUGH = frozenset({"stablehlo.convert", "stablehlo.transpose", "stablehlo.reshape", "stablehlo.copy",
                           "stablehlo.bitcast_convert"})


def meshes_or_raise(problem: Problem, what: str) -> list[LogicalMesh]:
    """The logical meshes of the cluster's accelerators, or "not applicable" when they form none."""
    meshes = logical_meshes(problem.topology)
    if not meshes or meshes[0].num_devices < 2:
        raise SolverUnavailableError(
            f"{what} is not applicable to {problem.name}: the cluster's devices do not form a mesh "
            "(an SPMD mesh needs 2 or more devices of one type, the same number on every host)")
    return meshes


def _split(spec_dims: int, dim: int, axes: tuple[int, ...]) -> Spec:
    return tuple(axes if d == dim else () for d in range(spec_dims))


def _data_specs(tables: ShardingTables, axis: int) -> dict[int, Spec]:
    """Data arguments split on dim 0 over ``axis`` where it divides."""
    size = tables.mesh.axis_sizes[axis]
    return {a.value: _split(a.type.rank, 0, (axis,)) for a in tables.graph.args
            if a.role == "data" and a.type.rank and a.type.shape[0] % size == 0}


def _replicated_closure(tables: ShardingTables, overrides: dict[int, Spec]) -> dict[int, Spec]:
    """``overrides`` plus a replicated spec for every op result computed only from replicated
    parameters and constants (bias broadcasts, weight converts, iotas): such values are parameters in
    all but name, and the default propagation would otherwise split them to save nanoseconds of
    compute and pay a reshard where they meet the batch-split activations."""
    g = tables.graph
    const = np.zeros(g.num_values, bool)
    for a in g.args:
        const[a.value] = a.role != "data" and a.value not in overrides
    out = dict(overrides)
    for i in range(tables.num_ops):
        vals = tables.unit_values(i)
        if vals and all(const[v] for v in tables.operands[i]):
            const[list(vals)] = True
            for v in vals:
                out.setdefault(v, replicated(len(tables.shapes[v])))
    return out


def gradient_layouts(tables: ShardingTables, overrides: dict[int, Spec]) -> dict[int, Spec]:
    """``overrides`` plus, in training, every parameter gradient in its parameter's layout, carried back
    through the pass-through ops (transposes, reshapes, converts) that produce it: the op computing the
    gradient then reduces it straight into that layout (an all-reduce for a replicated parameter), as
    XLA does, instead of reduce-scattering it and gathering it again, which the greedy default layout
    would choose one op at a time."""
    out = dict(overrides)
    for v, u in tables.grad_param.items():
        p = tables.unit_values(u)[0]
        todo = [(v, overrides.get(p, replicated(len(tables.shapes[p]))))]
        while todo:
            v, spec = todo.pop()
            if v not in out:
                out[v] = spec
                todo += _specs_upstream(tables, v, spec)
    return out


def _specs_upstream(tables: ShardingTables, v: int, spec: Spec) -> list[tuple[int, Spec]]:
    """The (operand, spec) pairs from which the op defining ``v`` computes ``spec`` locally: it reduces
    nothing over its non-scalar operands and every split result dim comes from a dim of each of them
    (elementwise ops, reshapes, transposes, converts, size-1 reductions); [] where the chain stops (at
    the op that reduces the gradient, at arguments)."""
    g = tables.graph
    node = int(g.value_node[v])
    m = g.dim_maps[node] if node >= 0 and g.dim_maps is not None else None
    if m is None:
        return []
    ks = [k for k, w in enumerate(tables.operands[node]) if tables.shapes[w]]
    if any(slot[k] >= 0 for slot in m.reduced for k in ks if k < len(slot)):
        return []
    out = []
    for k in ks:
        dims, w = m.operands[k], tables.operands[node][k]
        if any(axes and d not in dims for d, axes in enumerate(spec)):
            return []
        if int(g.value_node[w]) >= 0:
            out.append((w, tuple(spec[d] if d >= 0 else () for d in dims)))
    return out


ZERO_STAGES = (0, 1, 2)  # ZeRO stage 3 is a layout (parameter specs over the data axis: ``fsdp``), not a flag


def with_zero(problem: Problem, sol: Solution, ev: Evaluation) -> tuple[Solution, Evaluation]:
    """The lowest ZeRO stage under which an SPMD training solution fits memory (stage 0 when it fits as it
    is, or in inference; the last stage tried when none fits). ZeRO-1/2 change the memory only in this
    model (their reduce-scatter + all-gather moves what the all-reduce moved), so the lowest stage that fits
    is the cheapest choice, and fewer shards keep the plan simplest."""
    if ev.feasible or problem.mode != "training" or sol.shardings is None:
        return sol, ev
    for zero in ZERO_STAGES[1:]:
        sol = replace(sol, shardings=replace(sol.shardings, zero=zero))
        ev = evaluate(problem, sol)
        if ev.feasible:
            break
    return sol, ev


def _finish(problem: Problem, tables: ShardingTables, overrides: dict[int, Spec], name: str,
            t0: float) -> tuple[Solution, Evaluation]:
    layout = _replicated_closure(tables, gradient_layouts(tables, overrides))
    sol = spmd_solution(problem, tables, propagate(tables, layout),
                        Certificate(Status.HEURISTIC, name, version=VERSION))
    sol, ev = with_zero(problem, sol, evaluate(problem, sol))
    return sol.with_certificate(objective=ev.objective, wall_time=time.perf_counter() - t0), ev


def _batch_split(problem: Problem, name: str) -> tuple[LogicalMesh, ShardingTables, dict[int, Spec]]:
    """The 1-D mesh over every accelerator, its tables, and the data arguments split on their batch dim
    (``name`` is "not applicable" when no batch dim divides over the mesh)."""
    mesh = meshes_or_raise(problem, name)[0]
    tables = tables_cache(problem).get(mesh)
    data = _data_specs(tables, 0)
    if not data:
        raise SolverUnavailableError(f"{name} is not applicable to {problem.name}: no data argument's "
                                     f"batch dim divides over {mesh.num_devices} devices")
    return mesh, tables, data


def data_parallel(problem: Problem) -> tuple[Solution, Evaluation]:
    """Pure data parallelism on the 1-D mesh over every accelerator."""
    t0 = time.perf_counter()
    _, tables, data = _batch_split(problem, "data-parallel")
    return _finish(problem, tables, data, "data-parallel", t0)


def fsdp(problem: Problem) -> tuple[Solution, Evaluation]:
    """Data parallel with every parameter split along the data axis on its largest divisible dim."""
    t0 = time.perf_counter()
    _, tables, over = _batch_split(problem, "fsdp")
    return _finish(problem, tables, fsdp_overrides(tables, over), "fsdp", t0)


def fsdp_overrides(tables: ShardingTables, data: dict[int, Spec]) -> dict[int, Spec]:
    """``data`` (the data arguments split over mesh axis 0) plus every parameter split over axis 0 on its
    largest dim that the axis divides (the lowest such dim on ties): the FSDP layout's overrides."""
    over = dict(data)
    p = tables.mesh.axis_sizes[0]
    for a in tables.graph.args:
        if a.role != "param":
            continue
        dims = [d for d, n in enumerate(a.type.shape) if n % p == 0]
        if dims:
            best = max(dims, key=lambda d: (a.type.shape[d], -d))
            over[a.value] = _split(a.type.rank, best, (0,))
    return over


def replicated_everywhere(problem: Problem) -> tuple[Solution, Evaluation]:
    """Every argument and op result replicated on the 1-D mesh over every accelerator (no collectives)."""
    t0 = time.perf_counter()
    mesh = meshes_or_raise(problem, "replicated")[0]
    tables = tables_cache(problem).get(mesh)
    return _finish(problem, tables, {v: replicated(len(s)) for v, s in enumerate(tables.shapes)}, "replicated", t0)


# -------------------------------------------------------------------------------------- Megatron
def _param_dims(graph: OpGraph, operands, v: int, dims: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """Follow value ``v`` back through pass-through ops to a parameter argument: (argument value id, the
    argument dim of each of ``dims``, -1 where a dim does not come from one argument dim), or None."""
    roles = {a.value: a.role for a in graph.args}
    while True:
        node = int(graph.value_node[v])
        if node < 0:
            return (v, dims) if roles.get(v) == "param" else None
        m = graph.dim_maps[node] if graph.dim_maps is not None else None
        if graph.kind[node] not in _PASS_THROUGH or m is None or len(operands[node]) != 1:
            return None
        inverse = {d: j for j, d in enumerate(m.operands[0]) if d >= 0}
        dims = tuple(inverse.get(d, -1) if d >= 0 else -1 for d in dims)
        v = operands[node][0]


def _dot_roles(m) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(lhs contracting dims, rhs contracting dims, rhs free dims) of a dot_general's DimMap."""
    lhs_c = tuple(e[0] for e in m.reduced if e[0] >= 0)
    rhs_c = tuple(e[1] for e in m.reduced if e[1] >= 0)
    lhs_out = {d for d in m.operands[0] if d >= 0}
    rhs_free = tuple(j for j, d in enumerate(m.operands[1]) if d >= 0 and d not in lhs_out)
    return lhs_c, rhs_c, rhs_free


def megatron_overrides(tables: ShardingTables, tensor: int, data: int | None) -> dict[int, Spec]:
    """Argument specs of the Megatron layout on ``tables.mesh`` (axis ``tensor``; data over ``data``).

    Each decision reads the layout so far: the default propagation of the decided specs with constant
    values replicated (:func:`_replicated_closure`) and two rounds of :func:`_tensor_pins`, kept up to date
    by one incremental :class:`Propagation` (only the ops downstream of a change are recomputed), and a
    second one of the decided specs alone for the partial sums a row-parallel dot reduces."""
    g = tables.graph
    over = _data_specs(tables, data) if data is not None else {}
    size = tables.mesh.axis_sizes[tensor]
    shapes = {a.value: a.type.shape for a in g.args}
    decided: set[int] = set()
    held = _replicated_closure(tables, over)
    layout, plain = Propagation(tables, held), Propagation(tables, over)
    for i in range(g.num_nodes):
        m = g.dim_maps[i] if g.dim_maps is not None else None
        if g.kind[i] != "stablehlo.dot_general" or m is None or len(tables.operands[i]) != 2 or not m.reduced:
            continue
        lhs, rhs = tables.operands[i]
        lhs_c, rhs_c, rhs_free = _dot_roles(m)
        traced = _param_dims(g, tables.operands, rhs, rhs_c + rhs_free)
        if traced is None or traced[0] in decided:
            continue
        p, pdims = traced
        decided.add(p)
        base = _replicated_closure(tables, over)
        layout.update({v: base.get(v) for v in set(held) | set(base) if held.get(v) != base.get(v)})
        held = base
        for _ in range(2):
            pins = _tensor_pins(tables, layout, held, tensor)
            if not pins:
                break
            layout.update(pins)
            held = {**held, **pins}
        lhs_split = any(tensor in layout.spec(lhs)[d] for d in lhs_c)
        cands = pdims[: len(rhs_c)] if lhs_split else pdims[len(rhs_c):]
        dim = next((d for d in cands if d >= 0 and shapes[p][d] % size == 0), None)
        if dim is not None:
            over[p] = _split(len(shapes[p]), dim, (tensor,))
            plain.update({p: over[p]})
            if lhs_split:  # row parallel: the partial sums are all-reduced (before the next layer reads them)
                res = tables.unit_values(i)[0]
                over[res] = _without(plain.spec(res), tensor)
                plain.update({res: over[res]})
    over = _all_reduce_partial_sums(tables, _replicated_closure(tables, gradient_layouts(tables, over)), tensor)
    return _tensor_only_downstream(tables, over, tensor)


def _without(spec: Spec, axis: int) -> Spec:
    return tuple(tuple(a for a in dim if a != axis) for dim in spec)


def _all_reduce_partial_sums(tables: ShardingTables, over: dict[int, Spec], tensor: int,
                             rounds: int = 4) -> dict[int, Spec]:
    """Megatron's activations: a dot_general that contracts a dim split over ``tensor`` (the row-parallel
    layer forward, the column-parallel layer's input gradient backward) all-reduces its partial sums into
    a result not split over ``tensor``; the greedy default would reduce-scatter them and gather later.
    Pinned a round at a time (each round reads the layout after the previous round's pins) until no such
    dot is left."""
    g = tables.graph
    maps = g.dim_maps if g.dim_maps is not None else (None,) * g.num_nodes
    dots = [i for i in range(g.num_nodes) if g.kind[i] == "stablehlo.dot_general" and (m := maps[i]) is not None
            and m.reduced and tables.unit_values(i)]
    layout = Propagation(tables, over)
    for _ in range(rounds):
        pins = {}
        for i in dots:
            res, m = tables.unit_values(i)[0], maps[i]
            assert m is not None  # dots have maps (above)
            if res in over or res in tables.grad_param:
                continue
            if any(layout.splits(v, tensor) and tensor in layout.spec(v)[slot[k]] for slot in m.reduced
                   for k, v in enumerate(tables.operands[i]) if k < len(slot) and slot[k] >= 0):
                pins[res] = _without(layout.spec(res), tensor)
        if not pins:
            break
        over.update(pins)
        layout.update(pins)
    return over


def _tensor_pins(tables: ShardingTables, layout: Propagation, held: dict[int, Spec], tensor: int) -> dict[int, Spec]:
    """The results to pin off ``tensor`` in ``layout``: those of ops not pinned in ``held`` whose operands
    are all free of it but whose result is split over it (see :func:`_tensor_only_downstream`)."""
    pins = {}
    for i in range(tables.num_ops):
        vals = tables.unit_values(i)
        if not vals or vals[0] in held or not layout.splits(vals[0], tensor):
            continue
        if not any(layout.splits(v, tensor) for v in tables.operands[i]):
            pins[vals[0]] = _without(layout.spec(vals[0]), tensor)
    return pins


def _tensor_only_downstream(tables: ShardingTables, over: dict[int, Spec], tensor: int,
                            rounds: int = 8) -> dict[int, Spec]:
    """Keep the ``tensor`` axis on the values computed from tensor-split values only: an op whose operands
    are all free of it (after a row-parallel all-reduce, the loss, the gradient flowing back into it)
    runs unsplit over ``tensor`` as XLA propagates it, not split to divide a few elementwise ops' work."""
    layout = Propagation(tables, over)
    for _ in range(rounds):
        pins = _tensor_pins(tables, layout, over, tensor)
        if not pins:
            break
        over.update(pins)
        layout.update(pins)
    return over


def megatron(problem: Problem, deadline: float | None = None) -> tuple[Solution, Evaluation]:
    """The best Megatron layout over the meshes with a tensor axis inside a host (see the module doc);
    with ``deadline`` (a ``time.monotonic()`` instant), the best of the meshes tried by then."""
    t0 = time.perf_counter()
    meshes = meshes_or_raise(problem, "megatron")
    candidates = [m for m in meshes if m.scope[-1] == "intra" and m.num_axes <= 2]
    best: tuple[tuple, Solution, Evaluation] | None = None
    for mesh in candidates:
        if best is not None and deadline is not None and time.monotonic() >= deadline:
            break
        tables = tables_cache(problem).get(mesh)
        tensor = mesh.num_axes - 1
        data = 0 if mesh.num_axes == 2 else None
        sol, ev = _finish(problem, tables, megatron_overrides(tables, tensor, data), "megatron", t0)
        key = (not ev.feasible, ev.objective)
        if best is None or key < best[0]:
            best = (key, sol, ev)
    if best is None:
        raise SolverUnavailableError(f"megatron is not applicable to {problem.name}: no mesh keeps a tensor "
                                     "axis inside a host")
    return best[1], best[2]


class _Baseline:
    name: str
    objectives = frozenset({"throughput"})
    build: Callable[[Problem], tuple[Solution, Evaluation]]

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        return type(self).build(problem)[0]


class DataParallel(_Baseline):
    """Data parallel over every accelerator (registry name ``data-parallel``)."""

    name = "data-parallel"
    build = staticmethod(data_parallel)


class FSDP(_Baseline):
    """Fully sharded data parallel (registry name ``fsdp``)."""

    name = "fsdp"
    build = staticmethod(fsdp)


class Megatron(_Baseline):
    """Megatron tensor parallel with data parallel outside a host (registry name ``megatron``)."""

    name = "megatron"
    build = staticmethod(megatron)


BASELINES: tuple[tuple[str, Callable[..., tuple[Solution, Evaluation]]], ...] = (
    ("data-parallel", data_parallel), ("fsdp", fsdp), ("megatron", megatron))

"""Write a plan's shardings into a module as Shardy (``sdy``) annotations, with the MLIR Python API.

Three kinds of annotation, all from JAX's vocabulary of PartitionSpecs (one entry per tensor dim:
``None``, an axis name, or a tuple of axis names):

* ``sdy.mesh @mesh`` — the stage's mesh (axis names and sizes). JAX recognises a module as a
  Shardy module by a mesh symbol called exactly ``mesh``.
* ``sdy.sharding`` on ``@main``'s arguments and results.
* ``sdy.sharding_constraint`` after chosen op results (Megatron's "shard the hidden activation").

GSPMD ``mhlo.sharding`` strings are never written: GSPMD is deprecated and crashed in the probes.
Text substitution is never used either: the IR is edited through the bindings, so any valid
StableHLO (whatever printed it) is annotated the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planmap.errors import InputError

__all__ = ["MESH_NAME", "Spec", "normalize_spec", "restrict_spec", "is_replicated", "annotate_module"]

MESH_NAME = "mesh"
Spec = tuple  # PartitionSpec-like: entries None | str | tuple[str, ...]


def normalize_spec(spec: Sequence, rank: int, what: str) -> Spec:
    """``spec`` as a tuple of ``None | str | tuple[str, ...]`` padded with None to ``rank`` entries."""
    out: list[str | tuple[str, ...] | None] = []
    for entry in spec:
        if entry is None or isinstance(entry, str):
            out.append(entry)
        else:
            axes = tuple(entry)
            out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    if len(out) > rank:
        raise InputError(f"the sharding of {what} requires at most {rank} entries (its rank), "
                         f"but got {len(out)}: {list(spec)}")
    return tuple(out) + (None,) * (rank - len(out))


def _axes(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def restrict_spec(spec: Spec, axis_names: Sequence[str]) -> Spec:
    """``spec`` with the axes that the stage's mesh lacks dropped (replicated along them)."""
    keep = set(axis_names)
    out = []
    for entry in spec:
        axes = tuple(a for a in _axes(entry) if a in keep)
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return tuple(out)


def is_replicated(spec: Spec) -> bool:
    return all(e is None for e in spec)


def _tensor_sharding(spec: Spec):
    from jax.extend.mlir.dialects import sdy

    dims = [sdy.DimensionShardingAttr.get([sdy.AxisRefAttr.get(a) for a in _axes(e)], is_closed=True)
            for e in spec]
    return sdy.TensorShardingAttr.get(MESH_NAME, dims)


def _set_in_dict_array(op, name: str, index: int, count: int, key: str, value) -> None:
    """Set ``key = value`` in the ``index``-th dictionary of ``op.attributes[name]`` (arg_attrs/res_attrs)."""
    from jax.extend.mlir import ir

    if name in op.attributes:
        dicts = [ir.DictAttr(a) for a in ir.ArrayAttr(op.attributes[name])]
    else:
        dicts = [ir.DictAttr.get({}) for _ in range(count)]
    entries = {dicts[index][k].name: dicts[index][k].attr for k in range(len(dicts[index]))}
    entries[key] = value
    dicts[index] = ir.DictAttr.get(entries)
    op.attributes[name] = ir.ArrayAttr.get(dicts)


def annotate_module(module, ctx, axes: Sequence[tuple[str, int]], *, arg_specs: dict[int, Spec],
                    result_specs: dict[int, Spec], constraints: Sequence[tuple[Any, int, Spec]]) -> None:
    """Add the mesh, argument/result shardings and constraints (``(op, result number, spec)``) in place."""
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import sdy

    from planmap.runtime.artifact import entry_function

    with ctx, ir.Location.unknown():
        for op in module.body.operations:
            if op.operation.name == "sdy.mesh":
                raise InputError("the artifact already carries Shardy shardings (an sdy.mesh); "
                                 "export the model for one device and let the plan shard it")
        mesh = sdy.MeshAttr.get([sdy.MeshAxisAttr.get(n, s) for n, s in axes])
        with ir.InsertionPoint.at_block_begin(module.body):
            sdy.MeshOp(MESH_NAME, mesh)
        main = entry_function(module)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        for i, spec in sorted(arg_specs.items()):
            _set_in_dict_array(main, "arg_attrs", i, len(ftype.inputs), "sdy.sharding", _tensor_sharding(spec))
        for i, spec in sorted(result_specs.items()):
            _set_in_dict_array(main, "res_attrs", i, len(ftype.results), "sdy.sharding", _tensor_sharding(spec))
        for op, result, spec in constraints:
            op = op.operation
            value = op.results[result]
            with ir.InsertionPoint(op):  # inserts before op; moved after it below
                c = sdy.ShardingConstraintOp(value, _tensor_sharding(spec))
            c.operation.move_after(op)
            value.replace_all_uses_except(c.result, c.operation)
        module.operation.verify()

"""Wrap an (annotated) StableHLO module as a ``jax.export.Exported`` so JAX runs it.

Going through ``Exported.call`` under ``jax.jit`` lets JAX do the plumbing the runtime would
otherwise reimplement: device assignment, argument checking, sharded buffers, async dispatch,
multi-process execution. The module is serialized as a VHLO portable artifact with *mixed*
serialization, which keeps ``sdy`` ops (plain ``serialize_portable_artifact_str`` rejects them);
serialization converts the module in place, so a clone is serialized.

The module is platform-neutral StableHLO, so the platform safety check is disabled: one module
runs on CPU or GPU devices alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from planmap.graph import TensorType

__all__ = ["to_exported"]


def to_exported(module, ctx, in_types: Sequence[TensorType], out_types: Sequence[TensorType], *,
                nr_devices: int, platform: str, in_shardings: Sequence | None = None,
                out_shardings: Sequence | None = None, name: str = "planmap_segment"):
    """An ``Exported`` of ``module`` (entry ``@main``, no tokens, static shapes).

    ``in_shardings``/``out_shardings``: NamedShardings on an abstract mesh, or None (unspecified).
    """
    import jax
    import jax.extend.mlir as jmlir
    from jax import export, tree_util
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo

    with ctx:
        clone = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        target = stablehlo.get_version_from_compatibility_requirement(
            stablehlo.StablehloCompatibilityRequirement.WEEK_4)
        blob = jmlir.serialize_portable_artifact(clone, target, True)
    in_avals = tuple(jax.core.ShapedArray(t.shape, t.np_dtype) for t in in_types)
    out_avals = tuple(jax.core.ShapedArray(t.shape, t.np_dtype) for t in out_types)
    n_in, n_out = len(in_avals), len(out_avals)
    return export.Exported(
        fun_name=name, in_tree=tree_util.tree_structure(((0,) * n_in, {})), in_avals=in_avals,
        out_tree=tree_util.tree_structure((0,) * n_out), out_avals=out_avals,
        _has_named_shardings=True,
        _in_named_shardings=tuple(in_shardings or (None,) * n_in),
        _out_named_shardings=tuple(out_shardings or (None,) * n_out),
        in_shardings_hlo=(None,) * n_in, out_shardings_hlo=(None,) * n_out,
        nr_devices=nr_devices, platforms=(platform,), ordered_effects=(), unordered_effects=(),
        disabled_safety_checks=(export.DisabledSafetyCheck.platform(),), mlir_module_serialized=blob,
        calling_convention_version=export.maximum_supported_calling_convention_version,
        module_kept_var_idx=tuple(range(n_in)), uses_global_constants=False, _get_vjp=None)

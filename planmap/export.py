"""Export a model (JAX, PyTorch or TensorFlow) to a StableHLO artifact that planmap can plan for.

``planmap.export.jax(fn, *example_args, path=...)`` lowers ``fn`` with ``jax.export`` — example
arguments may be ``jax.ShapeDtypeStruct``s, so no real arrays (or weights) are needed — and writes
the artifact in the format its suffix asks for:

* ``.mlir``: StableHLO text (readable, diffable; what the example specs commit),
* ``.vhlo`` / ``.mlirbc``: the VHLO portable artifact (``Exported.mlir_module_serialized``),
* ``.jaxexport``: a serialized ``jax.export.Exported`` (keeps the calling convention).

Locations keep JAX's name stacks (``jit(step)/layer3/attn/dot_general``) but no source file paths,
so that an artifact exported on two machines is byte-identical.

``planmap.export.torch(module, *example_tensors, path=...)`` goes ``torch.export.export`` ->
torchax (``pip install torchax``) -> ``jax.export.Exported``, so all suffixes work; the module's
parameters and buffers become arguments of ``@main`` before the inputs.
``planmap.export.tf(fn, *example_tensors, path=...)`` compiles a ``tf.function``, a Keras model, any
callable or a SavedModel directory with XLA (``jit_compile=True``) and writes its StableHLO: text
(``.mlir``) or MLIR bytecode (``.mlirbc``); ``tf.Variable`` weights become arguments after the inputs.
Neither framework is a planmap dependency: each is imported only when its exporter runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from planmap.io import write_atomic

__all__ = ["jax", "torch", "tf", "ARTIFACT_SUFFIXES", "FRAMEWORKS"]

FRAMEWORKS = ("jax", "torch", "tf")

ARTIFACT_SUFFIXES = {".mlir": "stablehlo", ".vhlo": "vhlo", ".mlirbc": "vhlo", ".jaxexport": "exported"}


@contextlib.contextmanager
def _names_only_locations():
    import jax as jax_

    old = jax_.config.jax_traceback_in_locations_limit
    jax_.config.update("jax_traceback_in_locations_limit", 0)
    try:
        yield
    finally:
        jax_.config.update("jax_traceback_in_locations_limit", old)


def exported(fn: Any, *example_args: Any, platforms: tuple[str, ...] | None = None, **jit_kwargs: Any):
    """``jax.export.Exported`` of ``fn`` at the example arguments (arrays or ShapeDtypeStructs)."""
    import jax as jax_
    from jax import export as jexport

    with _names_only_locations():
        jitted = fn if hasattr(fn, "lower") else jax_.jit(fn, **jit_kwargs)
        return jexport.export(jitted, platforms=platforms)(*example_args)


def jax(fn: Any, *example_args: Any, path: str | Path, platforms: tuple[str, ...] | None = None,
        **jit_kwargs: Any) -> Path:
    """Export ``fn`` at ``example_args`` to ``path`` (format from the suffix); return the path."""
    path = Path(path)
    _suffix_kind(path)
    return _write_exported(exported(fn, *example_args, platforms=platforms, **jit_kwargs), path)


def _suffix_kind(path: Path, allowed: Any = ARTIFACT_SUFFIXES) -> str:
    kind = ARTIFACT_SUFFIXES.get(path.suffix)
    if kind is None or path.suffix not in allowed:
        raise ValueError(f"export path requires one of the suffixes {sorted(allowed)}, but got {path.name!r}")
    return kind


def _write_exported(exp: Any, path: Path) -> Path:
    """Write a ``jax.export.Exported`` in the format ``path``'s suffix asks for."""
    kind = _suffix_kind(path)
    if kind == "stablehlo":
        data: bytes | str = exp.mlir_module()
    elif kind == "vhlo":
        data = bytes(exp.mlir_module_serialized)
    else:
        data = bytes(exp.serialize())
    return write_atomic(path, data)


def _allow_removed_named_overloads() -> None:
    """Let ``import torchax`` work with torch versions that removed ATen named-tensor overloads.

    torchax 0.0.13 names overloads such as ``aten.prod.dim_Dimname`` that torch 2.13 removed; it only
    uses them as dictionary keys and decomposition-list entries, so a missing one may be an inert
    placeholder. Idempotent (the patched lookup is marked), and other lookups behave as before."""
    import torch._ops as ops

    original = ops.OpOverloadPacket.__getattr__
    if getattr(original, "_planmap_patched", False):
        return

    class _Removed:
        def __init__(self, name: str) -> None:
            self.name = name

        def __repr__(self) -> str:
            return f"<removed overload {self.name}>"

    def patched(self, key):
        try:
            return original(self, key)
        except AttributeError:
            if "name" in key.lower() and not key.startswith("__"):
                return _Removed(f"{self._qualified_op_name}.{key}")
            raise

    patched._planmap_patched = True  # type: ignore[attr-defined]
    ops.OpOverloadPacket.__getattr__ = patched  # type: ignore[method-assign]


def torch(module: Any, *example_args: Any, path: str | Path) -> Path:
    """Export a ``torch.nn.Module`` at ``example_args`` (tensors) to ``path`` through torchax; return the path."""
    import torch as torch_

    path = Path(path)
    _suffix_kind(path)
    _allow_removed_named_overloads()
    try:
        from torchax.export import exported_program_to_stablehlo
    except ImportError:
        raise ImportError("exporting PyTorch needs torchax: pip install torchax") from None
    if not isinstance(module, torch_.nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(module).__name__}")
    with _names_only_locations():
        program = torch_.export.export(module.eval(), tuple(example_args))
        _weights, exp = exported_program_to_stablehlo(program)
    return _write_exported(exp, path)


def tf(fn: Any, *example_args: Any, path: str | Path) -> Path:
    """Export a TensorFlow function, Keras model or SavedModel directory at ``example_args`` to ``path``
    (``.mlir`` StableHLO text or ``.mlirbc`` MLIR bytecode); return the path."""
    import os
    import re

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf_

    path = Path(path)
    kind = _suffix_kind(path, (".mlir", ".mlirbc"))
    loaded = None  # a loaded SavedModel owns its variables: it must outlive the export of its signature
    if isinstance(fn, str | Path):
        fn = loaded = tf_.saved_model.load(str(fn))
        if not callable(fn):  # a SavedModel with signatures only
            fn = fn.signatures["serving_default"]
    compiled = tf_.function(fn, jit_compile=True) if not hasattr(fn, "experimental_get_compiler_ir") else fn
    ir = compiled.experimental_get_compiler_ir(*example_args)
    if kind == "stablehlo":
        # TF attaches each op's Python source position; drop file paths so the artifact is reproducible
        data: bytes | str = re.sub(r'loc\("[^"]*":\d+:\d+\)', "loc(unknown)", ir(stage="stablehlo"))
    else:
        data = ir(stage="stablehlo_serialized")
    del loaded
    return write_atomic(path, data)

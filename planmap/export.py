"""Export a JAX function to a StableHLO artifact that planmap can plan for and run.

``planmap.export.jax(fn, *example_args, path=...)`` lowers ``fn`` with ``jax.export`` — example
arguments may be ``jax.ShapeDtypeStruct``s, so no real arrays (or weights) are needed — and writes
the artifact in the format its suffix asks for:

* ``.mlir``: StableHLO text (readable, diffable; what the example specs commit),
* ``.vhlo`` / ``.mlirbc``: the VHLO portable artifact (``Exported.mlir_module_serialized``),
* ``.jaxexport``: a serialized ``jax.export.Exported`` (keeps the calling convention).

Locations keep JAX's name stacks (``jit(step)/layer3/attn/dot_general``) but no source file paths,
so that an artifact exported on two machines is byte-identical.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from planmap.io import write_atomic

__all__ = ["jax", "ARTIFACT_SUFFIXES"]

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
    kind = ARTIFACT_SUFFIXES.get(path.suffix)
    if kind is None:
        raise ValueError(f"export path requires one of the suffixes {sorted(ARTIFACT_SUFFIXES)}, "
                         f"but got {path.name!r}")
    exp = exported(fn, *example_args, platforms=platforms, **jit_kwargs)
    if kind == "stablehlo":
        data: bytes | str = exp.mlir_module()
    elif kind == "vhlo":
        data = bytes(exp.mlir_module_serialized)
    else:
        data = bytes(exp.serialize())
    return write_atomic(path, data)

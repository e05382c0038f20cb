#!/usr/bin/env python
"""Regenerate tests/fixtures/torch_mlp.mlir: the example MLP written in PyTorch, exported to StableHLO.

Route: ``torch.export.export`` -> ``torchax.export.exported_program_to_stablehlo`` (a
``jax.export.Exported``) -> StableHLO text. The network is ``planmap.examples.models.mlp`` layer for
layer (256 -> 512 -> 512 -> 512 -> 64, ReLU, batch 32), so the front end must find the same FLOPs
as in the JAX export (tests/frontend/test_frameworks.py).

torchax is not a planmap dependency. Install it next to the project's venv without touching it:

    .venv/bin/pip install --no-deps --target /tmp/torchax_pkgs torchax==0.0.13
    PYTHONPATH=/tmp/torchax_pkgs .venv/bin/python tools/export_torch_fixture.py [OUT_DIR]

torchax 0.0.13 refers to ATen named-tensor overloads (``aten.prod.dim_Dimname`` ...) that torch 2.13
removed, so ``import torchax`` fails; :func:`_allow_removed_named_overloads` makes such lookups return
an inert placeholder (torchax only uses them as dictionary keys and decomposition-list entries).
"""

from __future__ import annotations

import sys
from pathlib import Path

SIZES = (256, 512, 512, 512, 64)
BATCH = 32


def _allow_removed_named_overloads() -> None:
    import torch._ops as ops

    original = ops.OpOverloadPacket.__getattr__

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

    ops.OpOverloadPacket.__getattr__ = patched


def main(out_dir: Path) -> None:
    import jax
    import torch
    from torch import nn

    jax.config.update("jax_traceback_in_locations_limit", 0)  # no source paths: a reproducible artifact
    _allow_removed_named_overloads()
    from torchax.export import exported_program_to_stablehlo

    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(SIZES) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).eval()
    x = torch.zeros(BATCH, SIZES[0])
    exported = torch.export.export(model, (x,))
    _weights, jexp = exported_program_to_stablehlo(exported)
    out = out_dir / "torch_mlp.mlir"
    out.write_text(jexp.mlir_module())
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {len(jexp.in_avals)} inputs)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/fixtures"))

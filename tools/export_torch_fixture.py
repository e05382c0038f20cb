#!/usr/bin/env python
"""Regenerate tests/fixtures/torch_mlp.mlir: the example MLP written in PyTorch, exported to StableHLO.

Route: ``torch.export.export`` -> ``torchax.export.exported_program_to_stablehlo`` (a
``jax.export.Exported``) -> StableHLO text. The network is ``planmap.examples.models.mlp`` layer for
layer (256 -> 512 -> 512 -> 512 -> 64, ReLU, batch 32), so the front end must find the same FLOPs
as in the JAX export (tests/frontend/test_frameworks.py).

torchax is not a planmap dependency. Install it next to the project's venv without touching it:

    .venv/bin/pip install --no-deps --target /tmp/torchax_pkgs torchax==0.0.13
    PYTHONPATH=/tmp/torchax_pkgs .venv/bin/python tools/export_torch_fixture.py [OUT_DIR]

The export itself is :func:`planmap.export.torch` (``planmap export --from torch`` on the command line),
which also works around torchax 0.0.13's references to ATen overloads that torch 2.13 removed.
"""

from __future__ import annotations

import sys
from pathlib import Path

SIZES = (256, 512, 512, 512, 64)
BATCH = 32


def main(out_dir: Path) -> None:
    import torch
    from torch import nn

    import planmap.export

    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(SIZES) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).eval()
    out = planmap.export.torch(model, torch.zeros(BATCH, SIZES[0]), path=out_dir / "torch_mlp.mlir")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/fixtures"))

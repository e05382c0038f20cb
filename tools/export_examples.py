#!/usr/bin/env python
"""Regenerate the example model artifacts in specs/models/ (StableHLO text, from plain JAX).

Usage: python tools/export_examples.py [OUT_DIR]   (default: specs/models)
Each example is exported twice: inference (`<name>.mlir`, forward pass) and training
(`<name>_train.mlir`, a value-and-grad step). Exports use ShapeDtypeStructs: no weights needed.
"""
import sys
from pathlib import Path

import planmap.export
from planmap.examples.models import EXAMPLES


def main(out: Path) -> None:
    for name, model in sorted(EXAMPLES.items()):
        p = planmap.export.jax(model.forward, *model.abstract_args(), path=out / f"{name}.mlir")
        print(f"wrote {p} ({p.stat().st_size:,} bytes)")
        p = planmap.export.jax(model.train_step(), *model.abstract_args(train=True), path=out / f"{name}_train.mlir")
        print(f"wrote {p} ({p.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("specs/models"))

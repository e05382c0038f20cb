#!/usr/bin/env python
"""Regenerate tests/fixtures/sharding_cases/: the classic sharding cases, where the cost model itself prefers an
SPMD layout to any pipeline split on one host of 8 H100 (specs/clusters/h100-1x8.yaml).

* ``mlp_data_parallel.mlir``: a 3-layer MLP of width 2048 (bf16, 24 MiB of weights) over a batch of 32768,
  inference. Every matmul is large enough that the kernel overhead is small next to its compute, and a
  pipeline of 3 layers cannot balance 8 devices while moving 128 MiB of activations between stages; data
  parallel splits the batch with no collective at all: the whole-cluster planner's best plan *is* data
  parallel.
* ``mlp_megatron.mlir``: a transformer-style MLP block (65536 -> 262144 -> 65536, f32: 128 GiB of weights)
  over a batch of 16, inference. The weights fit on no device, so data parallel (replicated weights) is
  infeasible; a pipeline of its 2 layers leaves one layer's compute on one device; Megatron's column- then
  row-split matmuls (tensor parallel, one all-reduce of a 4 MiB activation) divide the compute and the
  weights: the whole-cluster planner's best plan is that layout (to 0.01 %).

Exports use ShapeDtypeStructs (no weights), deterministic; plain JAX, no other framework::

    .venv/bin/python tools/export_sharding_cases.py [OUT_DIR]   (default: tests/fixtures/sharding_cases)
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

import planmap.export

CASES = {  # name: (layer widths, batch, dtype)
    "mlp_data_parallel": ((2048, 2048, 2048, 2048), 32768, jnp.bfloat16),
    "mlp_megatron": ((65536, 262144, 65536), 16, jnp.float32),
}


def forward(params, x):
    """Dense layers (named scopes ``layer<i>``, which the front end reads as layers), ReLU between them."""
    n = len(params)
    for i in range(n):
        with jax.named_scope(f"layer{i}"):
            x = x @ params[f"layer{i}"]["w"]
            if i < n - 1:
                x = jax.nn.relu(x)
    return x


def abstract_args(sizes: tuple[int, ...], batch: int, dtype) -> tuple:
    params = {f"layer{i}": {"w": jax.ShapeDtypeStruct((a, b), dtype)}
              for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))}
    return params, jax.ShapeDtypeStruct((batch, sizes[0]), dtype)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (sizes, batch, dtype) in CASES.items():
        p = planmap.export.jax(forward, *abstract_args(sizes, batch, dtype), path=out / f"{name}.mlir")
        print(f"wrote {p} ({p.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/fixtures/sharding_cases"))

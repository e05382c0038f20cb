#!/usr/bin/env python
"""Calibrate the small-size penalty (``halfEfficiencyFlops``) from dot_general timings on this CPU.

Usage: python bench/efficiency.py [--k 1024] [--repeats 15] [--out bench/results/efficiency.md]

A JAX function with one ``(m x K) @ (K x K)`` dot per batch size m (1 ... 256) is exported and
profiled as `planmap profile` does (level none: every dot its own program; each timed in rounds,
the empty-call cost subtracted, the minimum over the rounds). The cost model's curve,
``t(F) = (F + h) / R`` for a dot of F FLOPs, is fitted by least squares (R: the sustained rate,
peak x efficiency; h: the FLOPs at which a kernel runs at half of R), and the table shows measured
vs fitted efficiency per size.

What the CPU calibration can say: the shape of the curve on this CPU (XLA:CPU's dot library, its
threading and cache effects) and that a batch of 1 per replica does not run at the rate of a batch
of 8. What it cannot say: anything about a GPU's h, which comes from occupancy (too few thread
blocks to fill the SMs) and tensor-core tile quantisation, tens to hundreds of MFLOPs on an H100
versus this CPU's value; run the same script on the GPU machine to calibrate a GPU device type.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _stamp import header, write_results  # noqa: E402

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def measure(k: int, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, seconds) per dot size."""
    import jax
    import jax.numpy as jnp

    from planmap.export import jax as export_jax
    from planmap.frontend import load_model
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.profile import time_nodes

    def dots(w, *xs):
        return tuple(x @ w for x in xs)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dots.mlir"
        export_jax(dots, jax.ShapeDtypeStruct((k, k), jnp.float32),
                   *[jax.ShapeDtypeStruct((m, k), jnp.float32) for m in SIZES], path=path)
        graph = load_model(path)
        seconds = time_nodes(Artifact.from_file(path), graph, repeats=repeats, stat="min").seconds
    is_dot = np.array([kind == "stablehlo.dot_general" for kind in graph.kind])
    return graph.flops[is_dot], seconds[is_dot]


def fit(flops: np.ndarray, secs: np.ndarray) -> tuple[float, float]:
    """(R, h) of t = (F + h) / R by least squares, weighted to relative error."""
    w = 1.0 / secs
    a = np.stack([flops * w, w], 1)
    (inv_r, h_over_r), *_ = np.linalg.lstsq(a, np.ones_like(secs), rcond=None)
    return 1.0 / inv_r, max(h_over_r / inv_r, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    print(header() + "\n", flush=True)
    flops, secs = measure(opts.k, opts.repeats)
    rate, h = fit(flops, secs)
    lines = [f"K = N = {opts.k}, f32; fitted sustained rate R = {rate / 1e9:.1f} GFLOP/s, "
             f"halfEfficiencyFlops h = {h:.3g}", "",
             "| batch m | MFLOP | measured us | measured rate / R | model F / (F + h) |", "|---|---|---|---|---|"]
    for m, f, t in zip(SIZES, flops, secs, strict=True):
        lines.append(f"| {m} | {f / 1e6:.1f} | {t * 1e6:.1f} | {f / t / rate:.2f} | {f / (f + h):.2f} |")
    text = "\n".join(lines)
    print(text)
    if opts.out:
        write_results(opts.out, "Small-size efficiency of dot_general on this CPU", text)


if __name__ == "__main__":
    main()

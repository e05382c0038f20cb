#!/usr/bin/env python
"""Predicted vs measured step time on one real CPU device, before and after `planmap profile`.

Usage: python bench/profile.py [--models mlp,gpt,...] [--repeats N] [--out bench/results/profile.md]

For each example artifact (specs/models/*.mlir, inference and training steps) on this machine's CPU
(one JAX device, no fake devices): the whole entry function compiled as one program is the
*measured* step; it is timed in the same rounds as the nodes (each program once per round, N rounds,
the minimum per program: this 2-core machine is shared, and the minimum is the time without
interference); the *roofline* prediction is planmap's cost
model with a generic CPU device type (no calibration), the *profiled* prediction is the sum of the
node times `planmap profile` measured (each node cut out and timed alone, the empty-call cost
subtracted), i.e. what a single-device plan with ``cost.profile`` predicts.

What it can and cannot say: the profiled prediction misses what the whole program gains from fusing
across node boundaries and loses to cache misses between nodes; on CPU both are small against the
node times. It says nothing about a GPU (there, launch overhead and small-kernel efficiency dominate
small nodes; run the same script on the GPU machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _stamp import header, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("mlp", "mlp_train", "cnn", "cnn_train", "gpt", "gpt_train")
CPU = {"deviceTypes": [{"name": "host-cpu", "kind": "cpu", "memory": "64GiB", "memoryBandwidth": "20GB/s",
                        "peakFlops": [{"dtype": "f32", "rate": "100GFLOP/s"}], "efficiency": 0.5,
                        "opOverhead": "5us"}],
       "hosts": [{"name": "h", "devices": [{"name": "cpu", "type": "host-cpu", "count": 1}]}]}


def run(model: str, repeats: int) -> dict:
    import jax

    from planmap.cluster import Topology
    from planmap.cost import CostModel
    from planmap.frontend import coarsen, load_model
    from planmap.kernels import kernel_counts
    from planmap.profile import Profile, apply_profile, file_sha256, spread_over_ops
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.profile import _empty_program, device_kind, node_programs, time_rounds, whole_program
    from planmap.spec.models import ClusterBody

    path = ROOT / "specs" / "models" / f"{model}.mlir"
    topo = Topology.from_spec(ClusterBody.model_validate(CPU))
    original = load_model(path)
    coarse = coarsen(original, "fuse")
    roofline = CostModel.build(coarse, topo, kernels=kernel_counts(coarse, original)).compute[:, 0].sum()
    art = Artifact.from_file(path)
    dev = jax.local_devices()[0]
    progs = node_programs(art, coarse, dev)
    live = [i for i, p in enumerate(progs) if p is not None]
    times = time_rounds([whole_program(art, dev), _empty_program(dev), *(progs[i] for i in live)], 2, repeats)
    best = times.min(axis=0)  # per program, the round without interference
    seconds = np.zeros(coarse.num_nodes)
    seconds[live] = np.maximum(best[2:] - best[1], 0.0)
    weights = CostModel.build(original, topo).compute[:, 0]
    prof = Profile(file_sha256(path), device_kind(dev), str(dev.device_kind),
                   spread_over_ops(seconds, coarse, weights), float(best[1]), 2, repeats, "fuse")
    profiled = CostModel.build(apply_profile(coarse, original, prof, file_sha256(path)), topo).compute[:, 0].sum()
    # one step pays one call of the whole program: the empty-call cost the nodes had subtracted
    return {"model": model, "nodes": coarse.num_nodes, "measured": float(best[0]), "roofline": roofline,
            "profiled": profiled + float(best[1]), "overhead": float(best[1])}


def table(rows: list[dict]) -> str:
    lines = ["| model | nodes | measured ms | roofline ms | roofline / measured | profiled ms | profiled / measured |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['nodes']} | {r['measured'] * 1e3:.3f} | {r['roofline'] * 1e3:.3f} | "
                     f"{r['roofline'] / r['measured']:.2f} | {r['profiled'] * 1e3:.3f} | "
                     f"{r['profiled'] / r['measured']:.2f} |")
    worst = max(abs(r["profiled"] / r["measured"] - 1) for r in rows)
    lines += ["", f"worst |profiled / measured - 1| = {worst:.2f} over {len(rows)} artifacts; "
              f"empty-call cost {np.median([r['overhead'] for r in rows]) * 1e6:.1f} us (median)"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    print(header() + "\n", flush=True)
    rows = []
    for m in opts.models.split(","):
        rows.append(run(m, opts.repeats))
        r = rows[-1]
        print(f"{m}: measured {r['measured'] * 1e3:.3f} ms, profiled {r['profiled'] * 1e3:.3f} ms", flush=True)
    text = table(rows)
    print(text)
    if opts.out:
        write_results(opts.out, "Predicted vs measured step time on one CPU device", text)


if __name__ == "__main__":
    main()

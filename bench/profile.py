#!/usr/bin/env python
"""Predicted vs measured step time on one real CPU device, before and after `planmap profile`.

Usage: python bench/profile.py [--platform cpu|gpu] [--models mlp,gpt,...] [--repeats N] [--runs R]
                               [--out bench/results/profile.md]

For each example artifact (specs/models/*.mlir, inference and training steps) on this machine's CPU
(one JAX device, no fake devices), every program is compiled once and then, R times over, N rounds
alternate between

* a *profile* round: what `planmap profile` times, in its order: an empty call, the whole entry
  function as one program (twice per round), and every fused node cut out as a runtime segment;
* a *measure* round: the step (the whole entry function as one program, the measurement, twice per
  round as the profile times it) and, as a check that the calibration carries over to stages, the
  two halves of the topological order compiled as the two stages of a 2-stage split.

Per program the minimum over the rounds is kept (`planmap profile --stat min`): the 2-core machine
is shared, and the minimum is the time without interference. Profile and measure rounds alternate
because a burst of load on this machine lasts seconds and would otherwise fall on one of them only.

Predictions: *roofline* is planmap's cost model with a generic CPU device type (no calibration);
*alone* is the sum of the node times, each timed alone; *profiled* is what a plan with
``cost.profile`` predicts: the node times scaled by the profile's context factor (the whole program's
time over the sum of its nodes', :mod:`planmap.profile`) plus one empty call per program. For the
whole step the context factor is measured on that very program (in other rounds), so its ratio says
how repeatable the profile is; the halves are not timed by the profile, so their ratios say how well
one factor per artifact predicts a stage that holds part of the program. A last pass takes the CPU
time of all threads instead of wall time (whole program over the sum of its nodes): the work, without
the waits for a core that a loaded machine adds to a multi-threaded program. The table reports, per
model, medians over the R runs and the spread (min-max) of the profiled/measured ratio.

``--platform gpu`` runs the same measurement on the first GPU that JAX sees (the roofline then uses a
generic H100/H200-class device type, and the CPU-time column is the host's, which says little there);
``tools/gpu_check.sh`` is the prepared script that carries planmap's missing dependencies to a GPU
machine and runs it (the issue's "within 10 % on a GPU" check).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from _stamp import header, write_results

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("mlp", "mlp_train", "cnn", "cnn_train", "gpt", "gpt_train")
CPU = {"deviceTypes": [{"name": "host-cpu", "kind": "cpu", "memory": "64GiB", "memoryBandwidth": "20GB/s",
                        "peakFlops": [{"dtype": "f32", "rate": "100GFLOP/s"}], "efficiency": 0.5,
                        "opOverhead": "5us"}],
       "hosts": [{"name": "h", "devices": [{"name": "cpu", "type": "host-cpu", "count": 1}]}]}
GPU = {"deviceTypes": [{"name": "gpu", "kind": "gpu", "memory": "80GiB", "memoryBandwidth": "3.35TB/s",
                        "peakFlops": [{"dtype": "f32", "rate": "67TFLOP/s"}], "efficiency": 0.5,
                        "opOverhead": "5us"}],
       "hosts": [{"name": "h", "devices": [{"name": "gpu0", "type": "gpu", "count": 1}]}]}
CLUSTERS = {"cpu": CPU, "gpu": GPU}


def _halves(coarse, seconds: np.ndarray) -> list[np.ndarray]:
    """Node ids of the two stages of a 2-stage split of the topological order, balanced by node time."""
    cut = int(np.searchsorted(np.cumsum(seconds), seconds.sum() / 2)) + 1
    cut = min(max(cut, 1), coarse.num_nodes - 1)
    return [np.arange(cut), np.arange(cut, coarse.num_nodes)]


def run(model: str, repeats: int, runs: int, platform: str = "cpu") -> dict:
    import jax

    from planmap.cluster import Topology
    from planmap.cost import CostModel
    from planmap.frontend import coarsen, load_model
    from planmap.kernels import kernel_counts
    from planmap.profile import Profile, apply_profile, file_sha256, spread_over_ops
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.profile import compile_programs, device_kind, ops_program, time_programs, time_rounds
    from planmap.spec.models import ClusterBody

    path = ROOT / "specs" / "models" / f"{model}.mlir"
    sha = file_sha256(path)
    topo = Topology.from_spec(ClusterBody.model_validate(CLUSTERS[platform]))
    original = load_model(path)
    coarse = coarsen(original, "fuse")
    roofline = CostModel.build(coarse, topo, kernels=kernel_counts(coarse, original)).compute[:, 0].sum()
    weights = CostModel.build(original, topo).compute[:, 0]
    art = Artifact.from_file(path)
    dev = jax.local_devices()[0]
    progs = compile_programs(art, coarse, dev, whole=True)
    halves = _halves(coarse, time_programs(progs, 2, 1, "min").seconds)
    half_progs = [ops_program(art, [int(o) for n in h for o in coarse.members_of(int(n))], dev) for h in halves]
    # the measurement: the step twice per round, as the profile times it, then the two stages
    measure = [progs.empty, progs.entry, half_progs[0], progs.entry, half_progs[1]]
    time_rounds(measure, 1, 0)  # warm-up of the stages' programs; the others were called above
    out: dict[str, list] = {"measured": [], "alone": [], "factor": [], "profiled": [], "halves": [], "cpu": []}
    live = [p for p in progs.nodes if p is not None]
    for _ in range(runs):
        # profile and measurement in alternate rounds: a burst of load lasts seconds and would otherwise
        # fall on one of them only; per program the minimum over the rounds (planmap profile --stat min)
        rounds = [(time_programs(progs, 0, 1, "min"), time_rounds(measure, 0, 1)[0]) for _ in range(repeats)]
        seconds = np.min([p.seconds for p, _ in rounds], axis=0)
        overhead = min(p.overhead for p, _ in rounds)
        program = min(float(p.program or 0.0) for p, _ in rounds)
        t = np.array([m for _, m in rounds])
        m = [t[:, [1, 3]].min(), t[:, 2].min(), t[:, 4].min()]
        prof = Profile(sha, device_kind(dev), str(dev.device_kind), spread_over_ops(seconds, coarse, weights),
                       overhead, 1, repeats, "fuse", program)
        node_pred = CostModel.build(apply_profile(coarse, original, prof, sha), topo).compute[:, 0]
        out["measured"].append(m[0])
        out["alone"].append(seconds.sum() + overhead)
        out["factor"].append(prof.context_factor)
        out["profiled"].append(node_pred.sum() + overhead)
        out["halves"].append([(node_pred[h].sum() + overhead) / m[1 + k] for k, h in enumerate(halves)])
        # CPU time of all threads: the work of the whole program vs its nodes', without the waits for a core
        c = time_rounds([progs.empty, progs.entry, *live], 1, repeats, clock=time.process_time).min(axis=0)
        out["cpu"].append(c[1] / max(float(np.maximum(c[2:] - c[0], 0.0).sum()), 1e-9))
    ratios = np.array(out["profiled"]) / np.array(out["measured"])
    halves_r = np.array(out["halves"])
    return {"model": model, "nodes": coarse.num_nodes, "roofline": roofline,
            "measured": float(np.median(out["measured"])), "alone": float(np.median(out["alone"])),
            "factor": float(np.median(out["factor"])), "profiled": float(np.median(out["profiled"])),
            "ratio": float(np.median(ratios)), "spread": (float(ratios.min()), float(ratios.max())),
            "halves": np.median(halves_r, axis=0).tolist(), "cut": int(len(halves[0])),
            "cpu": float(np.median(out["cpu"])),
            "measured_spread": (float(np.min(out["measured"])), float(np.max(out["measured"])))}


def table(rows: list[dict], repeats: int, runs: int) -> str:
    lines = ["| model | nodes | measured ms | roofline / measured | alone / measured | context factor | "
             "profiled ms | profiled / measured (spread) | 2 stages: profiled / measured | CPU time: whole / nodes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["spread"]
        a, b = r["halves"]
        lines.append(f"| {r['model']} | {r['nodes']} | {r['measured'] * 1e3:.3f} | "
                     f"{r['roofline'] / r['measured']:.2f} | {r['alone'] / r['measured']:.2f} | {r['factor']:.2f} | "
                     f"{r['profiled'] * 1e3:.3f} | "
                     f"{r['ratio']:.2f} ({lo:.2f}-{hi:.2f}) | {a:.2f}, {b:.2f} (cut after node {r['cut']}) | "
                     f"{r['cpu']:.2f} |")
    worst = max(abs(r["ratio"] - 1) for r in rows)
    worst_half = max(abs(x - 1) for r in rows for x in r["halves"])
    lines += ["", f"worst |profiled / measured - 1| = {worst:.2f} (step), {worst_half:.2f} (stages of the 2-stage "
              f"split) over {len(rows)} artifacts; medians of {runs} runs of {repeats} rounds each"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=sorted(CLUSTERS), default="cpu",
                        help="the JAX platform to measure on (its first device)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", {"gpu": "cuda"}.get(opts.platform, "cpu"))  # before JAX's import
    print(header() + "\n", flush=True)
    rows = []
    for m in opts.models.split(","):
        rows.append(run(m, opts.repeats, opts.runs, opts.platform))
        r = rows[-1]
        print(f"{m}: measured {r['measured'] * 1e3:.3f} ms (runs {r['measured_spread'][0] * 1e3:.3f}-"
              f"{r['measured_spread'][1] * 1e3:.3f}), alone {r['alone'] * 1e3:.3f}, profiled "
              f"{r['profiled'] * 1e3:.3f} ms, halves {r['halves']}", flush=True)
    text = table(rows, opts.repeats, opts.runs)
    print(text)
    if opts.out:
        write_results(opts.out, f"Predicted vs measured step time on one {opts.platform.upper()} device", text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Runtime benchmark: compile time and step time of plans for the example models on 8 fake CPU devices.

Usage: python bench/runtime.py [--steps N] [--models mlp,gpt,cnn] [--no-solve]

For each example artifact (inference and training step) it applies hand-written plans of every kind
the runtime supports — one device, data parallel over 8, Megatron tensor parallel 2 x 4 (MLP, GPT),
a pipeline (4 stages x 2 devices with GPipe for inference, 2 stages x 4 devices with 1F1B for
training), each with 4 microbatches where pipelined — and, unless --no-solve, the plans
``planmap solve`` writes for the example specs that fit on 8 devices. It prints compile time (all
segments, once), step time (median of N, after a warm-up step) and the largest relative error
against the unsharded artifact on one device.

The 8 devices are fake CPU devices sharing this machine's cores: the numbers compare plans with
each other on this machine, they do not predict accelerator speed (the plans' predicted step times
are for the spec's cluster). Run with ``nice -n 10`` on a shared machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from _stamp import header  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "specs" / "models"
SOLVED_SPECS = ("mlp-latency-cpu4acc", "gpt-8dev", "gpt-train-8dev", "cnn-tpu")  # <= 8 devices


def _megatron(names: list[str]) -> dict[int, list]:
    specs = {}
    for i, name in enumerate(names):
        if name.endswith(("['wqkv']", "['w1']")) or name == "params['layer0']['w']":
            specs[i] = [None, "model"]
        elif name.endswith("['b1']") or name == "params['layer0']['b']":
            specs[i] = ["model"]
        elif name.endswith(("['wo']", "['w2']")) or name == "params['layer1']['w']":
            specs[i] = ["model", None]
    return specs


def hand_plans(model: str, train: bool, out: Path) -> list[tuple[str, Path]]:
    from planmap.plan.manual import device_names, stage, write_plan
    from planmap.runtime.artifact import Artifact

    artifact = MODELS / f"{model}{'_train' if train else ''}.mlir"
    art = Artifact.from_file(artifact)
    n = art.n_ops
    data = [i for i, name in enumerate(art.arg_names) if not name.startswith("params")]
    mode = "training" if train else "inference"
    d8 = device_names(8)
    tag = f"{model}{'_train' if train else ''}"
    plans = [
        ("1 device", write_plan(out / f"{tag}-single.plan.yaml", artifact, [stage(d8[:1], [(0, n)])],
                                data_args=data, mode=mode)),
        ("data parallel x8", write_plan(out / f"{tag}-dp.plan.yaml", artifact, [stage(d8, [(0, n)])],
                                        data_args=data, mesh={"data": 8}, mode=mode,
                                        args={i: ["data"] for i in data})),
    ]
    if model in ("mlp", "gpt"):
        plans.append(("Megatron 2x4", write_plan(
            out / f"{tag}-tp.plan.yaml", artifact, [stage(d8, [(0, n)])], data_args=data, mode=mode,
            mesh={"data": 2, "model": 4}, args={**_megatron(art.arg_names), **{i: ["data"] for i in data}})))
    k = 2 if train else 4
    cuts = [round(j * n / k) for j in range(k + 1)]
    stages = [stage(d8[j * 8 // k:(j + 1) * 8 // k], [(cuts[j], cuts[j + 1])]) for j in range(k)]
    kind = "1f1b" if train else "gpipe"
    plans.append((f"pipeline {k}x{8 // k} {kind} x4", write_plan(
        out / f"{tag}-pp.plan.yaml", artifact, stages, data_args=data, mode=mode, schedule=kind, microbatches=4)))
    return plans


def solved_plans(out: Path) -> list[tuple[str, str, Path]]:
    from planmap.cli import main

    plans = []
    for spec in SOLVED_SPECS:
        path = out / f"{spec}.plan.yaml"
        try:
            ok = main(["solve", str(ROOT / "specs" / f"{spec}.yaml"), "-o", str(path), "-q"]) == 0
        except Exception as e:  # a solver or front-end bug must not hide the runtime numbers
            ok, why = False, f"{type(e).__name__}: {e}"
        else:
            why = "see the message above"
        if ok:
            plans.append((spec, f"solved: {spec}", path))
        else:
            print(f"(solving {spec} failed: {why}; skipped)")
    return plans


def measure(path: Path, steps: int) -> dict:
    import jax

    import planmap.runtime as rt
    from planmap.runtime.inputs import random_inputs
    from planmap.runtime.verify import compare, reference_outputs

    t0 = time.perf_counter()
    exe = rt.load(path, unchecked=True)
    compile_s = time.perf_counter() - t0
    args = random_inputs(exe, seed=0)
    outs = exe(*args)
    jax.block_until_ready(outs)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        jax.block_until_ready(exe(*args))
        times.append(time.perf_counter() - t)
    errors = compare(exe, outs, reference_outputs(exe, args))
    return {"stages": len(exe.plan.stages), "segments": len(exe.segments),
            "devices": len({d for s in exe.segments for d in s.device_ids}), "compile": compile_s,
            "step_ms": statistics.median(times) * 1e3, "err": max(e.rel for e in errors),
            "ok": all(e.ok for e in errors), "predicted_ms": exe.plan.predicted.step_time_ns / 1e6,
            "microbatches": exe.microbatches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per plan (median)")
    parser.add_argument("--models", default="mlp,gpt,cnn", help="comma-separated example models")
    parser.add_argument("--no-solve", action="store_true", help="skip the solved example specs")
    opts = parser.parse_args()
    print(header() + "\n", flush=True)

    import jax
    from rich.console import Console
    from rich.table import Table

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        jobs = [(f"{m}{'_train' if t else ''}", label, p)
                for m in opts.models.split(",") for t in (False, True) for label, p in hand_plans(m, t, out)]
        if not opts.no_solve:
            jobs += solved_plans(out)
        for model, label, path in jobs:
            r = measure(path, opts.steps)
            rows.append((model, label, r))
            print(f"{model:10s} {label:26s} compile {r['compile']:6.2f}s  step {r['step_ms']:9.2f}ms", flush=True)
    table = Table(title=f"planmap runtime on {len(jax.devices())} fake {jax.devices()[0].platform} devices "
                        f"(step time: median of {opts.steps})")
    for col in ("model", "plan", "stages", "segments", "devices", "microbatches", "compile s", "step ms",
                "max rel err", "ok"):
        table.add_column(col, justify="left" if col in ("model", "plan") else "right")
    for model, label, r in rows:
        table.add_row(model, label, str(r["stages"]), str(r["segments"]), str(r["devices"]), str(r["microbatches"]),
                      f"{r['compile']:.2f}", f"{r['step_ms']:.2f}", f"{r['err']:.1e}", "yes" if r["ok"] else "NO")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()

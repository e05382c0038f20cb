#!/usr/bin/env python
"""Predicted memory vs XLA: per example spec and per stage of its golden plan, planmap's per-device
memory terms against ``compiled.memory_analysis()`` of the programs the runtime compiles for it.

Usage: python bench/memory.py [--specs gpt-8dev,...] [--out bench/results/memory.md] [--cpu-scheduler memory]

What is compared. XLA sees one stage program per segment (a training stage has a forward and a
backward segment), for one microbatch, with the weights as arguments; the optimizer state and the
activations of other in-flight microbatches live outside it. So the table compares the *program*
footprint, for one microbatch on one device of the stage:

- live: :func:`planmap.program_memory.plan_program_bytes`, per compiled program of the stage on the
  op-level graph: the parameters it reads, the data and crossing values it receives, the values it
  sends (and results), and the temporaries of the values XLA materialises (fusion, its buffer
  assigner, layout copies), per device under the stage's layout;
- linear: what the evaluator and the solvers add up for the same microbatch (weights, plus gradients
  in training, node state, the stash of one microbatch, the largest single-node working set);
- XLA: the largest ``argument + output + temp - alias`` over the stage's segments (segments of one
  stage run one after another), and the generated code size alongside (zero on CPU).

The per-device totals the plans record add the same terms on both sides (optimizer state:
``(factor - 2) x parameters``; other in-flight microbatches: ``stash x (in_flight - 1)``), so the
ratio of the program footprints is what the model gets right or wrong. On a GPU, XLA's temp also
holds cuBLAS/cuDNN workspaces and its allocator rounds buffers, so the GPU ratio reads a few percent
higher; the CPU compiler's buffer assignment is otherwise the same algorithm (heap simulation).

``--cpu-scheduler`` compiles every program with another XLA:CPU scheduler (``xla_cpu_scheduler_type``;
the default picks the concurrency-optimised breadth-first schedule whenever it fits, which is what
the runtime runs and what the model follows): ``memory`` is the memory-minimising one
(``bench/results/memory-cpu-scheduler.md``).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=16")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _stamp import header, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_SCHEDULERS = {"default": "CPU_SCHEDULER_TYPE_DEFAULT", "memory": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
               "concurrency": "CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED"}
SPECS = ("mlp-latency-cpu4acc", "gpt-8dev", "gpt-train-8dev", "cnn-tpu", "gpt-train-2host", "cnn-train-mixed")


def predicted_program(problem, solution, k: int, live: dict[str, float]) -> dict[str, float]:
    """Both predictions for one microbatch of stage ``k`` on one of its devices: ``linear`` (the
    evaluator's terms: weights (and gradients in training) + state + stash + largest working set) and
    ``live`` (:func:`planmap.program_memory.plan_program_bytes`: params + inputs + outputs + temp)."""
    from planmap.vocabulary import Mode

    g, cost = problem.graph, problem.cost
    group_of = np.asarray(solution.assignment, np.int64)
    mine = group_of == k
    grads = live["params"] if problem.mode is Mode.TRAINING else 0.0
    linear = (live["params"] + grads + float(g.state_bytes[mine].sum()) + float(cost.stash_bytes[mine].sum())
              + float(cost.working_set[mine].max(initial=0)))
    return {**live, "linear": linear, "live": sum(live.values())}


def measured_program(exe, k: int) -> dict[str, float]:
    """XLA's largest program footprint over the segments of stage ``k`` (per device)."""
    best: dict[str, float] = {"total": 0.0}
    for seg in exe.segments:
        if seg.stage != k:
            continue
        m = seg.fn.memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
        if total > best["total"]:
            best = {"total": float(total), "args": m.argument_size_in_bytes, "out": m.output_size_in_bytes,
                    "temp": m.temp_size_in_bytes, "code": m.generated_code_size_in_bytes}
    return best


def per_device(problem, solution) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(linear, recorded, capacity) bytes per used device: the solvers' linear terms (``evaluate``) and what the
    plan records (:func:`planmap.peak_memory.peak_memory`, the program model with optimizer state, node state and
    the other in-flight microbatches' stash)."""
    from planmap.evaluate import evaluate
    from planmap.peak_memory import peak_memory

    ev = evaluate(problem, solution)
    recorded = peak_memory(problem, solution, ev).memory
    used = ev.memory > 0
    return ev.memory[used], recorded[used], np.asarray(problem.capacity)[used]


def compare(name: str) -> tuple[list[dict], str]:
    import planmap.runtime as rt
    from planmap.assemble import build_problem
    from planmap.plan import files
    from planmap.plan.build import to_solution
    from planmap.program_memory import plan_program_bytes
    from planmap.spec import load_spec

    plan = ROOT / "plans" / f"{name}.plan.yaml"
    problem = build_problem(load_spec(ROOT / "specs" / f"{name}.yaml"))
    solution = to_solution(problem, files.load(plan).document)
    exe = rt.load(plan, unchecked=True)
    lives = plan_program_bytes(problem, solution)
    linear, recorded, capacity = per_device(problem, solution)
    ratio = recorded / linear
    device_line = (f"- {name}: {len(recorded)} devices, recorded / linear min {ratio.min():.3f}, median "
                   f"{np.median(ratio):.3f}, max {ratio.max():.3f}; equal on {int(np.isclose(ratio, 1).sum())}; "
                   f"over capacity {int((recorded > capacity).sum())} (linear: {int((linear > capacity).sum())})")
    rows = []
    for k, (st, live) in enumerate(zip(solution.stages, lives, strict=True)):
        pred = predicted_program(problem, solution, k, live)
        xla = measured_program(exe, k)
        rows.append({"spec": name, "stage": k, "devices": len(st.devices), **{f"p_{a}": b for a, b in pred.items()},
                     **{f"x_{a}": b for a, b in xla.items()},
                     "r_linear": pred["linear"] / xla["total"], "r_live": pred["live"] / xla["total"]})
    return rows, device_line


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f}"


def table(rows: list[dict]) -> str:
    cols = ("spec", "stage", "dev", "params", "inputs", "outputs", "temp", "live MiB", "linear MiB",
            "XLA args", "XLA out", "XLA temp", "XLA MiB", "live / XLA", "linear / XLA")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [r["spec"], str(r["stage"]), str(r["devices"])]
        cells += [_mib(r[f"p_{c}"]) for c in ("params", "inputs", "outputs", "temp", "live", "linear")]
        cells += [_mib(r[f"x_{c}"]) for c in ("args", "out", "temp", "total")]
        cells += [f"{r['r_live']:.3f}", f"{r['r_linear']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for key, what in (("r_live", "liveness model"), ("r_linear", "linear (solver) terms")):
        ratios = np.array([r[key] for r in rows])
        lines.append(f"- {what}: {len(rows)} stages, predicted / XLA median {np.median(ratios):.3f}, "
                     f"min {ratios.min():.3f}, max {ratios.max():.3f}, "
                     f"worst |ratio - 1| {np.abs(ratios - 1).max():.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default=",".join(SPECS))
    parser.add_argument("--out", default=None, help="write the markdown table here (e.g. bench/results/memory.md)")
    parser.add_argument("--cpu-scheduler", choices=sorted(_SCHEDULERS), default="default",
                        help="XLA:CPU scheduler every program is compiled with (process-wide, for this bench)")
    opts = parser.parse_args()
    if opts.cpu_scheduler != "default":  # read when the CPU client starts, which is after this
        os.environ["XLA_FLAGS"] += f" --xla_cpu_scheduler_type={_SCHEDULERS[opts.cpu_scheduler]}"
    print(header() + "\n", flush=True)
    rows, devices = [], []
    for name in opts.specs.split(","):
        part, line = compare(name)
        rows += part
        devices.append(line)
        print(f"{name}: done", flush=True)
    text = (f"XLA:CPU scheduler: {opts.cpu_scheduler}\n\n" + table(rows)
            + "\n\nPer device, the plan's recorded memory (`planmap/peak_memory.py`: the program footprint plus "
            "optimizer state beyond parameters and gradients, node state and the stash of the other in-flight "
            "microbatches) against the solvers' linear terms (`evaluate`):\n\n" + "\n".join(devices))
    print(text)
    if opts.out:
        write_results(opts.out, "Predicted vs XLA memory per stage program", text)


if __name__ == "__main__":
    main()

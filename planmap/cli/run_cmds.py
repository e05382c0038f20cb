"""``planmap run``: apply a plan to its artifact on this machine's devices, time it, optionally verify it.

JAX fixes its device count when it starts, so this command sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (8 fake CPU devices) when ``XLA_FLAGS`` is
not set and JAX is not imported yet (export ``XLA_FLAGS`` yourself for another count). On a GPU
machine the flag is harmless: ``jax.devices()`` lists the GPUs, which the plan then runs on.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import typer

from planmap.errors import PlanmapError

DEFAULT_FAKE_DEVICES = 8
MAX_ROWS = 12  # outputs listed by --verify (the worst ones); a training step has one per parameter


def _ensure_fake_devices() -> None:
    if "XLA_FLAGS" not in os.environ and "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEFAULT_FAKE_DEVICES}"


def run(
    plan: Path = typer.Argument(..., help="Plan file (its model input is the artifact to run).", show_default=False),
    steps: int = typer.Option(5, "--steps", "-n", min=1, help="Timed steps; times are medians over them."),
    verify: bool = typer.Option(False, "--verify", help="Compare with an unsharded single-device run of the "
                                "artifact; exit 1 if an output is beyond tolerance."),
    inputs: Path | None = typer.Option(None, "--inputs", help=".npz with one array per argument (by name or argN); "
                                       "default: seeded random inputs of the artifact's shapes."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    unchecked: bool = typer.Option(False, "--unchecked", help="Skip `planmap check` (experiments with hand-written "
                                   "plans only; a stale input is still refused). Prints a warning."),
) -> None:
    """Run PLAN on this machine's JAX devices: per-stage and per-step time, and with --verify the max error.

    The plan must pass `planmap check` (the same check runs here); --unchecked skips it, loudly."""
    _ensure_fake_devices()
    from rich.console import Console
    from rich.table import Table

    import planmap.runtime as rt
    from planmap.runtime.inputs import load_inputs, random_inputs
    from planmap.runtime.verify import compare, input_independent_outputs, nonfinite_outputs, reference_outputs

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
    if unchecked:
        Console(stderr=True, highlight=False).print(f"[bold red]{rt.UNCHECKED_WARNING}[/]")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warning is printed above, once
        exe = rt.load(plan, unchecked=unchecked)
    args = load_inputs(exe, inputs) if inputs is not None else random_inputs(exe, seed)
    outs = exe(*args)  # warm-up (first-call overheads)
    _block(outs)
    step_times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        _block(exe(*args))
        step_times.append(time.perf_counter() - t0)
    exe.profile = True
    for _ in range(steps):
        _block(exe(*args))
    exe.profile = False
    stage_times = exe.stage_times()

    doc = exe.plan
    table = Table(title=f"{doc.name}: {doc.objective.kind} plan, {doc.mode}, schedule {doc.schedule.kind} "
                        f"x {doc.schedule.microbatches} microbatches")
    for col in ("stage", "devices", "mesh", "segments", "ops", "compile s", "busy ms/step", "predicted ms/step"):
        table.add_column(col, justify="right" if col not in ("devices", "mesh") else "left")
    segs = exe.stage_segments()
    # predicted busy time on the plan's cluster: per step (latency) or per microbatch (pipelines)
    per_step = 1 if str(doc.objective.kind) == "latency" else doc.schedule.microbatches
    load = {d.device: d.load_ns * per_step for d in doc.predicted.devices}
    for st in doc.stages:
        mine = segs[st.id]
        mesh = " x ".join(f"{n}={s}" for n, s in mine[0].mesh.axes) if mine else "-"
        table.add_row(str(st.id), _devices(st.devices), mesh, str(len(mine)),
                      str(sum(b - a for a, b in st.ops)), f"{sum(s.compile_seconds for s in mine):.2f}",
                      f"{stage_times[st.id] * 1e3:.2f}",
                      f"{load[st.devices[0]] / 1e6:.3f}" if st.devices[0] in load else "-")
    console.print(table)
    console.print(f"step time (median of {steps}): {statistics.median(step_times) * 1e3:.2f} ms; "
                  f"compile {exe.compile_seconds:.2f} s; {len(exe.segments)} segment(s) on "
                  f"{len({d for s in exe.segments for d in s.device_ids})} device(s)")
    if doc.predicted.step_time_ns:
        console.print(f"predicted step time: {doc.predicted.step_time_ns / 1e6:.3f} ms")
    if not verify:
        return
    references = reference_outputs(exe, args)
    nonfinite = nonfinite_outputs(exe, references)
    if nonfinite:
        raise PlanmapError(f"cannot verify: the single-device reference itself is not finite (NaN or Inf in "
                           f"{', '.join(map(_short_name, nonfinite[:3]))}) on these inputs, so there is nothing to "
                           "compare with; pass --inputs FILE.npz with values the model accepts")
    for name in input_independent_outputs(exe, references):
        console.print(f"[yellow]warning:[/] output {_short_name(name)} is the same for every sample: it does not "
                      "depend on the inputs here (saturated or dead activations?), so comparing it checks little; "
                      "try --inputs with real data")
    errors = compare(exe, outs, references)
    vt = Table(title="verify: against the unsharded artifact on one device")
    for col in ("output", "rule", "max |err|", "relative", "rtol/atol", "ok"):
        vt.add_column(col, no_wrap=True)
    shown = sorted(errors, key=lambda e: (e.ok, -e.rel))[:MAX_ROWS]
    for e in sorted(shown, key=errors.index):
        vt.add_row(_short_name(e.name), e.rule, f"{e.max_abs:.3g}", f"{e.rel:.3g}", f"{e.rtol:g}/{e.atol:g}",
                   "[green]yes[/]" if e.ok else "[red]NO[/]")
    if len(errors) > len(shown):
        vt.caption = f"the {len(shown)} worst of {len(errors)} outputs"
    console.print(vt)
    worst = max(errors, key=lambda e: e.rel)
    console.print(f"max error: {max(e.max_abs for e in errors):.3g} (worst relative {worst.rel:.3g} in {worst.name})")
    bad = [e.name for e in errors if not e.ok]
    if bad:
        raise PlanmapError(f"verification failed: {len(bad)} output(s) beyond tolerance ({', '.join(bad[:3])})")


def _block(outs) -> None:
    import jax

    jax.block_until_ready(outs)


def _short_name(name: str, width: int = 30) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]


def _devices(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} .. {names[-1]} ({len(names)})"


def register(app: typer.Typer) -> None:
    app.command()(run)

"""``planmap profile``: time every fused node of a model on a local device and write a profile file
that a spec names under ``cost.profile`` (see :mod:`planmap.profile`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from rich.console import Console

from planmap.errors import PlanmapError

err = Console(stderr=True, highlight=False, soft_wrap=True)


def profile(
    model: Path = typer.Argument(..., help="Model artifact (StableHLO text or bytecode) to time.", show_default=False),
    output: Path = typer.Option(..., "--output", "-o", help="Profile file to write (JSON).", show_default=False),
    spec: Path = typer.Option(None, "--spec", help="Time the nodes of this spec's coarsened graph (the nodes "
                              "its solve plans on), instead of --level.", show_default=False),
    level: str = typer.Option("fuse", "--level", help="Coarsening whose nodes are timed: none, fuse or layers."),
    device: int = typer.Option(0, "--device", min=0, help="Index of the local JAX device to time on."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Untimed calls per node before timing."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Timed rounds (each node called once per round)."),
    stat: str = typer.Option("median", "--stat", help="median over the rounds, or min (on a shared, loaded "
                             "machine the minimum is the time without interference)."),
    whole: bool = typer.Option(True, "--whole/--no-whole", help="Also time the whole model as one program: "
                               "node times are scaled to what they cost inside it (the context factor)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the profile path."),
) -> None:
    """Measure per-node times of MODEL on a local JAX device (warm-up, repeats, median, minus the cost
    of an empty call) and of the whole model as one program, and write a profile; name it in a spec as
    cost.profile to plan with the node times in context."""
    from planmap import frontend
    from planmap.cost import CostModel
    from planmap.profile import Profile, file_sha256, spread_over_ops, write_profile

    if stat not in ("median", "min"):
        raise PlanmapError(f"--stat requires median or min, but got {stat!r}")
    if spec is not None:
        from planmap.assemble import build_problem
        from planmap.spec import load_spec

        loaded = load_spec(spec)
        if loaded.model_path.resolve() != model.resolve():
            raise PlanmapError(f"--spec {spec} plans {loaded.model_path}, not {model}")
        problem = build_problem(loaded)
        original, coarse, topo = problem.original, problem.graph, problem.topology
        level = str((coarse.meta.get("coarsening") or {}).get("level", "none"))
    else:
        from planmap.workloads.graphs import paper_topology

        original = frontend.load_model(model)
        coarse = frontend.coarsen(original, level)
        topo = paper_topology(1, cpus=0)
    import jax

    from planmap.runtime.artifact import Artifact
    from planmap.runtime.profile import device_kind, time_nodes

    devices = jax.local_devices()
    if device >= len(devices):
        raise PlanmapError(f"--device {device}: only {len(devices)} local device(s)")
    dev = devices[device]

    if not quiet:
        err.print(f"compiling and timing {coarse.num_nodes} nodes on {dev.device_kind} …")
    seconds, overhead, program = time_nodes(Artifact.from_file(model), coarse, device=dev, warmup=warmup,
                                            repeats=repeats, stat=stat, whole=whole)
    roof = CostModel.build(original, topo).compute[:, 0]
    per_op = spread_over_ops(seconds, coarse, np.where(np.isfinite(roof), roof, 0.0))
    prof = Profile(file_sha256(model), device_kind(dev), str(dev.device_kind), per_op, overhead, warmup, repeats,
                   level, program)
    path = write_profile(output, prof)
    if quiet:
        typer.echo(str(path))
        return
    typer.echo(f"{path}: {coarse.num_nodes} nodes of {original.num_nodes} ops on {dev.device_kind} "
               f"({prof.device_kind}), {seconds.sum() * 1e3:.3f} ms in all; empty call {overhead * 1e6:.1f} us "
               "(subtracted)" + ("" if program is None else f"; as one program {program * 1e3:.3f} ms (context "
                                 f"factor {prof.context_factor:.2f})"))


def register(app: typer.Typer) -> None:
    app.command()(profile)

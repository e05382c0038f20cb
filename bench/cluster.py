#!/usr/bin/env python
"""Whole-cluster plans vs the MaxText/Megatron-style grid of (dp, fsdp, tp, pp) × microbatches.

Usage: python bench/cluster.py [--specs gpt-train-8dev hf-bert ...] [--scale] [--layers 48]
                               [--out bench/results/cluster.md]

For each example spec that is throughput, and the third-party exports' specs (HF BERT, GPT-2, its training step
and T5 from PyTorch, Keras ResNet- and MobileNetV2-style CNNs from TensorFlow: tests/fixtures/thirdparty/),
every grid point — (dp, fsdp, tp, pp) with dp·fsdp·tp·pp the device count (devices of one type; hosts: pp and
dp/fsdp across them, tp inside one), microbatches
M ∈ {1, 2, 4, 8} — is built as a plan in the contract's form (pp stages of equal layer-group counts,
each stage a (data, tensor) mesh with data-parallel + FSDP or Megatron layouts per group) and evaluated
with :func:`planmap.evaluate.evaluate`; the table gives planmap's plan (``cluster`` with microbatches in
{1, 2, 4, 8}) against the best grid point, both as step time per microbatch, their ratio (< 1: planmap
better), and how many grid points fit memory. ``--scale`` adds the front end's GPT-2-XL-shaped training
step (48 layers, :mod:`bench.frontend`) on 2 hosts × 8 H100: search time split, stage-DP states,
intra-op solves and cache hits.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from _stamp import header  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("gpt-8dev", "gpt-train-8dev", "gpt-train-2host", "cnn-tpu", "cnn-train-mixed")
THIRDPARTY = ("hf-bert", "hf-gpt2", "hf-gpt2-train", "hf-t5", "keras-resnet", "keras-mobilenet")


def spec_path(name: str) -> Path:
    """An example spec (specs/NAME.yaml) or a third-party export's (tests/fixtures/thirdparty/NAME.yaml)."""
    example = ROOT / "specs" / f"{name}.yaml"
    return example if example.is_file() else ROOT / "tests" / "fixtures" / "thirdparty" / f"{name}.yaml"
MICROBATCHES = (1, 2, 4, 8)


def bench_spec(name: str, time_limit: float) -> dict:
    from dataclasses import replace

    from planmap.assemble import build_problem
    from planmap.evaluate import evaluate
    from planmap.problem import SolveOptions
    from planmap.solvers.cluster.grid import grid_plan, grid_points, hosts_width
    from planmap.solvers.cluster.solver import plan_cluster
    from planmap.solvers.cluster.space import layer_groups
    from planmap.spec import load_spec

    problem = build_problem(load_spec(spec_path(name)))
    t0 = time.perf_counter()
    ans = plan_cluster(problem, SolveOptions(time_limit=time_limit), microbatch_choices=MICROBATCHES)
    t_plan = time.perf_counter() - t0
    ours = ans.evaluation.step_time / ans.solution.microbatches
    groups = layer_groups(problem)
    topo = problem.topology
    best, fits, total = None, 0, 0
    cache: dict = {}
    for point in grid_points(len(topo.accelerators) or topo.num_devices, hosts_width(problem)):
        for m in MICROBATCHES:
            sol = grid_plan(problem, groups, point, m, cache)
            if sol is None:
                continue
            total += 1
            ev = evaluate(replace(problem, microbatches=m), sol)
            if not ev.feasible:
                continue
            fits += 1
            t = ev.step_time / m
            if best is None or t < best[0]:
                best = (t, point, m)
    return dict(spec=name, ours=ours, plan=_describe(ans.solution), t_plan=t_plan, best=best, fits=fits,
                total=total)


def _describe(sol) -> str:
    stages = "+".join(f"{len(s.devices)}" + (f"({'x'.join(str(n) for _, n in s.mesh_axes)})" if s.mesh_axes else "")
                      for s in sol.stages)
    return f"{len(sol.stages)} stage(s) {stages}, M={sol.microbatches}"


def bench_scale(layers: int, batch: int, time_limit: float) -> dict:
    """The GPT-2-XL-shaped training step on 2 hosts × 8 H100, planned end to end."""
    from frontend import GPT2_XL  # noqa: F401 - the fixture's shapes (used by the export below)
    from sharding_scale import export_train_step

    from planmap import frontend
    from planmap.assemble import _coarsen
    from planmap.cluster import Topology
    from planmap.cost import CostModel
    from planmap.kernels import kernel_counts
    from planmap.problem import Problem, SolveOptions
    from planmap.solvers.cluster.solver import plan_cluster
    from planmap.spec.loader import load_cluster

    with tempfile.TemporaryDirectory(prefix="planmap-bench-") as tmp:
        original = frontend.load_model(export_train_step(layers, batch, Path(tmp)))
    topo = Topology.from_spec(load_cluster(ROOT / "specs" / "clusters" / "h100-2x8.yaml").spec)
    t0, c0 = time.perf_counter(), time.process_time()
    coarse = _coarsen(frontend, original, "auto", topo)
    cost = CostModel.build(coarse, topo, mode="training", optimizer="adam", kernels=kernel_counts(coarse, original))
    problem = Problem(name=f"gpt2xl{layers}", graph=coarse, topology=topo, cost=cost, mode="training",
                      schedule="1f1b", microbatches=8, replication=True, batch_size=batch, original=original)
    ans = plan_cluster(problem, SolveOptions(time_limit=time_limit), baselines=("single", "data-parallel", "fsdp",
                                                                                 "dp"))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dict(ops=original.num_nodes, nodes=coarse.num_nodes, wall=wall, cpu=cpu, stats=ans.stats,
                plan=_describe(ans.solution), step=ans.evaluation.step_time / ans.solution.microbatches,
                winner=ans.solution.certificate.message)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="*", default=list(SPECS + THIRDPARTY))
    ap.add_argument("--scale", action="store_true", help="also plan the 48-layer GPT-2-XL-shaped step on 2x8")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    stamp = header()
    print(stamp + "\n", flush=True)
    lines = ["| spec | planmap plan | planmap ms/microbatch | best grid point (dp, fsdp, tp, pp), M "
             "| grid ms/microbatch | ratio | grid points fitting memory | plan s |", "|" + "---|" * 8]
    for name in args.specs:
        r = bench_spec(name, args.time_limit)
        b = r["best"]
        lines.append(f"| {name} | {r['plan']} | {r['ours'] * 1e3:.4g} | "
                     + (f"{b[1]}, M={b[2]} | {b[0] * 1e3:.4g} | {r['ours'] / b[0]:.3f}" if b else "none | | ")
                     + f" | {r['fits']} / {r['total']} | {r['t_plan']:.1f} |")
        print(lines[-1], flush=True)
    scale = []
    if args.scale:
        r = bench_scale(args.layers, args.batch, args.time_limit)
        st = r["stats"]
        title = f"## GPT-2-XL-shaped training step, {args.layers} layers, batch {args.batch}, 2 hosts × 8 H100"
        scale = ["", title, "",
                 f"- {r['ops']} ops, {r['nodes']} coarse nodes, {st['groups']} layer groups ({st['distinct_groups']} "
                 f"distinct)",
                 f"- planned end to end in {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU of this process (coarsening "
                 f"and costs included): stage tables "
                 f"{st['tables_time']:.1f} s, group sharding {st['solve_time']:.1f} s, stage DP {st['dp_time']:.1f} s "
                 f"({st['dp_states']} states, t_max candidates tried/distinct {st['dp_candidates']}), chosen stages "
                 f"{st['stages_time']:.1f} s, evaluate {st['evaluate_time']:.1f} s, baselines "
                 f"{st['baselines_time']:.1f} s, grid {st['grid_time']:.1f} s ({st['grid_points']} points), the "
                 f"certificate's lower bound {st.get('bound_time', 0.0):.1f} s ({st.get('bound_states', 0)} DP states)",
                 f"- intra-op solves {st['solves']}, cache hits {st['cache_hits']}; stage IP on the chosen stages "
                 f"{st.get('stage_ip_solves', 0)} solves, {st.get('stage_ip_hits', 0)} cache hits, "
                 f"{st.get('stage_ip_time', 0.0):.1f} s, {st.get('stage_ip_kept', 0)} layouts kept; DP re-solves "
                 f"{st.get('dp_resolves', 0)} ({st.get('dp_new_plans', 0)} new plans)",
                 f"- plan: {r['plan']}, {r['step'] * 1e3:.4g} ms per microbatch", "", f"Certificate: {r['winner']}"]
        print("\n".join(scale), flush=True)
    if args.out:
        args.out.write_text("# Whole-cluster plans vs the (dp, fsdp, tp, pp) grid\n\n"
                            "Generated by `python bench/cluster.py" + (" --scale" if args.scale else "")
                            + "`. Step time per microbatch (step / M) under `evaluate`; ratio = planmap / best "
                            "grid point (< 1 better).\n\n```\n" + stamp + "\n```\n\n" + "\n".join(lines + scale) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""The sharding IP at scale: a GPT-2-XL-shaped training step with repeated layers tied.

Usage: python bench/sharding_scale.py [--layers 48] [--batch 8] [--time-limit 60]
                                      [--out bench/results/sharding_scale.md]

The model is the front end's scale fixture (:mod:`bench.frontend`: d_model 1600, 25 heads, vocabulary
50257, 1024 tokens) as a value-and-grad training step (Adam state counted), exported from
``jax.ShapeDtypeStruct``s. On the h100-1x8 cluster (mesh 8) and the h100-2x8 cluster (mesh 2×8: hosts
outermost) it builds the sharding tables, reduces them with the layers tied
(:func:`planmap.solvers.sharding.reduce.reduce_tables`, ``tie_layers=True``: optimal over layouts
identical across the repeated layers), solves the IP warm-started from the best SPMD baseline on that
mesh, and prints one row per mesh: IP rows and columns, build and solve seconds, status and gap, the
step time and its ratio to the best baseline (data parallel, FSDP, Megatron; < 1 is better).
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
from frontend import GPT2_XL  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = (("h100-1x8", (8,)), ("h100-2x8", (2, 8)))


def export_train_step(layers: int, batch: int, out: Path) -> Path:
    """The GPT-2-XL-shaped value-and-grad step with ``layers`` layers, as StableHLO text."""
    import functools

    import jax
    import jax.numpy as jnp

    import planmap.export
    from planmap.examples import models as M

    c = GPT2_XL
    params = jax.eval_shape(lambda: M._gpt_init(jax.random.PRNGKey(0), layers=layers, d=c["d"], ff=c["ff"],
                                                  vocab=c["vocab"], seq=c["seq"]))
    tokens = jax.ShapeDtypeStruct((batch, c["seq"]), jnp.int32)
    fwd = functools.partial(M._gpt_forward, heads=c["heads"])

    def loss(params, tokens, targets):
        logp = jax.nn.log_softmax(fwd(params, tokens), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    path = out / f"gpt2xl{layers}_train.mlir"
    planmap.export.jax(jax.value_and_grad(loss), params, tokens, tokens, path=path)
    return path


def run(graph, cluster: str, shape: tuple[int, ...], time_limit: float) -> dict:
    """One row: the tied IP on the mesh ``shape`` of ``cluster`` vs the best baseline."""
    from planmap.cluster import Topology
    from planmap.evaluate import evaluate
    from planmap.problem import Problem, SolveOptions
    from planmap.sharding.solution import layout_of, tables_cache
    from planmap.solvers.sharding.baselines import BASELINES
    from planmap.solvers.sharding.ip import problem_meshes, solve_mesh
    from planmap.solvers.sharding.reduce import reduce_tables
    from planmap.spec.loader import load_cluster

    topo = Topology.from_spec(load_cluster(ROOT / "specs" / "clusters" / f"{cluster}.yaml").spec)
    problem = Problem.from_graph(graph, topo, mode="training")
    mesh = next(m for m in problem_meshes(problem) if m.axis_sizes == shape)
    t0 = time.perf_counter()
    tables = tables_cache(problem).get(mesh)
    t_tables = time.perf_counter() - t0
    base: list[tuple[float, str, dict | None]] = []
    for name, build in BASELINES:
        try:
            sol, ev = build(problem)
        except Exception as e:  # noqa: BLE001 - a baseline that does not apply is a row note, not a failure
            print(f"  {name}: {e}")
            continue
        if not ev.feasible:
            continue
        t, layout = layout_of(problem, sol)
        base.append((ev.objective, name, layout if t.mesh.key == mesh.key else None))
    best_base = min(base, key=lambda b: b[0]) if base else None
    warm = min((b for b in base if b[2] is not None), key=lambda b: b[0], default=None)
    t0 = time.perf_counter()
    red = reduce_tables(tables, tie_layers=True)
    t_reduce = time.perf_counter() - t0
    ans = solve_mesh(tables, SolveOptions(time_limit=time_limit, rel_gap=0.01, threads=1), reduced=red,
                     warm_start=warm[2] if warm else None)
    mb = tables.microbatches
    obj = ans.objective / mb if ans.objective is not None else None
    if ans.specs is not None:  # the same number as planmap's evaluate gives the plan
        from planmap.problem import Certificate, Status
        from planmap.sharding.solution import spmd_solution

        sol = spmd_solution(problem, tables, ans.specs, Certificate(Status.HEURISTIC, "ip"))
        obj = evaluate(problem, sol).objective
    return dict(model=graph.name, cluster=cluster, mesh="x".join(map(str, shape)), ops=tables.num_ops,
                groups=red.num_groups, rows=ans.rows, columns=ans.columns, tables_s=t_tables, reduce_s=t_reduce,
                build_s=ans.build_time, solve_s=ans.solve_time, status=str(ans.status), gap=ans.gap,
                origin=ans.origin, step_ms=None if obj is None else obj * 1e3,
                base=None if best_base is None else f"{best_base[1]} {best_base[0] * 1e3:.4g} ms",
                ratio=None if obj is None or best_base is None else obj / best_base[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=None, help="also write the table as markdown here")
    args = ap.parse_args()
    from planmap import frontend

    stamp = header()
    print(stamp + "\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="planmap-bench-") as tmp:
        t0 = time.perf_counter()
        graph = frontend.load_model(export_train_step(args.layers, args.batch, Path(tmp)))
        print(f"exported and loaded {graph.num_nodes} ops in {time.perf_counter() - t0:.1f} s", flush=True)
    lines = ["| model | mesh | ops | groups | rows | columns | tables s | reduce s | solve s | status | gap "
             "| step ms | best baseline | ratio |", "|" + "---|" * 14]
    for cluster, shape in CLUSTERS:
        r = run(graph, cluster, shape, args.time_limit)
        gap = "" if r["gap"] is None else f"{r['gap']:.2%}"
        lines.append(f"| GPT-2-XL {args.layers}L train b{args.batch} | {r['mesh']} ({cluster}) | {r['ops']} "
                     f"| {r['groups']} | {r['rows']} | {r['columns']} | {r['tables_s']:.1f} | {r['reduce_s']:.1f} "
                     f"| {r['solve_s']:.1f} | {r['status']} ({r['origin']}) | {gap} | "
                     f"{'' if r['step_ms'] is None else format(r['step_ms'], '.4g')} | {r['base'] or ''} | "
                     f"{'' if r['ratio'] is None else format(r['ratio'], '.3f')} |")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("# Sharding IP at scale (repeated layers tied)\n\n"
                            f"Generated by `python bench/sharding_scale.py --layers {args.layers} --batch "
                            f"{args.batch} --time-limit {args.time_limit:g}`. Step time per microbatch under "
                            "`evaluate`; ratio = IP / best SPMD baseline (< 1 better). Solve = the HiGHS run "
                            "(gap 1 %, one thread); tables and reduction are built once per mesh."
                            f"\n\n```\n{stamp}\n```\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Front-end benchmark: load + graph-build time, ops/s and peak memory for GPT-style models.

GPT-2-XL-shaped transformers (d_model 1600, 25 heads, vocabulary 50257, 1024 tokens) with 12, 48
and 480 unrolled layers are exported from ``jax.ShapeDtypeStruct``s — no weights exist anywhere —
to StableHLO text and to a VHLO artifact. Each artifact is then loaded by ``planmap.frontend.load_model``
in a fresh process (so that the peak RSS is that load's alone) and coarsened. Columns:

* ``load s`` — wall time of ``load_model``: read, parse, walk, cost, build the OpGraph (the VHLO rows
  do all that in the isolation child of :mod:`planmap.frontend.isolate`, plus its start-up);
* ``cpu s`` — CPU time of the same, children included (the machine is shared: CPU time is the
  steadier number, and wall time on an idle machine is close to it);
* ``ops/s`` — ops / wall time, end to end (target: >= 50,000), and ``ops/cpu-s`` — ops / CPU time;
* ``peak RSS`` — the larger of the loading process's and its child's maximum resident memory
  (target: < 1 GiB at 480 layers).

    .venv/bin/python bench/frontend.py            # 12, 48 and 480 layers (about a minute)
    .venv/bin/python bench/frontend.py 12 48      # selected sizes
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPT2_XL = dict(d=1600, heads=25, ff=6400, vocab=50257, seq=1024, batch=1)


def export(layers: int, out: Path) -> dict[str, float]:
    """Write gpt{L}.mlir and gpt{L}.vhlo; return export times."""
    import functools

    import jax
    import jax.numpy as jnp

    import planmap.export
    from planmap.examples import models as M

    c = GPT2_XL
    params = jax.eval_shape(lambda: M._gpt_init(jax.random.PRNGKey(0), layers=layers, d=c["d"], ff=c["ff"],
                                                  vocab=c["vocab"], seq=c["seq"]))
    tokens = jax.ShapeDtypeStruct((c["batch"], c["seq"]), jnp.int32)
    fwd = functools.partial(M._gpt_forward, heads=c["heads"])

    def gpt_forward(params, tokens):
        return fwd(params, tokens)

    times = {}
    for suffix in (".mlir", ".vhlo"):
        t = time.perf_counter()
        planmap.export.jax(gpt_forward, params, tokens, path=out / f"gpt{layers}{suffix}")
        times[suffix] = time.perf_counter() - t
    return times


def measure(path: str) -> None:
    """Child mode: load + coarsen one artifact, print a JSON line."""
    import os
    import resource

    t_import = time.perf_counter()
    import planmap.frontend.stablehlo  # noqa: F401 - imports are a one-off cost of the process, not of a load
    from planmap.frontend import coarsen, load_model
    from planmap.frontend.mlir import make_context

    make_context()

    def cpu() -> float:  # this process and its children (the VHLO rows load in an isolation child)
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    t0, c0 = time.perf_counter(), cpu()
    graph = load_model(path)
    t1, c1 = time.perf_counter(), cpu()
    fused = coarsen(graph, "fuse")
    layers = coarsen(graph, "layers")
    t2 = time.perf_counter()
    print(json.dumps({
        "ops": graph.num_nodes, "load": t1 - t0, "cpu": c1 - c0, "import": t0 - t_import, "coarsen": t2 - t1,
        "fused": fused.num_nodes, "layer_nodes": layers.num_nodes,
        "repeated": layers.meta["coarsening"].get("repeated_layers", 0),
        "flops": graph.total_flops,
        "rss": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024,
    }))


def main(sizes: list[int]) -> None:
    from _stamp import header

    from planmap.units import format_bytes

    print(header() + "\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="planmap-bench-") as tmp:
        out = Path(tmp)
        for layers in sizes:
            t = export(layers, out)
            for suffix in (".mlir", ".vhlo"):
                path = out / f"gpt{layers}{suffix}"
                proc = subprocess.run([sys.executable, __file__, "--measure", str(path)], capture_output=True,
                                      text=True, check=True)
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                r.update(layers=layers, fmt="text" if suffix == ".mlir" else "vhlo", size=path.stat().st_size,
                         export=t[suffix])
                rows.append(r)
                print(f"  measured {path.name}", file=sys.stderr)
    head = (f"{'layers':>6} {'format':>6} {'ops':>7} {'file':>9} {'export s':>8} {'load s':>7} {'cpu s':>6} "
            f"{'ops/s':>8} {'ops/cpu-s':>9} {'coarsen s':>9} {'fused':>6} {'layers':>6} {'peak RSS':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['layers']:>6} {r['fmt']:>6} {r['ops']:>7,} {format_bytes(r['size']):>9} {r['export']:>8.2f} "
              f"{r['load']:>7.2f} {r['cpu']:>6.2f} {r['ops'] / r['load']:>8,.0f} {r['ops'] / r['cpu']:>9,.0f} "
              f"{r['coarsen']:>9.2f} "
              f"{r['fused']:>6,} {r['layer_nodes']:>6,} {format_bytes(r['rss']):>9}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(sys.argv[2])
    else:
        main([int(a) for a in sys.argv[1:]] or [12, 48, 480])

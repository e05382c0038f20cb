"""Cost model and evaluator speed on large graphs (issue 4: costing a 60k-op graph for 16 devices
takes well under a second). Prints a table of medians over repeats.

Run: .venv/bin/python bench/cost.py [--nodes 60000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _stamp import header

from planmap.cluster import Topology
from planmap.cost import CostModel
from planmap.evaluate import evaluate
from planmap.graph import OpGraph
from planmap.problem import Certificate, Problem, Solution
from planmap.spec import load_cluster


def roofline_graph(n: int, seed: int = 0) -> OpGraph:
    """A chain-with-skips graph of n ops with FLOPs and bytes like a transformer's (dtype mix)."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([np.arange(n - 1), rng.integers(0, n - 2, n // 3)])
    dst = np.concatenate([np.arange(1, n), np.zeros(n // 3, int)])
    dst[n - 1:] = np.minimum(src[n - 1:] + rng.integers(1, 30, n // 3), n - 1)
    keep = dst > src
    src, dst = src[keep], dst[keep]
    out = rng.integers(1 << 10, 1 << 24, n)
    return OpGraph(name=f"roofline{n}", kind=("stablehlo.dot_general",) * n, op_name=tuple(f"op{i}" for i in range(n)),
                   flops=rng.lognormal(18, 2, n), bytes_accessed=out * 3.0, out_bytes=out, state_bytes=np.zeros(n),
                   dtype=tuple(rng.choice(["bf16", "f32"], n)), value_node=np.arange(n), value_index=np.zeros(n),
                   value_bytes=out, edge_value=src, edge_dst=dst)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[6_000, 60_000])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(header() + "\n")
    topo = Topology.from_spec(load_cluster("specs/clusters/h100-2x8.yaml").spec)
    print(f"{'nodes':>8} {'devices':>8} {'cost model':>12} {'evaluate thr':>13} {'evaluate lat':>13}")
    for n in args.nodes:
        g = roofline_graph(n)
        t_cost = median_time(lambda g=g: CostModel.build(g, topo).device_compute, args.repeats)
        dev = (np.arange(n) * topo.num_devices // n).astype(np.int32)
        for objective in ("throughput", "latency"):
            p = Problem.from_graph(g, topo, objective=objective)
            s = Solution.from_devices(p, dev, Certificate("heuristic", "bench"))
            t = median_time(lambda p=p, s=s: evaluate(p, s), max(1, args.repeats // 2))
            if objective == "throughput":
                t_thr = t
            else:
                t_lat = t
        print(f"{n:>8} {topo.num_devices:>8} {t_cost * 1e3:>10.1f}ms {t_thr * 1e3:>11.1f}ms {t_lat * 1e3:>11.1f}ms")


if __name__ == "__main__":
    main()

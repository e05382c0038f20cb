"""Coarsening scale benchmark: ``planmap inspect`` of a long elementwise chain (40k, 80k, 200k ops).

A chain is the worst case for fusion: every op is cheap and is absorbed into its neighbour, so the
fused group grows by one op per merge. With union by size (``planmap/frontend/partition.py``) the
whole inspect stays near-linear; the target is 200k ops in <= 10 s. Each size runs ``planmap
inspect`` in a fresh process (parse, walk, cost, coarsen, report); columns are wall and CPU seconds
(children included: the machine may be shared, CPU time is the steadier number) and ops per second.

    .venv/bin/python bench/chain.py              # 40k, 80k and 200k ops
    .venv/bin/python bench/chain.py 1000 5000    # selected sizes
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _stamp import header

SIZES = (40_000, 80_000, 200_000)


def chain_mlir(n: int) -> str:
    """StableHLO text of ``n`` alternating exp/tanh ops on a 128-float vector, each feeding the next."""
    lines = ["module @chain {", "  func.func public @main(%arg0: tensor<128xf32>) -> tensor<128xf32> {"]
    prev = "%arg0"
    for i in range(n):
        lines.append(f"    %{i} = stablehlo.{'tanh' if i % 2 else 'exponential'} {prev} : tensor<128xf32>")
        prev = f"%{i}"
    lines += [f"    return {prev} : tensor<128xf32>", "  }", "}", ""]
    return "\n".join(lines)


def run(n: int, tmp: Path) -> tuple[float, float]:
    """(wall s, CPU s) of ``planmap inspect`` on an ``n``-op chain."""
    path = tmp / f"chain{n}.mlir"
    path.write_text(chain_mlir(n), encoding="utf-8")
    planmap = Path(sys.executable).with_name("planmap")
    before = os.times()
    t = time.perf_counter()
    subprocess.run([str(planmap), "inspect", str(path)], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    print(header())
    print(f"{'ops':>9} {'wall s':>8} {'cpu s':>8} {'ops/s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            wall, cpu = run(n, Path(tmp))
            print(f"{n:>9,} {wall:>8.2f} {cpu:>8.2f} {n / wall:>9,.0f}", flush=True)


if __name__ == "__main__":
    main()

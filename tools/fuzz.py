"""``make fuzz``: the reliability fuzzer for a given duration (``DURATION`` seconds, default 600).

Round-robin over the input kinds of :mod:`tests.reliability.fuzzing` (spec, cluster, plan, op-graph
JSON, artifact text), each input from a seeded generator (its seed is printed with any failure, so
it can be replayed), run in-process through the CLI under a limit of 10 s CPU time per call (and 60 s
wall time, for a call blocked without computing; see :mod:`tests.reliability.fuzzing`). ``--jobs`` worker processes
(default: the CPU count) share the seeds (worker ``w`` takes round ``i`` when ``i % jobs == w``), each
in its own directory. Stops after ``--duration`` seconds or once every kind has ``--per-kind`` inputs.
Prints per kind the number of inputs, tracebacks and hangs; exits 1 when there was any traceback or hang.

    .venv/bin/python tools/fuzz.py --duration 300 [--seed 0] [--jobs 2] [--per-kind 10000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reliability.fuzzing import KINDS, fuzz_one  # noqa: E402


def worker(args: tuple[int, int, int, float, int]) -> tuple[dict[str, dict[str, int]], list[str], float]:
    """Fuzz rounds ``w, w + jobs, …`` (one input of each kind per round) until ``end`` or ``per_kind``;
    the counts, the failures and the CPU seconds the worker spent."""
    w, jobs, seed0, end, per_kind = args
    warnings.simplefilter("ignore")
    counts = {k: {"inputs": 0, "tracebacks": 0, "hangs": 0} for k in KINDS}
    failures: list[str] = []
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        i = w
        while time.time() < end and i < per_kind:
            for kind in KINDS:
                seed = seed0 + i
                outcome = fuzz_one(kind, random.Random(f"{kind}:{seed}"), ROOT, Path(tmp))
                counts[kind]["inputs"] += 1
                if outcome.status != "ok":
                    counts[kind]["tracebacks" if outcome.status == "traceback" else "hangs"] += 1
                    failures.append(f"{kind} seed {seed}: {outcome.status} on {outcome.argv}: {outcome.detail}")
            i += jobs
    return counts, failures, time.process_time() - cpu0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds to fuzz (all kinds together)")
    ap.add_argument("--seed", type=int, default=0, help="first seed; input i of a kind uses seed + i")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--per-kind", type=int, default=10**12, help="stop once each kind had this many inputs")
    args = ap.parse_args()
    end = time.time() + args.duration
    tasks = [(w, args.jobs, args.seed, end, args.per_kind) for w in range(args.jobs)]
    t0 = time.time()
    if args.jobs == 1:
        results = [worker(tasks[0])]
    else:  # fork: the workers inherit the imported CLI instead of importing it again
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(worker, tasks)
    counts = {k: {"inputs": 0, "tracebacks": 0, "hangs": 0} for k in KINDS}
    failures: list[str] = []
    cpu = sum(r[2] for r in results)
    for c, f, _ in results:
        failures += f
        for kind in KINDS:
            for key in counts[kind]:
                counts[kind][key] += c[kind][key]
    for line in failures[:50]:
        print(line)
    print(f"{'kind':<10} {'inputs':>8} {'tracebacks':>11} {'hangs':>6}   ({time.time() - t0:.0f} s, {args.jobs} jobs, "
          f"{cpu:.0f} CPU s: {sum(c['inputs'] for c in counts.values()) / max(cpu, 1e-9):.1f} inputs per CPU s)")
    for kind, c in counts.items():
        print(f"{kind:<10} {c['inputs']:>8,} {c['tracebacks']:>11} {c['hangs']:>6}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

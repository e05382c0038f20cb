"""``make fuzz``: the reliability fuzzer for a given duration (``DURATION`` seconds, default 600).

Round-robin over the input kinds of :mod:`tests.reliability.fuzzing` (spec, cluster, plan, op-graph
JSON, artifact text), each input from a seeded generator (its seed is printed with any failure, so
it can be replayed), run in-process through the CLI under a 10 s alarm. Prints per kind the number
of inputs, tracebacks and hangs; exits 1 when there was any traceback or hang.

    .venv/bin/python tools/fuzz.py --duration 300 [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reliability.fuzzing import KINDS, fuzz_one  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds to fuzz (all kinds together)")
    ap.add_argument("--seed", type=int, default=0, help="first seed; input i of a kind uses seed + i")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    counts = {k: {"inputs": 0, "tracebacks": 0, "hangs": 0} for k in KINDS}
    failures: list[str] = []
    end = time.monotonic() + args.duration
    with tempfile.TemporaryDirectory() as tmp:
        i = 0
        while time.monotonic() < end:
            for kind in KINDS:
                seed = args.seed + i
                outcome = fuzz_one(kind, random.Random(f"{kind}:{seed}"), ROOT, Path(tmp))
                counts[kind]["inputs"] += 1
                if outcome.status != "ok":
                    counts[kind]["tracebacks" if outcome.status == "traceback" else "hangs"] += 1
                    failures.append(f"{kind} seed {seed}: {outcome.status} on {outcome.argv}: {outcome.detail}")
            i += 1
    for line in failures[:50]:
        print(line)
    print(f"{'kind':<10} {'inputs':>8} {'tracebacks':>11} {'hangs':>6}")
    for kind, c in counts.items():
        print(f"{kind:<10} {c['inputs']:>8,} {c['tracebacks']:>11} {c['hangs']:>6}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

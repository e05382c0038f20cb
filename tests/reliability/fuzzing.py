"""The fuzzing harness shared by ``tests/reliability/test_fuzz.py`` (bounded, in CI) and ``make fuzz``
(``tools/fuzz.py``, for a given duration).

Each input kind — spec, cluster, plan, op-graph JSON, artifact text — is a seed file from ``specs/``
or ``plans/`` mutated by a seeded :class:`random.Random` (so hypothesis can drive it derandomized and
the long run can replay an input from its seed): tokens replaced by hostile values (huge and tiny
numbers, lone surrogates, deep nesting, YAML tags and aliases, very long names), lines deleted or
duplicated, bytes inserted. The input then goes through the CLI in-process (:func:`planmap.cli.main`)
under two timers: 10 s of this process's CPU time (``ITIMER_PROF``) and 60 s of wall time (``alarm``,
for a call blocked without computing). CPU time is the limit that means something on a shared
machine: a niced fuzzer among a dozen busy processes gets a few percent of a core, and a 0.2 s
input then takes over 10 s of wall time; with a free core the two are the same. The property:
exit 0, 1 or 2, a message on exit 1, never a traceback (an exception that is not a PlanmapError),
never a hang (either timer expiring).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from planmap.cli import main

KINDS = ("spec", "cluster", "plan", "opgraph", "artifact")
SPEC = "specs/mlp-latency-cpu4acc.yaml"
CLUSTER = "specs/clusters/cpu-4acc-pcie.yaml"
PLAN = "plans/mlp-latency-cpu4acc.plan.yaml"
MODEL = "specs/models/mlp.mlir"
LIMIT_S = 10  # CPU seconds per CLI call
WALL_S = 60  # wall seconds per CLI call

HOSTILE = ["0", "-1", "1e309", "-1e309", ".nan", ".inf", "0.1B/s", "1000PB/s", "1e-30", "9" * 40, "9" * 5000,
           '"\\udc80"', "\"\\ud800x\"", "[" * 300 + "]" * 300, "{" * 50 + "}" * 50, "!!python/object:os.system",
           "&a [*a, *a]", "*nope", "~", "''", "a" * 300, "null", "true", "[[0, 1000000000000]]", "[]", "{}",
           "host0/cpu0", "host9/gpu99", "9223372036854775807", "-9223372036854775808", "1GiB", "0GiB", "1us",
           "100000000s", "\x00", "é", "\t", ": :", "- -", "|", ">", "%", "@", "`"]
MLIR_HOSTILE = ["tensor<9223372036854775807xf32>", "tensor<0xf32>", "tensor<-1xf32>", "tensor<?xf32>",
                "stablehlo.while", "stablehlo.custom_call", "%arg99", "%9999", "func.call @nope", "dense<", "}",
                "{", "i1", "f8E4M3FN", "complex<f32>", "loc(unknown)", "#loc99", "9" * 5000]


@dataclass
class Outcome:
    """One input's result: ``status`` is 'ok' (exit 0/1/2 with a message), 'traceback' or 'hang'."""

    status: str
    argv: list[str]
    detail: str = ""


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def _mutate(text: str, rng: random.Random, hostile: list[str]) -> str:
    """One to four edits: replace a token, insert a hostile value, delete or duplicate a line."""
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.5:
            tokens = list(re.finditer(r"[A-Za-z0-9_./%@<>-]+", text))
            if tokens:
                m = rng.choice(tokens)
                text = text[: m.start()] + rng.choice(hostile) + text[m.end():]
        elif op < 0.7:
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(hostile) + text[at:]
        else:
            lines = text.split("\n")
            i = rng.randrange(len(lines))
            lines[i: i + 1] = [] if op < 0.85 else [lines[i], lines[i]]
            text = "\n".join(lines)
    return text


def _opgraph(rng: random.Random) -> str:
    """A small op-graph JSON document, sometimes valid, with hostile values in random fields."""
    def val():
        return rng.choice([0, -1, 1.5, 10**rng.randint(0, 30), "x", None, [], {}, True, float("inf"), "é"])

    n = rng.randint(0, 6)
    nodes = [{"id": i, "kind": rng.choice(["matmul", "add", "relu"]), "time": {"gpu": rng.random()},
              "memory_bytes": rng.randint(0, 10**6)} for i in range(n)]
    edges = [{"src": rng.randrange(n), "dst": rng.randrange(n), "bytes": rng.randint(0, 10**6)} for _ in range(n)] \
        if n else []
    doc = {"format": "planmap.opgraph/v1", "nodes": nodes, "edges": edges}
    for _ in range(rng.randint(0, 3)):
        target = rng.choice([doc, *nodes, *edges]) if n else doc
        target[rng.choice(["id", "src", "dst", "time", "bytes", "format", "nodes", "kind", "layer"])] = val()
    text = json.dumps(doc, allow_nan=True)
    return _mutate(text, rng, ["[" * 2000, "9" * 5000, "NaN", "-Infinity", "\"\\udc80\"", "}", "{", ",", "null",
                               "1e400"]) if rng.random() < 0.5 else text


def make_input(kind: str, rng: random.Random, root: Path, work: Path) -> list[list[str]]:
    """Write one mutated input of ``kind`` under ``work`` (a copy of specs/ and plans/); the CLI calls
    to make with it (run in order; the later ones only while the earlier exit 0)."""
    if not (work / "specs").is_dir():
        shutil.copytree(root / "specs", work / "specs")
        shutil.copytree(root / "plans", work / "plans")
    plan_out = str(work / "out.plan.yaml")
    if kind in ("spec", "cluster"):
        seed, path = (SPEC, "specs/fuzz.yaml") if kind == "spec" else (CLUSTER, "specs/clusters/fuzz.yaml")
        text = _mutate((root / seed).read_text(encoding="utf-8"), rng, HOSTILE)
        (work / path).write_text(text, encoding="utf-8", errors="surrogatepass")
        spec = work / path
        if kind == "cluster":
            spec = work / "specs/fuzz-cluster.yaml"
            spec.write_text((root / SPEC).read_text().replace("clusters/cpu-4acc-pcie.yaml", "clusters/fuzz.yaml"))
        return [["validate", str(spec)], ["solve", str(spec), "-q", "-o", plan_out, "--solver", "greedy",
                                          "--time-limit", "2s"]]
    if kind == "plan":
        text = _mutate((root / PLAN).read_text(encoding="utf-8"), rng, HOSTILE)
        path = work / "plans/fuzz.plan.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        return [["check", str(path)], ["explain", str(path)], ["diff", str(work / PLAN), str(path)]]
    if kind == "opgraph":
        path = work / "fuzz.json"
        path.write_text(_opgraph(rng), encoding="utf-8", errors="surrogatepass")
        return [["inspect", str(path)]]
    path = work / "specs/models/fuzz.mlir"
    path.write_text(_mutate((root / MODEL).read_text(encoding="utf-8"), rng, MLIR_HOSTILE), encoding="utf-8",
                    errors="surrogatepass")
    return [["inspect", str(path)]]


def run_cli(argv: list[str], limit_s: float = LIMIT_S, wall_s: int = WALL_S) -> Outcome:
    """Run the CLI in-process under ``limit_s`` CPU seconds and ``wall_s`` wall seconds; classify the result."""
    out, err = io.StringIO(), io.StringIO()
    old_alarm = signal.signal(signal.SIGALRM, _alarm)
    old_prof = signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, limit_s)
    signal.alarm(wall_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except _Hang:
        return Outcome("hang", argv, f"over {limit_s:g} s CPU or {wall_s} s wall")
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        return Outcome("traceback", argv, f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        signal.signal(signal.SIGPROF, old_prof)
    text = out.getvalue() + err.getvalue()
    if "Traceback" in text or rc not in (0, 1, 2):
        return Outcome("traceback", argv, f"exit {rc}: {text[-300:]}")
    if rc == 1 and not text.strip():
        return Outcome("traceback", argv, "exit 1 without a message")
    return Outcome("ok", argv, str(rc))


def fuzz_one(kind: str, rng: random.Random, root: Path, work: Path) -> Outcome:
    """Make one input of ``kind`` and run its CLI calls; the first bad outcome, else the last one."""
    outcome = Outcome("ok", [])
    for argv in make_input(kind, rng, root, work):
        outcome = run_cli(argv)
        if outcome.status != "ok" or outcome.detail != "0":
            return outcome
    return outcome

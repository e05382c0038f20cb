"""Profile files: measured seconds per op of one artifact on one device kind, for the cost model.

``planmap profile`` (:mod:`planmap.cli.profile_cmds`) times each fused node of an artifact on a local
JAX device (warm-up calls, then the median of repeated calls, less the measured cost of calling an
empty program) and writes a JSON profile. A spec names it under ``cost.profile``; the problem's
coarsened graph then carries the measured times in its ``measured`` column (keyed by the device
kind, so every device type of that kind uses them, see :class:`planmap.cost.CostModel`), and the
plan records the profile's sha256 as an input, so re-profiling stales the plan.

A node's time is spread over its member ops in proportion to their rooflines, and a coarsened graph
sums its members' times: the same coarsening gives back the measured node times exactly, another
coarsening an estimate. Profiles are per artifact (the model's sha256 is checked) and per device
kind; what they say about another device of the same kind (another CPU model, another GPU) is only
as good as the two are alike.

Nodes timed one by one miss what XLA does to them inside a larger program: it fuses elementwise
chains across node boundaries and duplicates them into their consumers (in a training step's
backward pass, the residual-stream gradient is recomputed inside the transposes that feed each
weight gradient), runs dots with other operand layouts, and schedules thunks over the thread pool.
On XLA:CPU this makes a GPT training step 2-3x slower than the sum of its nodes and an MLP forward
slightly faster (bench/results/profile.md). The profile therefore also times the whole entry
function as one program (``program_seconds``) and the cost model uses each node's time scaled by
the *context factor* ``program_seconds / sum of node times``: one measured term per artifact and
device, exact for a single-stage plan of the whole program and an estimate for a stage that holds
part of it (a cut materialises values that the whole program recomputes).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planmap.errors import InputError
from planmap.graph import OpGraph
from planmap.io import read_input, sha256_input

__all__ = ["FORMAT", "Profile", "load_profile", "write_profile", "apply_profile", "file_sha256",
           "context_factor", "spread_over_ops"]

FORMAT = "planmap.profile/1"


def file_sha256(path: str | Path) -> str:
    """The sha256 of a model artifact, as plans record it."""
    return sha256_input(Path(path), "artifact")


@dataclass(frozen=True)
class Profile:
    """``op_seconds`` (one per op of the artifact's entry function; NaN = not measured) on devices of
    ``device_kind`` (``device`` names the one measured), for the artifact with ``model_sha256``.
    ``call_overhead`` (s) is what calling an empty program cost, already subtracted; ``warmup`` and
    ``repeats`` say how each node was timed; ``level`` the coarsening whose nodes were timed;
    ``program_seconds`` the whole entry function timed as one program (empty-call cost subtracted),
    None when it was not timed (then nodes count as they were timed alone)."""

    model_sha256: str
    device_kind: str
    device: str
    op_seconds: np.ndarray
    call_overhead: float
    warmup: int
    repeats: int
    level: str
    program_seconds: float | None = None

    @property
    def context_factor(self) -> float:
        """How much slower (> 1) or faster the nodes run inside the whole program than alone."""
        return context_factor(float(np.nansum(self.op_seconds)), self.program_seconds)

    def to_json(self) -> str:
        doc = {"format": FORMAT, "model_sha256": self.model_sha256, "device_kind": self.device_kind,
               "device": self.device, "level": self.level, "warmup": self.warmup, "repeats": self.repeats,
               "call_overhead_s": self.call_overhead, "program_seconds": self.program_seconds,
               "op_seconds": [None if np.isnan(x) else float(x) for x in self.op_seconds]}
        return json.dumps(doc, indent=1) + "\n"


def write_profile(path: str | Path, profile: Profile) -> Path:
    p = Path(path)
    p.write_text(profile.to_json())
    return p


def load_profile(path: str | Path) -> Profile:
    """Read a profile file (InputError naming the file when it is not one)."""
    p = Path(path)
    try:
        doc = json.loads(read_input(p, "artifact"))
    except (OSError, ValueError) as e:
        raise InputError(f"{p}: not a readable profile ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{p}: not a planmap profile (expected \"format\": \"{FORMAT}\")")
    try:
        secs = np.array([np.nan if x is None else float(x) for x in doc["op_seconds"]], float)
        prof = Profile(str(doc["model_sha256"]), str(doc["device_kind"]), str(doc.get("device", "")), secs,
                       float(doc.get("call_overhead_s", 0.0)), int(doc.get("warmup", 0)),
                       int(doc.get("repeats", 0)), str(doc.get("level", "fuse")),
                       None if doc.get("program_seconds") is None else float(doc["program_seconds"]))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{p}: malformed profile ({type(e).__name__}: {e})") from None
    known = np.append(secs[~np.isnan(secs)], prof.program_seconds or 0.0)
    if (known < 0).any() or not np.isfinite(known).all():
        raise InputError(f"{p}: a profile's times must be finite and >= 0 seconds", code="range")
    return prof


def apply_profile(coarse: OpGraph, original: OpGraph, profile: Profile, model_sha256: str,
                  where: str = "profile") -> OpGraph:
    """``coarse`` with the profile's times in context (each op's time times the profile's context
    factor), summed over each node's member ops, as its ``measured`` column for the profile's device
    kind; nodes with an unmeasured member keep the roofline (NaN rows are not written: the kind's
    whole column is used, so all members must be measured)."""
    if profile.model_sha256 != model_sha256:
        raise InputError(f"{where}: profiled another model (sha256 {profile.model_sha256[:12]}…, the spec's model "
                         f"is {model_sha256[:12]}…); run `planmap profile` again")
    if len(profile.op_seconds) != original.num_nodes:
        raise InputError(f"{where}: has {len(profile.op_seconds)} op times, the model has {original.num_nodes} ops")
    per_op = np.nan_to_num(profile.op_seconds, nan=0.0) * profile.context_factor
    node_of = coarse.original_to_node
    times = np.bincount(node_of, weights=per_op, minlength=coarse.num_nodes)
    out = copy.copy(coarse)  # OpGraph is frozen with a custom __init__: only the measured column changes
    measured = dict(coarse.measured)
    measured[profile.device_kind] = times
    times.setflags(write=False)
    object.__setattr__(out, "measured", dict(sorted(measured.items())))
    return out


def spread_over_ops(node_seconds: np.ndarray, coarse: OpGraph, weights: np.ndarray) -> np.ndarray:
    """Per-op seconds that sum, node by node, to ``node_seconds``: each node's time shared among its
    member ops in proportion to ``weights`` (their rooflines), evenly when those are all zero."""
    out = np.full(coarse.n_original, np.nan)
    for i in range(coarse.num_nodes):
        ops = coarse.members_of(i)
        if len(ops) == 0:
            continue
        w = np.asarray(weights, float)[ops]
        share = w / w.sum() if w.sum() > 0 else np.full(len(ops), 1.0 / len(ops))
        out[ops] = node_seconds[i] * share
    return out


def context_factor(node_total: float, program_seconds: float | None) -> float:
    """``program_seconds / node_total``: the whole program's time over the sum of its nodes' times,
    each timed alone (1 when the program was not timed or the nodes took no measurable time)."""
    if program_seconds is None or not node_total > 0:
        return 1.0
    return program_seconds / node_total

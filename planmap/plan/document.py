"""The plan file: its schema (pydantic models) and its deterministic YAML form.

A plan is reviewed in git like code, so its bytes are a function of its decisions only: stable key
order, sorted lists, integers (ns, bytes) instead of floats where possible, no timestamps,
hostnames or absolute paths, and one decision per line (a moved stage is a one-line diff). The
emitter is written by hand for that reason — a generic YAML dumper decides line breaks itself.

Versioning: ``format_version: "MAJOR.MINOR"``. A minor bump only adds fields (readers ignore
unknown fields); a major bump changes meaning, and readers refuse plans of another major. 1.1 added
the ``digest`` line; 1.2 added ``canonical_sha256`` to the spec and cluster inputs (staleness by
meaning: see :mod:`planmap.plan.canonical`), keeping ``sha256`` of the bytes for older readers.

The last line, ``digest: sha256:<hex>``, is the SHA-256 of the canonical rendering of every other
field (no comment header, no digest line). It is tamper-EVIDENCE, not a signature: anyone can
recompute it, so it catches hand edits and corruption of any single field (two stages swapping
devices, a removed sharding) without re-solving, but not a deliberate forger. ``planmap check``
re-derives every derived field from the spec and the artifact, and ``check --resolve`` proves the
decisions themselves by solving again.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planmap.errors import InputError

__all__ = [
    "FORMAT_VERSION",
    "PlanInput",
    "MeshDoc",
    "StageMesh",
    "StageDoc",
    "ShardingEntry",
    "ShardingsDoc",
    "ScheduleDoc",
    "DevicePrediction",
    "StagePrediction",
    "Predicted",
    "SolverDoc",
    "ObjectiveDoc",
    "PlanDocument",
    "render",
    "body_digest",
    "parse",
]

FORMAT_VERSION = "1.2"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class _Doc(BaseModel):
    # extra="ignore": a reader of 1.x accepts files written by 1.y > x (minor versions only add fields)
    model_config = ConfigDict(extra="ignore", frozen=True)


class PlanInput(_Doc):
    role: Literal["spec", "cluster", "model", "profile", "checkpoint"] = Field(description="What the input is.")
    path: str = Field(description="Path relative to the plan file's directory (POSIX separators).")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the file's bytes.")
    canonical_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of the parsed YAML content as canonical JSON (spec and cluster, format >= 1.2): "
                    "when present, staleness compares this hash, so comments, whitespace and key order do not "
                    "stale the plan.")

    @property
    def content_hash(self) -> str:
        """The hash that decides staleness: canonical when recorded, else the bytes'."""
        return self.canonical_sha256 or self.sha256


class MeshDoc(_Doc):
    axis_names: list[str] = Field(description="Mesh axis names (JAX vocabulary).")
    axis_sizes: list[int] = Field(description="Size of each mesh axis.")
    devices: list[str] = Field(description="Device names in mesh order (row-major over the axes).")


class StageMesh(_Doc):
    axis_names: list[str] = Field(description="Axis names of the stage's sub-mesh.")
    axis_sizes: list[int] = Field(description="Axis sizes of the stage's sub-mesh.")


class StageDoc(_Doc):
    id: int = Field(ge=0, description="Stage number; stages on one device run in this order.")
    devices: list[str] = Field(min_length=1, description="Devices of the stage (several: replicated or sharded).")
    ops: list[tuple[int, int]] = Field(description="Half-open ranges [start, stop) of the artifact's op ids "
                                       "(entry function body, in order) that the stage runs.")
    mesh: StageMesh | None = Field(default=None, description="Sub-mesh when the stage spans several devices.")
    layers: list[str] = Field(default_factory=list, description="Repeated layers the stage holds (for reading).")
    remat: list[tuple[int, int]] = Field(default_factory=list, description="Activation checkpointing: half-open "
                                         "ranges of the stage's forward op ids that its backward runs again from "
                                         "the stashed layer-boundary values instead of keeping their results.")


class ShardingEntry(_Doc):
    arg: int | None = Field(default=None, description="Entry-function argument index (an argument sharding).")
    op: int | None = Field(default=None, description="Op id whose result is constrained (a sharding constraint).")
    result: int = Field(default=0, description="Result number of the op.")
    name: str = Field(default="", description="Argument name or op location, for reading.")
    spec: list[str | list[str] | None] = Field(description="PartitionSpec: per tensor dim, None, an axis or axes.")


class ShardingsDoc(_Doc):
    args: list[ShardingEntry] = Field(default_factory=list, description="Argument shardings.")
    values: list[ShardingEntry] = Field(default_factory=list, description="Sharding constraints on op results.")
    zero: int = Field(default=0, ge=0, le=3, description=(
        "ZeRO stage of a training plan: 1 shards the optimizer state, 2 also the gradients, over the data axes "
        "a parameter's spec does not use; 3 (parameters too) is written as parameter specs. Absent: 0."))


class ScheduleDoc(_Doc):
    kind: Literal["none", "gpipe", "1f1b"] = Field(description="Pipeline schedule.")
    microbatches: int = Field(ge=1, description="Microbatches per step.")


class DevicePrediction(_Doc):
    device: str = Field(description="Device name.")
    memory: int = Field(description="Predicted bytes held: the program model's (the sum of ``stages`` on it).")
    capacity: int | None = Field(default=None, description="Usable bytes (None: unlimited).")
    load_ns: int = Field(description="Busy time per step (latency) or per microbatch (pipeline), ns.")


class StagePrediction(_Doc):
    """A stage's memory per device under the program model (:mod:`planmap.peak_memory`): ``memory`` is the sum of
    the byte fields; a device's ``memory`` is the sum over the stages it holds (to rounding)."""

    stage: int = Field(ge=0, description="Stage id (as in ``stages``).")
    memory: int = Field(description="Predicted bytes per device of the stage: its largest compiled program + "
                        "optimizer + state + stash.")
    params: int = Field(description="Parameter bytes the stage's largest compiled program reads (one microbatch).")
    inputs: int = Field(description="Other bytes that program reads: data, values received, the stash it uses.")
    outputs: int = Field(description="Bytes that program writes for other programs (and gradients, results).")
    temp: int = Field(description="That program's temporaries: the most live at once under liveness in op order.")
    optimizer: int = Field(default=0, description="Optimizer state beyond the parameters and gradients (training).")
    state: int = Field(default=0, description="The nodes' state bytes.")
    stash: int = Field(default=0, description="Stashed activations of the other microbatches the schedule keeps "
                       "in flight at this stage (training).")
    in_flight: int = Field(default=1, ge=1, description="Microbatches in flight at the stage under the schedule.")


class Predicted(_Doc):
    objective_ns: int = Field(description="Latency, or pipeline bottleneck time per microbatch, ns.")
    step_time_ns: int = Field(description="Time of one step (all microbatches), ns.")
    bytes_moved: int = Field(description="Bytes transferred between devices per microbatch.")
    devices: list[DevicePrediction] = Field(description="Memory and load per device.")
    stages: list[StagePrediction] = Field(default_factory=list, description=(
        "Memory per device of each stage under the program model (plans written before it: absent)."))


class SolverDoc(_Doc):
    name: str = Field(description="Solver that produced the plan.")
    version: str = Field(default="", description="Solver version.")
    backend: str | None = Field(default=None, description="MIP backend, when one was used.")
    status: str = Field(description="optimal, gap_reached, time_limit, bounded (search complete, gap to a proven bound "
                                    "above the requested one), interrupted or heuristic.")
    objective_ns: int | None = Field(default=None, description="Objective of the plan, ns.")
    bound_ns: int | None = Field(default=None, description="Best proven lower bound, ns.")
    gap: float | None = Field(default=None, description="Relative optimality gap (objective - bound) / objective.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options the solve ran with.")
    message: str = Field(default="", description="The certificate's structured fields, rendered (check re-renders "
                         "it).")
    remarks: str = Field(default="", description="The solver's own remarks: the space it searched, the candidates "
                         "it judged, per-stage gaps. Not re-derivable without solving: `check --resolve` compares "
                         "them, plain `check` does not.")


class ObjectiveDoc(_Doc):
    kind: Literal["latency", "throughput"] = Field(description="What the plan optimises.")
    variant: str | None = Field(default=None, description="Throughput variant (max-load, max-fw-plus-max-bw).")


class PlanDocument(_Doc):
    """A plan: where each op of the artifact runs, how tensors are sharded, and what that costs."""

    format_version: str = Field(pattern=r"^\d+\.\d+$", description="MAJOR.MINOR of the plan format.")
    generator: str = Field(description="planmap version that wrote the plan.")
    name: str = Field(description="Name of the PlanSpec.")
    objective: ObjectiveDoc = Field(description="Objective.")
    mode: Literal["inference", "training"] = Field(description="Inference, or a training step.")
    inputs: list[PlanInput] = Field(description="Every input, with its hash: a changed input makes the plan stale.")
    data_args: list[int] = Field(default_factory=list, description="Arguments split into microbatches (batch dim 0).")
    mesh: MeshDoc = Field(description="The devices the plan uses, as a mesh.")
    schedule: ScheduleDoc = Field(description="Pipeline schedule.")
    stages: list[StageDoc] = Field(description="Stages in execution order.")
    shardings: ShardingsDoc = Field(default_factory=ShardingsDoc, description="SPMD shardings.")
    predicted: Predicted = Field(description="What the cost model predicts for this plan.")
    solver: SolverDoc = Field(description="The solver's certificate.")
    digest: str | None = Field(default=None, pattern=_DIGEST.pattern,
                               description="sha256 of the canonical rendering of the other fields (tamper evidence).")

    @property
    def major(self) -> int:
        return int(self.format_version.split(".")[0])


# ---------------------------------------------------------------------------------- emitting
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_RESERVED = {"null", "true", "false", "yes", "no", "on", "off", "y", "n", "~"}


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    s = str(v)
    if _PLAIN.match(s) and s.lower() not in _RESERVED:
        return s
    return json.dumps(s, ensure_ascii=False)


def _flow(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return _scalar(v)


def _dump(data: dict) -> dict:
    """The document as plain data, with None-valued optional fields and empty defaults dropped."""
    return json.loads(json.dumps(data))


def render(doc: PlanDocument, header: list[str]) -> str:
    """The plan's bytes: comment header, block mappings whose list items are one-line flow maps, and
    the digest of those mappings (``doc.digest`` is ignored: the digest is always recomputed)."""
    body = _body(doc)
    lines = [f"# {line}" if line else "#" for line in header]
    return "".join(line + "\n" for line in lines) + body + f"digest: {_digest(body)}\n"


def body_digest(doc: PlanDocument) -> str:
    """``sha256:<hex>`` of the document's canonical rendering without header and digest."""
    return _digest(_body(doc))


def _digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def _body(doc: PlanDocument) -> str:
    try:
        dumped = doc.model_dump(mode="json")
    except ValueError as e:  # a free-form field (options, notes) nested past pydantic's serialization depth
        raise InputError(f"error[value]: the plan cannot be written out: {e}") from None
    d = _dump(dumped)
    out: list[str] = []
    for key in ("format_version", "generator", "name"):
        out.append(f"{key}: {json.dumps(d[key]) if key == 'format_version' else _scalar(d[key])}")
    out.append(f"objective: {_flow({k: v for k, v in d['objective'].items() if v is not None})}")
    out.append(f"mode: {d['mode']}")
    out.append("inputs:" if d["inputs"] else "inputs: []")
    out += [f"  - {_flow({k: v for k, v in i.items() if v is not None})}" for i in d["inputs"]]
    out.append(f"data_args: {_flow(d['data_args'])}")
    out.append("mesh:")
    out.append(f"  axis_names: {_flow(d['mesh']['axis_names'])}")
    out.append(f"  axis_sizes: {_flow(d['mesh']['axis_sizes'])}")
    out.append("  devices:" if d["mesh"]["devices"] else "  devices: []")
    out += [f"    - {_scalar(x)}" for x in d["mesh"]["devices"]]
    out.append(f"schedule: {_flow(d['schedule'])}")
    out.append("stages:" if d["stages"] else "stages: []")
    for st in d["stages"]:
        st = {k: v for k, v in st.items()
              if not (k == "mesh" and v is None) and not (k in ("layers", "remat") and not v)}
        out.append(f"  - {_flow(st)}")
    out.append("shardings:")
    if d["shardings"].get("zero"):
        out.append(f"  zero: {d['shardings']['zero']}")
    for part in ("args", "values"):
        entries = d["shardings"][part]
        if not entries:
            out.append(f"  {part}: []")
            continue
        out.append(f"  {part}:")
        for entry in entries:
            kept = {k: v for k, v in entry.items()
                    if v is not None and not (k == "name" and v == "") and not (part == "args" and k == "result")}
            out.append(f"    - {_flow(kept)}")
    p = d["predicted"]
    out.append("predicted:")
    for key in ("objective_ns", "step_time_ns", "bytes_moved"):
        out.append(f"  {key}: {p[key]}")
    out.append("  devices:" if p["devices"] else "  devices: []")
    out += [f"    - {_flow(x)}" for x in p["devices"]]
    if p.get("stages"):  # absent in plans written before the program model: their bytes (and digest) stay
        out.append("  stages:")
        out += [f"    - {_flow(x)}" for x in p["stages"]]
    s = d["solver"]
    out.append("solver:")
    for key in ("name", "version", "backend", "status", "objective_ns", "bound_ns", "gap"):
        out.append(f"  {key}: {_scalar(s[key]) if key != 'version' else json.dumps(s[key])}")
    out.append(f"  options: {_flow(dict(sorted(s['options'].items())))}")
    out.append(f"  message: {json.dumps(s['message'], ensure_ascii=False)}")
    if s.get("remarks"):
        out.append(f"  remarks: {json.dumps(s['remarks'], ensure_ascii=False)}")
    return "\n".join(out) + "\n"


def _structure_problem(data: Any) -> str | None:
    """What makes a loaded YAML value unusable as a plan — it contains itself (``&a [*a]``) or a string
    with a lone surrogate (a ``\\udc80`` escape) — or None; each shared node is walked once."""
    done: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    open_: set[int] = set()
    while stack:
        node, leaving = stack.pop()
        if isinstance(node, str) and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return "error[encoding]: a string of the plan holds a lone surrogate (not a character)"
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        if leaving:
            open_.discard(key)
            done.add(key)
            continue
        if key in open_:
            return "error[yaml-syntax]: the plan refers to itself through a YAML alias"
        if key in done:
            continue
        open_.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in ([*node, *node.values()] if isinstance(node, dict) else node))
    return None


def parse(text: str, file: str) -> PlanDocument:
    """Parse plan bytes; refuse another major format version; InputError on anything malformed."""
    from pydantic import ValidationError
    from ruamel.yaml.error import YAMLError

    from planmap.spec.yamlpos import load_yaml

    try:
        data = load_yaml(text)
    except YAMLError as e:
        raise InputError(f"{file}: not a valid plan file (YAML error: {str(e).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(f"{file}: error[yaml-syntax]: the plan nests too deeply to be a plan") from None
    except (TypeError, ValueError) as e:  # e.g. a list as a mapping key
        raise InputError(f"{file}: error[yaml-syntax]: not a valid plan file ({e})") from None
    problem = _structure_problem(data)
    if problem is not None:
        raise InputError(f"{file}: {problem}")
    if not isinstance(data, dict) or "format_version" not in data:
        raise InputError(f"{file}: not a planmap plan (no format_version)", code="plan-format")
    version = str(data["format_version"])
    major = FORMAT_VERSION.split(".")[0]
    if not re.match(r"^\d+\.\d+$", version) or version.split(".")[0] != major:
        raise InputError(f"{file}: plan format {version} is not readable by this planmap (reads {major}.x); "
                         f"{'upgrade planmap' if version > FORMAT_VERSION else 're-solve the spec'}",
                         code="plan-format")
    try:
        return PlanDocument.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{file}: invalid plan: {where}: {first['msg']} ({e.error_count()} error(s))",
                         code="plan-schema") from None

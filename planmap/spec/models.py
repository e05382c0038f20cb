"""The user's documents — ``PlanSpec`` and ``Cluster`` — as frozen pydantic v2 models.

Conventions (Kubernetes API style): camelCase keys, ``apiVersion``/``kind``/``metadata``/``spec``,
lists of named objects rather than maps, string enums rather than booleans, explicit units.
Every field carries a description because the JSON Schemas in ``schemas/`` are generated from
these models and are what editors show while a spec is typed.

Cross-field rules (duplicate names, references between sections, files that must exist) are
model validators that raise :class:`pydantic_core.PydanticCustomError` whose ``ctx["at"]`` is
the path *relative to the model* of the offending value, so the loader can point at its line.
"""

from __future__ import annotations

import enum
import fnmatch
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from planmap import units
from planmap.io import is_regular_file
from planmap.vocabulary import Mode, ObjectiveKind, Schedule, ThroughputVariant

API_VERSION = "planmap.dev/v1alpha1"

__all__ = [
    "API_VERSION",
    "Bytes",
    "Bandwidth",
    "FlopRate",
    "Duration",
    "DeviceKind",
    "DType",
    "PeakFlops",
    "SubgraphOutputs",
    "DeviceType",
    "HostDevice",
    "Host",
    "Link",
    "Links",
    "ClusterBody",
    "Cluster",
    "Metadata",
    "ModelFormat",
    "Mode",
    "Optimizer",
    "ArgumentRoles",
    "ModelSource",
    "ObjectiveKind",
    "ThroughputVariant",
    "Objective",
    "SolverConfig",
    "Placement",
    "Schedule",
    "Replication",
    "Coarsening",
    "Pin",
    "Constraints",
    "PlanSpecBody",
    "PlanSpec",
]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=False,
        use_attribute_docstrings=False,
    )


def _fail(code: str, message: str, *, at: tuple = (), got: Any = None, expected: str | None = None):
    """Raise a positioned cross-field error (see module docstring); ``{got!r}`` in message is filled in."""
    raise PydanticCustomError(code, message.format(got=got), {"at": at, "got": got, "expected": expected})


# --------------------------------------------------------------------------------------- units
def _parsed_by(parser) -> BeforeValidator:
    """Validation of a unit field: the parser's integer, or a "unit" error that names the value."""
    def validate(value: Any) -> int:
        try:
            return parser(value)
        except units.UnitError as e:
            raise PydanticCustomError("unit", "{message}", {"message": str(e), "expected": e.expected,
                                                            "got": value}) from None

    return BeforeValidator(validate)


def _physical(what: str, lo: float, hi: float, show) -> AfterValidator:
    """A physical-range check of a parsed unit field: a typo such as ``0.1B/s`` or ``80EiB`` is an error
    at the value (with the range), not a division by zero or an absurd plan later."""
    def check(value: int) -> int:
        if not lo <= value <= hi:
            raise PydanticCustomError("range", "{message}", {
                "message": f"{what} {show(value)} is outside the physical range", "got": value,
                "expected": f"{show(lo)} to {show(hi)}"})
        return value

    return AfterValidator(check)


def _si(unit: str):
    """Format a number with an SI prefix and ``unit`` (e.g. 1 kB/s, 100 PB/s)."""
    def show(value: float) -> str:
        for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if value >= factor:
                return f"{value / factor:g} {prefix}{unit}"
        return f"{value:g} {unit}"

    return show


def _unit_schema(pattern: str, examples: list[str], description: str) -> WithJsonSchema:
    """JSON Schema of a unit field: a non-negative integer or a string matching ``pattern``."""
    return WithJsonSchema({
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": pattern}],
        "examples": examples,
        "description": description,
    })


_NUM = r"^\s*[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?\s*"
# Static aliases (not built by a function) so that type checkers see them as ``int`` fields.
Bytes = Annotated[int, _parsed_by(units.parse_bytes),
                  _unit_schema(_NUM + r"([kKMGTPE]i?)?B?\s*$", ["80GiB", "16GB"],
                               "A size in bytes: an integer, or a string with a unit (80GiB, 16GB, 512MiB).")]
Bandwidth = Annotated[int, _parsed_by(units.parse_bandwidth),
                      _unit_schema(_NUM + r"([kKMGTPE]i?)?(B/s|b/s|bps|Bps)?\s*$", ["900GB/s", "400Gb/s"],
                                   "Bytes per second: 900GB/s, 64GiB/s, or bits: 400Gb/s.")]
FlopRate = Annotated[int, _parsed_by(units.parse_flops),
                     _unit_schema(_NUM + r"([kKMGTPE])?(FLOP/s|FLOPS|FLOPs)?\s*$", ["989TFLOP/s", "67TFLOPS"],
                                  "Floating-point operations per second: 989TFLOP/s.")]
Duration = Annotated[int, _parsed_by(units.parse_duration),
                     _unit_schema(_NUM + r"(ns|us|µs|ms|s|sec|min|h)?\s*$", ["2us", "60s"],
                                  "A duration: 2us, 1.5ms, 60s, 10min; a bare number is seconds. Stored in ns.")]


def _parse_fraction(value: Any) -> float:
    try:
        return units.parse_fraction(value)
    except units.UnitError as e:
        raise PydanticCustomError("unit", "{message}", {"message": str(e), "expected": e.expected,
                                                        "got": value}) from None


Fraction = Annotated[float, BeforeValidator(_parse_fraction), WithJsonSchema(
    {"anyOf": [{"type": "number", "minimum": 0, "exclusiveMaximum": 1},
               {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]*)?\s*%\s*$"}],
     "examples": ["10%", 0.1], "description": "A fraction in [0, 1): 0.1 or 10%."})]

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?$")]


# ------------------------------------------------------------------------------------- cluster
class DeviceKind(enum.StrEnum):
    """What a device is; decides its execution semantics in the cost model."""

    GPU = "gpu"
    TPU = "tpu"
    CPU = "cpu"
    ACCELERATOR = "accelerator"


class DType(enum.StrEnum):
    F64 = "f64"
    F32 = "f32"
    TF32 = "tf32"
    BF16 = "bf16"
    F16 = "f16"
    FP8 = "fp8"
    INT8 = "int8"


class SubgraphOutputs(enum.StrEnum):
    """Where a device keeps the outputs of one subgraph for the next subgraph it runs."""

    DEVICE_MEMORY = "device-memory"
    HOST_MEMORY = "host-memory"

# Hardware quantities within physical ranges (a typo is caught at its line:col, with the range).
PhysicalBandwidth = Annotated[Bandwidth, _physical("bandwidth", 1e3, 1e17, _si("B/s"))]  # 1 kB/s .. 100 PB/s
PhysicalMemory = Annotated[Bytes, _physical("memory", 1e3, 1e18, _si("B"))]
PhysicalFlopRate = Annotated[FlopRate, _physical("peak rate", 1e6, 1e21, _si("FLOP/s"))]
PhysicalLatency = Annotated[Duration, _physical("latency", 0, 1e10, _si("ns"))]  # at most 10 s
PhysicalOverhead = Annotated[Duration, _physical("op overhead", 0, 1e9, _si("ns"))]  # at most 1 s


class PeakFlops(_Model):
    dtype: DType = Field(description="Element type of the operands this peak applies to.")
    rate: PhysicalFlopRate = Field(description="Peak rate for that dtype, e.g. 989TFLOP/s.")


class DeviceType(_Model):
    name: Name = Field(description="Name that hosts use to refer to this device type (e.g. h100).")
    kind: DeviceKind = Field(description="gpu, tpu, cpu or accelerator. CPUs have host memory and run "
                                         "independent operators in parallel; the others run one at a time.")
    memory: PhysicalMemory | None = Field(default=None, description="Device memory, e.g. 80GiB. Required for every "
                                                           "kind but cpu (a CPU without it has no limit).")
    memory_bandwidth: PhysicalBandwidth = Field(description="Peak memory bandwidth, e.g. 3350GB/s.")
    peak_flops: list[PeakFlops] = Field(min_length=1, description="Peak compute rate per dtype; an op whose "
                                        "dtype is not listed uses the slowest listed rate.")
    efficiency: float = Field(default=0.6, gt=0, le=1, description="Fraction of the roofline that operators "
                              "reach in practice (calibrate from a profile).")
    op_overhead: PhysicalOverhead = Field(default=0, description="Fixed time per operator (kernel launch), e.g. 5us.")
    half_efficiency_flops: float = Field(default=0, ge=0, le=1e18, description="Small-size penalty: a kernel of F "
                                         "FLOPs reaches efficiency x F / (F + this), i.e. takes (F + this) / (peak x "
                                         "efficiency); the fixed part does not shrink when a stage is replicated or "
                                         "sharded. 0: no penalty. Calibrate with bench/efficiency.py.")
    subgraph_outputs: SubgraphOutputs | None = Field(default=None, description="device-memory: consecutive "
                                                     "subgraphs on this device share data in place; host-memory: "
                                                     "each subgraph is a call whose boundary tensors go through host "
                                                     "memory (Tarnawski et al.). Default: host-memory for kind "
                                                     "accelerator, device-memory otherwise.")

    @model_validator(mode="after")
    def _check(self) -> DeviceType:
        seen: dict[str, int] = {}
        for i, p in enumerate(self.peak_flops):
            if p.dtype in seen:
                _fail("duplicate-name", "dtype {got!r} is listed twice in peakFlops", at=("peakFlops", i, "dtype"),
                      got=str(p.dtype), expected="one entry per dtype")
            seen[p.dtype] = i
        if self.memory is None and self.kind != DeviceKind.CPU:
            _fail("missing-field", "device type {got!r} of kind '" + str(self.kind) + "' needs 'memory'",
                  at=(), got=self.name, expected="memory: e.g. 80GiB")
        return self


class HostDevice(_Model):
    name: Name = Field(description="Device name within the host; devices are numbered name0, name1, ...")
    type: Name = Field(description="Name of a deviceTypes entry.")
    count: int = Field(default=1, ge=1, le=4096, description="How many such devices the host has.")


class Host(_Model):
    name: Name = Field(description="Host name; hosts are numbered name0, name1, ... when count > 1.")
    count: int = Field(default=1, ge=1, le=4096, description="How many identical hosts of this shape.")
    devices: list[HostDevice] = Field(min_length=1, description="The devices of one such host.")
    intra_host: Link | None = Field(default=None, description="This host's device-to-device link, when it "
                                    "differs from the cluster's links.intraHost (e.g. an older GPU generation).")

    @model_validator(mode="after")
    def _check(self) -> Host:
        seen: set[str] = set()
        for i, d in enumerate(self.devices):
            if d.name in seen:
                _fail("duplicate-name", "device name {got!r} is used twice in host '" + self.name + "'",
                      at=("devices", i, "name"), got=d.name, expected="unique device names per host")
            seen.add(d.name)
        return self


class Link(_Model):
    bandwidth: PhysicalBandwidth = Field(description="Bandwidth of one direction, e.g. 450GB/s or 400Gb/s.")
    latency: PhysicalLatency = Field(default=0, description="Per-transfer latency, e.g. 2us.")


class Links(_Model):
    intra_host: Link | None = Field(default=None, description="Direct device-to-device link inside a host "
                                    "(NVLink, ICI). Absent: devices exchange data through host memory.")
    inter_host: Link | None = Field(default=None, description="Network between hosts (per device). "
                                    "Required when there is more than one host.")
    host_device: Link | None = Field(default=None, description="Link between host memory and a device "
                                     "(PCIe). Required when data moves through host memory.")


MAX_DEVICES = 65_536  # per cluster: beyond it the (D, D) transfer matrices alone need tens of GiB


class ClusterBody(_Model):
    device_types: list[DeviceType] = Field(min_length=1, description="The kinds of devices in the cluster.")
    hosts: list[Host] = Field(min_length=1, description="Host shapes; a host shape may be repeated (count).")
    links: Links = Field(default_factory=Links, description="Interconnect bandwidths and latencies.")

    @model_validator(mode="after")
    def _check(self) -> ClusterBody:
        types: dict[str, DeviceType] = {}
        for i, t in enumerate(self.device_types):
            if t.name in types:
                _fail("duplicate-name", "device type {got!r} is defined twice", at=("deviceTypes", i, "name"),
                      got=t.name, expected="unique deviceTypes names")
            types[t.name] = t
        host_names: set[str] = set()
        for h, host in enumerate(self.hosts):
            if host.name in host_names:
                _fail("duplicate-name", "host name {got!r} is used twice", at=("hosts", h, "name"), got=host.name,
                      expected="unique host names")
            host_names.add(host.name)
            for d, dev in enumerate(host.devices):
                if dev.type not in types:
                    _fail("reference", "unknown device type {got!r}", at=("hosts", h, "devices", d, "type"),
                          got=dev.type, expected="one of " + ", ".join(repr(n) for n in types))
        n_devices = sum(h.count * sum(d.count for d in h.devices) for h in self.hosts)
        if n_devices > MAX_DEVICES:
            _fail("range", "the cluster has {got:,} devices, more than planmap plans for", at=("hosts",),
                  got=n_devices, expected=f"at most {MAX_DEVICES:,} devices")
        n_hosts = sum(h.count for h in self.hosts)
        if n_hosts > 1 and self.links.inter_host is None:
            _fail("missing-field", "a cluster of {got} hosts needs links.interHost", at=("links",), got=n_hosts,
                  expected="interHost: {bandwidth: ..., latency: ...}")
        for host in self.hosts:
            kinds = [types[d.type].kind for d in host.devices for _ in range(d.count)]
            accel = sum(k != DeviceKind.CPU for k in kinds)
            has_cpu = any(k == DeviceKind.CPU for k in kinds)
            direct = host.intra_host or self.links.intra_host
            if self.links.host_device is None and ((accel and has_cpu) or (accel > 1 and direct is None)):
                _fail("missing-field", "host {got!r} moves data between host memory and devices, "
                      "so links.hostDevice is required", at=("links",), got=host.name,
                      expected="hostDevice: {bandwidth: ..., latency: ...}")
        return self

    def device_names(self) -> list[str]:
        """Every device of the cluster, in the canonical order (hosts, then devices, then index)."""
        out: list[str] = []
        for host in self.hosts:
            for hi in range(host.count):
                for dev in host.devices:
                    out.extend(f"{host.name}{hi}/{dev.name}{di}" for di in range(dev.count))
        return out


class Metadata(_Model):
    name: Name = Field(description="Name of this document (letters, digits, '-', '_', '.').")
    description: str | None = Field(default=None, description="Free text for people reading the spec.")


class Cluster(_Model):
    """A reusable cluster description, referenced by path from PlanSpecs."""

    api_version: Literal["planmap.dev/v1alpha1"] = Field(description="Schema version of this document.")
    kind: Literal["Cluster"] = Field(description="Document kind.")
    metadata: Metadata = Field(description="Name and description.")
    spec: ClusterBody = Field(description="Device types, hosts and links.")


# --------------------------------------------------------------------------------------- model
class ModelFormat(enum.StrEnum):
    AUTO = "auto"
    STABLEHLO = "stablehlo"
    VHLO = "vhlo"
    EXPORTED = "exported"
    MLIRBC = "mlirbc"
    OPGRAPH = "opgraph"


class Optimizer(enum.StrEnum):
    """Optimizer whose state is kept per parameter in training (memory only)."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"


Selector = Annotated[int | str, Field(description="Argument index, or a glob on the argument name.")]


class ArgumentRoles(_Model):
    data: list[Selector] = Field(default_factory=list, description="Arguments that carry the batch "
                                 "(split across microbatches and data-parallel replicas).")
    parameters: list[Selector] = Field(default_factory=list, description="Arguments that are model state "
                                       "(weights), resident on the devices that use them.")


class ModelSource(_Model):
    source: str = Field(min_length=1, description="Path of the model artifact, relative to this spec file.")
    format: ModelFormat = Field(default=ModelFormat.AUTO, description="Artifact format; auto detects it from "
                                "the file's contents.")
    mode: Mode = Field(default=Mode.INFERENCE, description="inference, or training (the artifact is a "
                       "value-and-grad step; gradients and optimizer state take memory).")
    entry: str = Field(default="main", description="Entry function of the StableHLO module.")
    global_batch: int | None = Field(default=None, ge=1, description="Samples per step across all devices "
                                     "= microbatch size x microbatches x data-parallel replicas.")
    microbatches: int | Literal["auto"] | list[int] = Field(
        default=1, description="Microbatches per step (each one run of the artifact): a number >= 1; auto "
        "(with globalBatch: globalBatch / the artifact's batch; without: the planner chooses from 1, 2, 4, 8, 16, 32); "
        "or a list of numbers the planner chooses from, e.g. [1, 2, 4, 8] (by the time per sample under memory; "
        "ties within 1%: the smallest).")
    arguments: ArgumentRoles | None = Field(default=None, description="Which @main arguments are data and "
                                            "which are parameters. Default: from JAX argument names "
                                            "(params/weights are parameters), else the first is data.")
    optimizer: Optimizer = Field(default=Optimizer.ADAM, description="Optimizer state kept in training.")
    master_dtype: Literal["f32", "f64", "bf16", "f16"] | None = Field(
        default=None, description="Mixed-precision training: the dtype of the master weights and the optimizer "
        "state (e.g. f32 for bf16 parameters); a parameter narrower than it also keeps a master copy. "
        "Default: no master copy, optimizer state in the parameter dtype.")
    loop_trip_count: int = Field(default=1, ge=1, description="Trip count assumed for while loops whose bound "
                                 "is not static.")

    @field_validator("microbatches")
    @classmethod
    def _positive(cls, v):
        if isinstance(v, list) and not v:
            raise PydanticCustomError("value", "microbatches lists no choice",
                                      {"got": v, "expected": "a non-empty list of integers >= 1"})
        if any(m < 1 for m in (v if isinstance(v, list) else [v] if isinstance(v, int) else [])):
            raise PydanticCustomError("value", "microbatches must be at least 1",
                                      {"got": v, "expected": "an integer >= 1, a list of them, or 'auto'"})
        return v

    @field_validator("source")
    @classmethod
    def _exists(cls, v: str, info: ValidationInfo):
        base = (info.context or {}).get("base_dir")
        if base is not None:
            p = Path(base) / v
            if not is_regular_file(p):
                raise PydanticCustomError("file-not-found", f"model source {v!r} does not exist (looked in "
                                          f"{Path(base)})", {"got": v, "expected": "a path relative to the "
                                          "spec file"})
        return v

    @model_validator(mode="after")
    def _check(self) -> ModelSource:
        mb = self.microbatches
        if self.global_batch is not None and isinstance(mb, int) and self.global_batch % mb:
            _fail("value", "globalBatch {got} is not divisible by microbatches " + str(mb), at=("globalBatch",),
                  got=self.global_batch, expected="globalBatch = microbatch size x microbatches x replicas")
        if self.global_batch is not None and isinstance(mb, list):
            _fail("value", "microbatches as a list lets the planner choose the count, but globalBatch fixes it "
                  "(globalBatch / the artifact's batch): give one of them", at=("microbatches",), got=mb,
                  expected="a number or auto with globalBatch; a list without it")
        return self


# ----------------------------------------------------------------------------------- objective
class Objective(_Model):
    kind: ObjectiveKind = Field(description="latency: one sample through the model as fast as possible; "
                                "throughput: pipelined samples per second (minimise the busiest device).")
    variant: ThroughputVariant = Field(default=ThroughputVariant.MAX_LOAD, description="Throughput in "
                                       "training: max-load (fw + bw per device) or max-fw-plus-max-bw.")


class SolverConfig(_Model):
    name: str = Field(default="auto", pattern=r"^[a-z][a-z0-9-]*$", description="Solver: auto, ip, dp, "
                      "greedy, even, metis, local-search, pipedream, ... (`planmap solvers` lists them).")
    backend: str = Field(default="highs", pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="MIP backend for "
                         "the ip solvers: any Pyomo solver name (highs, cbc, glpk, gurobi, cplex, scip).")
    time_limit: Duration = Field(default=60 * 10**9, description="Wall-clock limit of the solve, e.g. 60s.")
    rel_gap: float = Field(default=0.01, ge=0, lt=1, description="Stop when the relative optimality gap is "
                           "at most this (0.01 = 1%).")
    threads: int = Field(default=1, ge=1, le=1024, description="Threads the backend may use.")
    seed: int = Field(default=0, ge=0, description="Random seed (same seed, same plan).")
    options: dict[str, str | int | float | bool] = Field(default_factory=dict, description="Backend options "
                                                         "that tune the search (limits, gaps, threads, tolerances, "
                                                         "heuristics, presolve, seeds), from a per-backend "
                                                         "allow-list; options that write files are refused.")

    @model_validator(mode="after")
    def _check_options(self) -> SolverConfig:
        from planmap.spec.backend_options import option_error

        for key, value in self.options.items():
            bad = option_error(self.backend, key, value)
            if bad is not None:
                _fail("option", bad[0].replace("{", "{{").replace("}", "}}"), at=("options", key), got=value,
                      expected=bad[1])
        return self


# --------------------------------------------------------------------------------- constraints
class Placement(enum.StrEnum):
    CONTIGUOUS = "contiguous"
    NON_CONTIGUOUS = "non-contiguous"


class Replication(enum.StrEnum):
    FORBID = "forbid"
    ALLOW = "allow"


class Coarsening(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    FUSE = "fuse"
    LAYERS = "layers"


class Pin(_Model):
    ops: str = Field(min_length=1, description="Glob over operator location names, e.g. '*/embed/*'.")
    device: str = Field(min_length=1, description="Glob over device names (host0/gpu3) or a device type name.")


class Constraints(_Model):
    placement: Placement = Field(default=Placement.CONTIGUOUS, description="contiguous: each device runs one "
                                 "connected piece of the graph; non-contiguous: up to maxSubgraphsPerDevice.")
    max_subgraphs_per_device: int = Field(default=1, ge=1, le=64, description="q: contiguous subgraphs a "
                                          "device may run one after another (non-contiguous placement).")
    max_stages: int | None = Field(default=None, ge=1, description="Upper bound on pipeline stages.")
    memory_headroom: Fraction = Field(default=0.1, description="Share of each device's memory kept free.")
    remat: bool | Literal["auto"] = Field(
        default=False, description="Activation checkpointing (training): keep only the activations that leave "
        "each repeated layer, and run the layer's forward again in its backward (its forward nodes cost twice). "
        "Layers come from the model's repeated structure. auto: the planner decides per stage: a stage recomputes "
        "only where it does not fit memory without (recorded in the plan's stages).")
    schedule: Schedule = Field(default=Schedule.AUTO, description="Pipeline schedule: gpipe, 1f1b or auto "
                               "(the planner chooses: 1f1b in training, where it dominates gpipe — the same step "
                               "time, less memory; gpipe in inference, where the two are the same plan).")
    replication: Replication = Field(default=Replication.FORBID, description="allow: a pipeline stage may be "
                                     "replicated over several devices (data parallel within the stage).")
    coarsening: Coarsening = Field(default=Coarsening.AUTO, description="Graph coarsening before solving.")
    pins: list[Pin] = Field(default_factory=list, description="Operators that must run on given devices.")

    @model_validator(mode="after")
    def _check(self) -> Constraints:
        if self.placement == Placement.CONTIGUOUS and self.max_subgraphs_per_device > 1:
            _fail("value", "maxSubgraphsPerDevice {got} needs placement: non-contiguous",
                  at=("maxSubgraphsPerDevice",), got=self.max_subgraphs_per_device,
                  expected="1 with contiguous placement")
        return self


class CostConfig(_Model):
    profile: str | None = Field(default=None, description="Profile file written by `planmap profile` for this "
                                "model (path relative to this file): measured node times replace the roofline "
                                "on devices of the profiled kind; its sha256 is a plan input.")

    @field_validator("profile")
    @classmethod
    def _exists(cls, v: str | None, info: ValidationInfo):
        base = (info.context or {}).get("base_dir")
        if v is not None and base is not None and not is_regular_file(Path(base) / v):
            raise PydanticCustomError("file-not-found", f"profile {v!r} does not exist (looked in {Path(base)})",
                                      {"got": v, "expected": "a path relative to the spec file"})
        return v


# ------------------------------------------------------------------------------------ planspec
class PlanSpecBody(_Model):
    model: ModelSource = Field(description="The model artifact and how it is run.")
    cluster: ClusterBody = Field(
        description="The cluster: a path to a Cluster document (relative to this file) or one inline.",
        json_schema_extra=lambda s: s.update(anyOf=[{"type": "string", "description": "Path of a Cluster "
                                                     "document, relative to this file."}, dict(s)]),
    )
    objective: Objective = Field(description="What the plan optimises.")
    solver: SolverConfig = Field(default_factory=SolverConfig, description="How the plan is searched for.")
    constraints: Constraints = Field(default_factory=Constraints, description="Restrictions on the plan.")
    cost: CostConfig = Field(default_factory=CostConfig, description="Calibration of the cost model.")

    @model_validator(mode="after")
    def _check(self) -> PlanSpecBody:
        if self.objective.kind == ObjectiveKind.LATENCY and self.model.mode == Mode.TRAINING:
            _fail("value", "objective latency is defined for inference only", at=("objective", "kind"),
                  got="latency", expected="throughput for training models")
        names = self.cluster.device_names()
        type_names = {t.name for t in self.cluster.device_types}
        for i, pin in enumerate(self.constraints.pins):
            if pin.device not in type_names and not any(fnmatch.fnmatchcase(n, pin.device) for n in names):
                _fail("reference", "pin device {got!r} matches no device of the cluster",
                      at=("constraints", "pins", i, "device"), got=pin.device,
                      expected="a device name like " + repr(names[0]) + " or a device type")
        return self


class PlanSpec(_Model):
    """What to plan: a model artifact, a cluster, an objective, a solver and constraints."""

    api_version: Literal["planmap.dev/v1alpha1"] = Field(description="Schema version of this document.")
    kind: Literal["PlanSpec"] = Field(description="Document kind.")
    metadata: Metadata = Field(description="Name and description.")
    spec: PlanSpecBody = Field(description="The plan's inputs.")

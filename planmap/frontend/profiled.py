"""Profiled op graphs: per-operator times measured on real hardware, as JSON (``planmap.opgraph/v1``).

When a model is not a StableHLO artifact, or when measured times beat the roofline estimate (an
FPGA, a CPU whose kernels are not FLOP-bound), the user supplies the graph with measured costs.
This is the second front end of DESIGN.md and the input format of Tarnawski et al. generalised:
any number of device kinds or types (``time: {"cpu": 1.2, "a100": 0.1}``; a missing entry means the
node cannot run there), a time unit, memory per node, colocation classes, forward/backward flags,
and edges with bytes and optionally a measured transfer time. It loads into the same
:class:`~planmap.graph.OpGraph` the StableHLO front end produces, so every solver accepts it.

Mapping: nodes are sorted topologically (ties keep file order; a cycle is an error). Each distinct
``(src, bytes, transferTime)`` among a node's out-edges is one value (usually a node has one output
whose every consumer gets the same tensor). Times are converted to seconds.

:func:`from_tarnawski` converts the original format (``nodes: {id, cpuLatency, fpgaLatency, size,
colorClass, isBackwardNode, supportedOnFpga}``, ``edges: {sourceId, destId, cost}``, latencies and
costs in milliseconds, ``size`` in bytes): ``cpuLatency`` -> ``measured["cpu"]``, ``fpgaLatency`` ->
``measured["accelerator"]`` (NaN where ``supportedOnFpga`` is false), ``size`` -> state bytes,
``cost`` -> the transfer time of the source node's single output. The paper counts an accelerator's
memory as the sum of its nodes' ``size`` (activations are already in the sizes), so the import sets
``memoryModel: node-sizes`` and reproduces the paper's problem exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from planmap.errors import InputError
from planmap.graph import OpGraph
from planmap.vocabulary import MemoryModel

__all__ = ["FORMAT", "ProfiledNode", "ProfiledEdge", "ProfiledGraph", "to_graph", "from_graph", "dumps", "loads",
           "load", "from_tarnawski"]

FORMAT = "planmap.opgraph/v1"
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
NodeId = int | str


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class ProfiledNode(_Model):
    """One operator (or layer) with its measured costs."""

    id: NodeId = Field(description="Unique node id (integer or string); edges refer to it.")
    name: str = Field(default="", description="Readable name, e.g. a layer or op name stack.")
    kind: str = Field(default="profiled", description="Operator kind, e.g. conv2d, matmul.")
    time: dict[str, float] = Field(default_factory=dict, description="Measured execution time per device type "
                                   "name or device kind (cpu, gpu, accelerator, ...) in timeUnit. A device "
                                   "missing here cannot run this node.")
    memory_bytes: int = Field(default=0, ge=0, description="Memory the node keeps resident on the device that "
                              "runs it (weights, optimizer state), in bytes.")
    flops: float = Field(default=0.0, ge=0, description="Floating-point operations (informational when times "
                         "are measured).")
    bytes_accessed: float = Field(default=0.0, ge=0, description="Bytes read and written (informational).")
    colocation: int | str | None = Field(default=None, description="Colocation class: nodes sharing a class "
                                         "must run on the same device (e.g. a layer's forward and backward).")
    backward: bool = Field(default=False, description="True for a node of the backward pass (training).")
    layer: int | None = Field(default=None, ge=0, description="Repeated-layer index, if known.")


class ProfiledEdge(_Model):
    """A tensor sent from one node to another."""

    src: NodeId = Field(description="Id of the producing node.")
    dst: NodeId = Field(description="Id of the consuming node.")
    bytes: int = Field(default=0, ge=0, description="Size of the tensor in bytes.")
    transfer_time: float | None = Field(default=None, ge=0, description="Measured time to transfer it between "
                                        "devices, in timeUnit; omit to derive it from bytes and link bandwidth.")


class ProfiledGraph(_Model):
    """A profiled operator graph (``planmap.opgraph/v1``)."""

    format: Literal["planmap.opgraph/v1"] = Field(description="Document format and version.")
    name: str = Field(default="profiled", description="Name of the model.")
    time_unit: Literal["s", "ms", "us", "ns"] = Field(default="s", description="Unit of every time in this "
                                                      "document.")
    nodes: list[ProfiledNode] = Field(description="Operators, in any order (edges must form a DAG).")
    edges: list[ProfiledEdge] = Field(default_factory=list, description="Tensors between operators.")
    memory_model: MemoryModel = Field(default=MemoryModel.WORKING_SET, description="How a device's memory is "
                                      "counted: 'working-set' adds to the nodes' memoryBytes the largest working "
                                      "set (inputs and outputs) of a node and, in training, the activations stashed "
                                      "per in-flight microbatch; 'node-sizes' takes each node's memoryBytes as its "
                                      "whole footprint (Tarnawski et al.'s semantics: the sum over a device's "
                                      "nodes, parameters once per device).")
    meta: dict[str, Any] = Field(default_factory=dict, description="Free-form provenance (profiler, hardware).")


def _topological(n: int, src: list[int], dst: list[int], names: list[str], where: str) -> list[int]:
    """Kahn's algorithm, smallest file position first, so a topologically sorted file keeps its order."""
    import heapq

    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src, dst, strict=True):
        succ[s].append(d)
        indeg[d] += 1
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for d in succ[i]:
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(heap, d)
    if len(order) < n:
        stuck = [names[i] for i in range(n) if indeg[i] > 0][:5]
        raise InputError(f"{where}: the edges form a cycle (through nodes {', '.join(map(repr, stuck))}); an op "
                         f"graph must be acyclic")
    return order


def to_graph(doc: ProfiledGraph, *, where: str = "<profiled graph>") -> OpGraph:
    """The OpGraph of a validated profiled-graph document."""
    index: dict[Any, int] = {}
    for i, node in enumerate(doc.nodes):
        if node.id in index:
            raise InputError(f"{where}: node id {node.id!r} appears twice")
        index[node.id] = i
    src, dst = [], []
    for j, e in enumerate(doc.edges):
        for end in (e.src, e.dst):
            if end not in index:
                raise InputError(f"{where}: edge {j} refers to node {end!r}, which is not in nodes")
        if e.src == e.dst:
            raise InputError(f"{where}: edge {j} goes from node {e.src!r} to itself")
        src.append(index[e.src])
        dst.append(index[e.dst])
    names = [str(nd.id) for nd in doc.nodes]
    order = _topological(len(doc.nodes), src, dst, names, where)
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    nodes = [doc.nodes[i] for i in order]
    unit = _UNIT_SECONDS[doc.time_unit]
    devices = sorted({d for nd in nodes for d in nd.time})
    measured = {d: np.array([nd.time[d] * unit if d in nd.time else np.nan for nd in nodes]) for d in devices}
    classes: dict[Any, int] = {}
    colocation = [-1 if nd.colocation is None else classes.setdefault(nd.colocation, len(classes)) for nd in nodes]
    # values: one per distinct (producer, bytes, transfer time)
    value_of: dict[tuple, int] = {}
    v_node: list[int] = []
    v_index: list[int] = []
    v_bytes: list[int] = []
    v_time: list[float] = []
    edges: set[tuple[int, int]] = set()
    per_node: dict[int, int] = {}
    for e, s, d in zip(doc.edges, src, dst, strict=True):
        ps = int(pos[s])
        key = (ps, e.bytes, e.transfer_time)
        v = value_of.get(key)
        if v is None:
            v = value_of[key] = len(v_node)
            v_node.append(ps)
            v_index.append(per_node.get(ps, 0))
            per_node[ps] = per_node.get(ps, 0) + 1
            v_bytes.append(e.bytes)
            v_time.append(np.nan if e.transfer_time is None else e.transfer_time * unit)
        edges.add((int(pos[d]), v))
    pairs = sorted(edges)
    order_v = np.argsort(v_node, kind="stable")  # values by producer: ids increase with node ids
    remap = np.empty(len(v_node), np.int64)
    remap[order_v] = np.arange(len(v_node))
    out_bytes = np.zeros(len(nodes), np.int64)
    np.add.at(out_bytes, np.asarray(v_node, np.int64), np.asarray(v_bytes, np.int64))
    return OpGraph(
        name=doc.name, kind=[nd.kind for nd in nodes], op_name=[nd.name or str(nd.id) for nd in nodes],
        flops=[nd.flops for nd in nodes], bytes_accessed=[nd.bytes_accessed for nd in nodes], out_bytes=out_bytes,
        state_bytes=[nd.memory_bytes for nd in nodes], dtype=[""] * len(nodes),
        value_node=np.asarray(v_node, np.int64)[order_v], value_index=np.asarray(v_index, np.int64)[order_v],
        value_bytes=np.asarray(v_bytes, np.int64)[order_v], value_time=np.asarray(v_time, float)[order_v],
        edge_value=remap[np.asarray([v for _, v in pairs], np.int64)] if pairs else [],
        edge_dst=[d for d, _ in pairs], colocation=colocation, backward=[nd.backward for nd in nodes],
        layer=[-1 if nd.layer is None else nd.layer for nd in nodes], measured=measured,
        meta={"format": "opgraph", "source": where, "time_unit": doc.time_unit, "node_ids": [nd.id for nd in nodes],
              "memory_model": doc.memory_model, **({"profile": dict(doc.meta)} if doc.meta else {})})


def from_graph(graph: OpGraph, *, time_unit: str = "s") -> ProfiledGraph:
    """The profiled-graph document of an OpGraph (node ids are the node indices unless recorded)."""
    unit = _UNIT_SECONDS[time_unit]
    ids = graph.meta.get("node_ids") or list(range(graph.num_nodes))
    nodes = []
    for i in range(graph.num_nodes):
        times = {d: float(t[i]) / unit for d, t in graph.measured.items() if not math.isnan(t[i])}
        nodes.append(ProfiledNode(
            id=ids[i], name=graph.op_name[i], kind=graph.kind[i], time=times, memory_bytes=int(graph.state_bytes[i]),
            flops=float(graph.flops[i]), bytes_accessed=float(graph.bytes_accessed[i]),
            colocation=None if graph.colocation[i] < 0 else int(graph.colocation[i]), backward=bool(graph.backward[i]),
            layer=None if graph.layer[i] < 0 else int(graph.layer[i])))
    edges = []
    for v, d in zip(graph.edge_value.tolist(), graph.edge_dst.tolist(), strict=True):
        s = int(graph.value_node[v])
        if s < 0:
            continue  # argument uses: a profiled graph has no entry arguments
        t = graph.value_time[v]
        edges.append(ProfiledEdge(src=ids[s], dst=ids[d], bytes=int(graph.value_bytes[v]),
                                  transfer_time=None if math.isnan(t) else float(t) / unit))
    return ProfiledGraph(format=FORMAT, name=graph.name, time_unit=time_unit, nodes=nodes, edges=edges,
                         memory_model=graph.memory_model, meta=dict(graph.meta.get("profile", {})))


def dumps(graph: OpGraph, *, time_unit: str = "s") -> str:
    """JSON text of :func:`from_graph` (camelCase keys, defaults omitted, stable order)."""
    doc = from_graph(graph, time_unit=time_unit)
    return json.dumps(doc.model_dump(by_alias=True, exclude_defaults=True, mode="json"), indent=1,
                      sort_keys=True) + "\n"


def _is_tarnawski(doc: Any) -> bool:
    return (isinstance(doc, dict) and "format" not in doc and isinstance(doc.get("nodes"), list)
            and any(isinstance(n, dict) and "cpuLatency" in n for n in doc["nodes"]))


def loads(data: bytes | str, *, where: str = "<profiled graph>", name: str | None = None) -> OpGraph:
    """OpGraph from JSON text: ``planmap.opgraph/v1``, or Tarnawski et al.'s format (detected)."""
    from planmap.frontend.mlir import loads_json

    raw = data.encode() if isinstance(data, str) else data
    doc = loads_json(raw, where)
    if _is_tarnawski(doc):
        return from_tarnawski(doc, name=name or "tarnawski", where=where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"{where}: not a profiled op graph (format {got!r}; expected \"format\": \"{FORMAT}\", "
                         f"or Tarnawski et al.'s nodes/edges with cpuLatency)")
    try:
        model = ProfiledGraph.model_validate(doc)
    except ValidationError as e:
        raise InputError(f"{where}: invalid {FORMAT} document: " + "; ".join(
            f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:10])) from None
    return to_graph(model, where=where)


def load(path: str | Path) -> OpGraph:
    """OpGraph from a profiled-graph JSON file."""
    from planmap.frontend.mlir import read_bytes

    p = Path(path)
    return loads(read_bytes(p, "opgraph"), where=str(p), name=p.stem)


def from_tarnawski(doc: dict, *, name: str = "tarnawski", where: str = "<tarnawski>") -> OpGraph:
    """OpGraph from Tarnawski et al.'s input document (see module docstring)."""
    try:
        nodes = []
        for nd in doc["nodes"]:
            supported = bool(nd.get("supportedOnFpga", True))
            time = {"cpu": float(nd["cpuLatency"])}
            if supported:
                time["accelerator"] = float(nd["fpgaLatency"])
            color = nd.get("colorClass")
            nodes.append(ProfiledNode(id=int(nd["id"]), name=str(nd.get("name", "")), time=time,
                                      memory_bytes=int(round(float(nd.get("size", 0)))), colocation=color,
                                      backward=bool(nd.get("isBackwardNode", False))))
        cost: dict[int, float] = {}
        size: dict[int, int] = {}
        for e in doc.get("edges", []):
            s = int(e["sourceId"])
            cost[s] = max(cost.get(s, 0.0), float(e.get("cost", 0.0)))  # the format says: equal per source
            size[s] = max(size.get(s, 0), int(round(float(e.get("size", 0)))))
        edges = [ProfiledEdge(src=int(e["sourceId"]), dst=int(e["destId"]), bytes=size[int(e["sourceId"])],
                              transfer_time=cost[int(e["sourceId"])]) for e in doc.get("edges", [])]
        limits = {k: doc[k] for k in ("maxSizePerFPGA", "maxFPGAs", "maxCPUs") if k in doc}
        model = ProfiledGraph(format=FORMAT, name=name, time_unit="ms", nodes=nodes, edges=edges,
                              memory_model=MemoryModel.NODE_SIZES, meta={"converted_from": "tarnawski", **limits})
    except (KeyError, TypeError, ValueError, ValidationError) as e:
        raise InputError(f"{where}: invalid Tarnawski et al. input document: {e}") from None
    return to_graph(model, where=where)

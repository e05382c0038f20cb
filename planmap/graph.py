"""``OpGraph``: the operator graph every solver plans on — immutable, numpy-backed, topologically ordered.

Why this shape:

* **Nodes in topological order** (every edge goes from a lower to a higher id). Solvers then need no
  sorting, DP over ideals and list scheduling are single sweeps, and a plan's "op ranges" are
  plain integer intervals. For a StableHLO artifact, node ``i`` is the ``i``-th operation in the
  entry function's body (``func.return`` excluded), so the runtime can find it again.
* **Values, not just edges.** A tensor produced once and consumed on another device is transferred
  once per consuming device, however many consumers it has there (Tarnawski et al.). So the graph
  records SSA values (op results *and* entry arguments) with their bytes, and each use as an edge
  ``(value, consumer)``. Parameters are argument values: their memory is charged once on every
  device that uses them.
* **Columns as numpy arrays** (read-only) so cost models and solvers vectorise; per-node strings and
  shapes are tuples.
* **Coarsened graphs are OpGraphs too**, with ``members`` mapping each coarse node back to the
  original op ids, so solutions map back to every op.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from planmap.errors import InputError
from planmap.vocabulary import MemoryModel

__all__ = ["TensorType", "DimRoles", "DimMap", "Arg", "OpGraph", "GraphError", "UnionFind", "topological_order"]


class GraphError(ValueError):
    """An OpGraph was constructed from inconsistent arrays (a bug in a front end, not user input)."""


# MLIR element type -> numpy dtype name (ml_dtypes supplies bfloat16 and the float8 types)
_NP_DTYPES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
}


@dataclass(frozen=True)
class TensorType:
    """Shape and element type of one tensor (dtype in MLIR spelling: f32, bf16, i32, i1, ...).

    The front end's graphs and the runtime's view of an artifact share this type; the runtime
    allocates and checks arrays with :attr:`np_dtype`.
    """

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype of the element type; InputError when numpy has none (e.g. a token)."""
        import ml_dtypes

        name = _NP_DTYPES.get(self.dtype)
        if name is None:
            raise InputError(f"the artifact uses element type {self.dtype}, which the runtime cannot map to a "
                             "numpy dtype")
        if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            return np.dtype(getattr(ml_dtypes, name))
        return np.dtype(name)

    def __str__(self) -> str:
        return f"tensor<{'x'.join(map(str, self.shape))}{'x' if self.shape else ''}{self.dtype}>"


@dataclass(frozen=True)
class DimRoles:
    """Dimension roles of a contraction (dot_general / dot / convolution), for sharding strategies.

    Dims are indices into the operand / result shapes. For a convolution, ``lhs_batch`` holds the
    input batch dim, ``lhs_contracting``/``rhs_contracting`` the input/kernel feature dims,
    ``rhs_free`` the kernel output-feature dim, spatial dims are in ``lhs_spatial``/``rhs_spatial``.
    ``out_*`` give where each role lands in the result.
    """

    op: str  # "dot_general" | "dot" | "convolution"
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    lhs_contracting: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()
    lhs_free: tuple[int, ...] = ()
    rhs_free: tuple[int, ...] = ()
    out_batch: tuple[int, ...] = ()
    out_lhs_free: tuple[int, ...] = ()
    out_rhs_free: tuple[int, ...] = ()
    lhs_spatial: tuple[int, ...] = ()
    rhs_spatial: tuple[int, ...] = ()
    out_spatial: tuple[int, ...] = ()
    feature_group_count: int = 1
    batch_group_count: int = 1


@dataclass(frozen=True)
class DimMap:
    """How an op's result dims relate to its operands' dims — what sharding propagation needs.

    ``operands[k][j]``: the result dim that dim ``j`` of operand ``k`` becomes (-1: none — the dim is
    contracted/reduced, sliced, concatenated along, broadcast from size 1, or otherwise not carried to
    the result with the same size or as the major part of a reshaped dim).
    ``reduced``: reduction slots; each slot is a tuple with one entry per operand (an operand dim, or -1
    when that operand takes no part), e.g. a dot_general contracting pair ``(lhs_k, rhs_k)``, a reduce
    dimension ``(d, -1)`` (-1 for the init value), the vocabulary dim of an embedding gather ``(v, -1)``,
    a scatter-add's update scatter dim ``(-1, idx_dim, upd_dim)``. Sharding a slot's dims over a mesh
    axis leaves partial sums in the result (an all-reduce or reduce-scatter completes them).
    Every result of the op has the same rank and takes the same map (multi-result ops whose results
    differ in rank get no DimMap).
    """

    operands: tuple[tuple[int, ...], ...]
    reduced: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Arg:
    """An entry-function argument. ``role`` is "data" (split over the batch) or "param" (model state)."""

    index: int
    name: str
    type: TensorType
    role: str
    value: int  # id of the value this argument defines


def _ro(a: Any, dtype) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(a, dtype=dtype))
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False, init=False)
class OpGraph:
    """An immutable operator graph. Build it with keyword arguments; arrays are copied read-only.

    Node columns (length ``n``): ``kind`` (op kind, e.g. "stablehlo.dot_general"), ``name``
    (location name stack, e.g. "jit(step)/layer3/attn/dot_general"), ``flops``, ``bytes_accessed``
    (bytes read + written, for the roofline), ``out_bytes`` (sum of result bytes), ``state_bytes``
    (memory resident wherever the node is placed, e.g. a profiled node's weights or large
    constants), ``dtype`` (element type that selects the peak FLOP/s), ``outputs`` (result types),
    ``dims`` (DimRoles or None), ``colocation`` (class id, -1 = none: nodes of one class must share
    a device), ``backward`` (True for backward-pass nodes), ``layer`` (repeated-layer id, -1 = none),
    ``measured`` ({device type or kind: seconds per node, NaN = not supported there}; profiled
    graphs only). Only the original graph of a StableHLO artifact has ``operands`` (each node's
    operand value ids in operand order, duplicates kept; values a body captures are not operands)
    and ``dim_maps`` (:class:`DimMap` per node, None = a unit that runs replicated); coarsened and
    profiled graphs leave both None.

    Value columns (length ``m``): ``value_node`` (producer node, -1 for an argument),
    ``value_index`` (result number, or argument index), ``value_bytes``, ``value_time`` (measured
    transfer seconds, NaN = derive from bytes).

    Edge columns (length ``e``, one per use): ``edge_value``, ``edge_dst``.

    ``args``: entry arguments; ``results``: value ids returned by the entry function;
    ``members_indptr``/``members``: CSR of original op ids per node (identity when not coarsened);
    ``n_original``: number of ops of the original graph; ``meta``: free-form provenance (format,
    unknown op kinds, coarsening report, ...) and ``meta["memory_model"]`` (see :attr:`memory_model`).
    """

    name: str
    kind: tuple[str, ...]
    op_name: tuple[str, ...]
    flops: np.ndarray
    bytes_accessed: np.ndarray
    out_bytes: np.ndarray
    state_bytes: np.ndarray
    dtype: tuple[str, ...]
    value_node: np.ndarray
    value_index: np.ndarray
    value_bytes: np.ndarray
    edge_value: np.ndarray
    edge_dst: np.ndarray
    args: tuple[Arg, ...]
    results: np.ndarray
    outputs: tuple[tuple[TensorType, ...], ...] | None
    dims: tuple[DimRoles | None, ...] | None
    colocation: np.ndarray
    backward: np.ndarray
    layer: np.ndarray
    measured: dict[str, np.ndarray]
    value_time: np.ndarray
    members_indptr: np.ndarray
    members: np.ndarray
    n_original: int
    meta: dict[str, Any]
    operands: tuple[tuple[int, ...], ...] | None
    dim_maps: tuple[DimMap | None, ...] | None

    def __init__(self, name: str, kind: Sequence[str], op_name: Sequence[str], flops: ArrayLike,
                 bytes_accessed: ArrayLike, out_bytes: ArrayLike, state_bytes: ArrayLike, dtype: Sequence[str],
                 value_node: ArrayLike, value_index: ArrayLike, value_bytes: ArrayLike, edge_value: ArrayLike,
                 edge_dst: ArrayLike, args: Iterable[Arg] = (), results: ArrayLike = (),
                 outputs: Iterable[Iterable[TensorType]] | None = None,
                 dims: Iterable[DimRoles | None] | None = None, colocation: ArrayLike | None = None,
                 backward: ArrayLike | None = None, layer: ArrayLike | None = None,
                 measured: Mapping[str, ArrayLike] | None = None, value_time: ArrayLike | None = None,
                 members_indptr: ArrayLike | None = None, members: ArrayLike | None = None,
                 n_original: int | None = None, meta: dict[str, Any] | None = None,
                 operands: Iterable[Iterable[int]] | None = None,
                 dim_maps: Iterable[DimMap | None] | None = None) -> None:
        """Columns are accepted as any array-like and stored normalised: read-only arrays of fixed
        dtypes, tuples, and the defaults of the optional columns filled in (written out rather than
        generated, so the attributes have their stored types and the arguments their accepted ones)."""
        n = len(kind)
        s = object.__setattr__
        s(self, "name", name)
        s(self, "kind", tuple(kind))
        s(self, "op_name", tuple(op_name))
        s(self, "dtype", tuple(dtype))
        for col, val, dt in (("flops", flops, np.float64), ("bytes_accessed", bytes_accessed, np.float64),
                             ("out_bytes", out_bytes, np.int64), ("state_bytes", state_bytes, np.int64),
                             ("value_node", value_node, np.int32), ("value_index", value_index, np.int32),
                             ("value_bytes", value_bytes, np.int64), ("edge_value", edge_value, np.int32),
                             ("edge_dst", edge_dst, np.int32), ("results", results, np.int32)):
            s(self, col, _ro(val, dt))
        m = len(self.value_node)
        s(self, "colocation", _ro(np.full(n, -1) if colocation is None else colocation, np.int32))
        s(self, "backward", _ro(np.zeros(n, bool) if backward is None else backward, bool))
        s(self, "layer", _ro(np.full(n, -1) if layer is None else layer, np.int32))
        s(self, "value_time", _ro(np.full(m, np.nan) if value_time is None else value_time, np.float64))
        s(self, "measured", {k: _ro(v, np.float64) for k, v in sorted((measured or {}).items())})
        if members_indptr is None:
            s(self, "members_indptr", _ro(np.arange(n + 1), np.int64))
            s(self, "members", _ro(np.arange(n), np.int32))
        else:
            s(self, "members_indptr", _ro(members_indptr, np.int64))
            s(self, "members", _ro(members, np.int32))
        if n_original is None:
            n_original = int(self.members.max()) + 1 if len(self.members) else 0
        s(self, "n_original", n_original)
        s(self, "args", tuple(args))
        s(self, "outputs", None if outputs is None else tuple(tuple(o) for o in outputs))
        s(self, "dims", None if dims is None else tuple(dims))
        s(self, "meta", {} if meta is None else meta)
        s(self, "operands", None if operands is None else tuple(map(tuple, operands)))
        s(self, "dim_maps", None if dim_maps is None else tuple(dim_maps))
        self._validate()

    # ------------------------------------------------------------------------------ validation
    def _validate(self) -> None:
        n, m = self.num_nodes, self.num_values
        for col in ("op_name", "dtype"):
            if len(getattr(self, col)) != n:
                raise GraphError(f"OpGraph.{col} requires {n} entries, but got {len(getattr(self, col))}")
        for col in ("flops", "bytes_accessed", "out_bytes", "state_bytes", "colocation", "backward", "layer"):
            if getattr(self, col).shape != (n,):
                raise GraphError(f"OpGraph.{col} requires shape ({n},), but got {getattr(self, col).shape}")
        for col in ("outputs", "dims", "operands", "dim_maps"):
            v = getattr(self, col)
            if v is not None and len(v) != n:
                raise GraphError(f"OpGraph.{col} requires {n} entries, but got {len(v)}")
        for col in ("value_index", "value_bytes", "value_time"):
            if getattr(self, col).shape != (m,):
                raise GraphError(f"OpGraph.{col} requires shape ({m},), but got {getattr(self, col).shape}")
        for k, v in self.measured.items():
            if v.shape != (n,):
                raise GraphError(f"OpGraph.measured[{k!r}] requires shape ({n},), but got {v.shape}")
        if self.edge_value.shape != self.edge_dst.shape:
            raise GraphError("OpGraph.edge_value and edge_dst require equal lengths")
        if len(self.edge_value) and (self.edge_value.min() < 0 or self.edge_value.max() >= m):
            raise GraphError("OpGraph.edge_value requires value ids in [0, num_values)")
        if len(self.edge_dst) and (self.edge_dst.min() < 0 or self.edge_dst.max() >= n):
            raise GraphError("OpGraph.edge_dst requires node ids in [0, num_nodes)")
        if m and (self.value_node.min() < -1 or self.value_node.max() >= n):
            raise GraphError("OpGraph.value_node requires node ids in [-1, num_nodes)")
        src = self.edge_src
        if np.any((src >= 0) & (src >= self.edge_dst)):
            bad = int(np.argmax((src >= 0) & (src >= self.edge_dst)))
            raise GraphError(f"OpGraph requires topological node order, but edge {bad} goes from node "
                             f"{int(src[bad])} to node {int(self.edge_dst[bad])}")
        if self.operands is not None:
            self._validate_operands(self.operands, m)
        if len(self.members_indptr) != n + 1:
            raise GraphError(f"OpGraph.members_indptr requires {n + 1} entries")
        if np.any(self.flops < 0) or np.any(self.bytes_accessed < 0):
            raise GraphError("OpGraph costs must be non-negative")

    def _validate_operands(self, operands: tuple[tuple[int, ...], ...], m: int) -> None:
        ids = np.fromiter(itertools.chain.from_iterable(operands), np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= m):
            raise GraphError("OpGraph.operands requires value ids in [0, num_values)")
        if self.dim_maps is not None:
            bad = [(i, dm) for i, (ops, dm) in enumerate(zip(operands, self.dim_maps, strict=True))
                   if dm is not None and len(dm.operands) != len(ops)]
            if bad:
                i, dm = bad[0]
                raise GraphError(f"OpGraph.dim_maps[{i}] maps {len(dm.operands)} operands, but node "
                                 f"{i} has {len(operands[i])}")

    # ---------------------------------------------------------------------------- properties
    @property
    def num_nodes(self) -> int:
        return len(self.kind)

    @property
    def num_values(self) -> int:
        return len(self.value_node)

    @property
    def num_edges(self) -> int:
        return len(self.edge_value)

    @property
    def memory_model(self) -> MemoryModel:
        """How a device's memory is counted (``meta["memory_model"]``, default working-set): with
        ``node-sizes`` each node's ``state_bytes`` is its whole footprint (Tarnawski et al.: activations
        are already in the sizes), so no working set or stash is added; parameters still count once
        per device. Kept in ``meta`` so coarsening and every copy of the graph carry it."""
        return MemoryModel(self.meta.get("memory_model", MemoryModel.WORKING_SET))

    @cached_property
    def edge_src(self) -> np.ndarray:
        """Producer node of each edge's value (-1 when the value is an entry argument)."""
        return _ro(self.value_node[self.edge_value], np.int32)

    @cached_property
    def node_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Unique node-to-node edges ``(src, dst)`` (argument uses dropped), sorted."""
        src, dst = self.edge_src, self.edge_dst
        keep = src >= 0
        # one int64 key per pair (src major), sorted and deduplicated by hand: ~40x faster than unique rows
        keys = np.sort(src[keep].astype(np.int64) * max(self.num_nodes, 1) + dst[keep])
        keys = keys[np.r_[True, keys[1:] != keys[:-1]]] if len(keys) else keys
        return _ro(keys // max(self.num_nodes, 1), np.int32), _ro(keys % max(self.num_nodes, 1), np.int32)

    def _csr(self, key: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.lexsort((val, key))
        indptr = np.zeros(self.num_nodes + 1, np.int64)
        np.add.at(indptr, key + 1, 1)
        return _ro(np.cumsum(indptr), np.int64), _ro(val[order], np.int32)

    @cached_property
    def succ(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(indptr, ids)`` of each node's distinct successor nodes."""
        s, d = self.node_edges
        return self._csr(s, d)

    @cached_property
    def pred(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(indptr, ids)`` of each node's distinct predecessor nodes."""
        s, d = self.node_edges
        return self._csr(d, s)

    def successors(self, i: int) -> np.ndarray:
        indptr, ids = self.succ
        return ids[indptr[i]: indptr[i + 1]]

    def predecessors(self, i: int) -> np.ndarray:
        indptr, ids = self.pred
        return ids[indptr[i]: indptr[i + 1]]

    def members_of(self, i: int) -> np.ndarray:
        """Original op ids represented by node ``i``."""
        return self.members[self.members_indptr[i]: self.members_indptr[i + 1]]

    @cached_property
    def original_to_node(self) -> np.ndarray:
        """For each original op id, the node that contains it (-1 if none)."""
        out = np.full(self.n_original, -1, np.int32)
        counts = np.diff(self.members_indptr)
        out[self.members] = np.repeat(np.arange(self.num_nodes, dtype=np.int32), counts)
        return _ro(out, np.int32)

    @cached_property
    def param_values(self) -> np.ndarray:
        """Value ids of the parameter arguments."""
        return _ro([a.value for a in self.args if a.role == "param"], np.int32)

    @property
    def total_flops(self) -> float:
        return float(self.flops.sum())

    def summary(self) -> dict[str, Any]:
        """A small, JSON-friendly description (counts and totals)."""
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "values": self.num_values,
            "edges": self.num_edges,
            "original_ops": self.n_original,
            "flops": self.total_flops,
            "param_bytes": int(self.value_bytes[self.param_values].sum()) if len(self.param_values) else 0,
            "state_bytes": int(self.state_bytes.sum()),
        }

    def __repr__(self) -> str:
        return (f"OpGraph({self.name!r}, nodes={self.num_nodes}, values={self.num_values}, "
                f"edges={self.num_edges}, flops={self.total_flops:.3g})")


def topological_order(k: int, pairs, tiebreak=None) -> list[int] | None:
    """Kahn's algorithm over ``k`` items and ``(a, b)`` edges (``a`` before ``b``; repeats allowed),
    always taking the ready item with the smallest ``tiebreak`` (default: its index), so the order
    is deterministic whatever the order of ``pairs``. None when the edges form a cycle."""
    import heapq

    indeg = [0] * k
    out: list[list[int]] = [[] for _ in range(k)]
    for a, b in (pairs.tolist() if isinstance(pairs, np.ndarray) else pairs):
        out[a].append(b)
        indeg[b] += 1
    key = list(range(k)) if tiebreak is None else [int(x) for x in tiebreak]
    heap = [(key[u], u) for u in range(k) if indeg[u] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, u = heapq.heappop(heap)
        order.append(u)
        for w in out[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (key[w], w))
    return order if len(order) == k else None


class UnionFind:
    """Disjoint sets over ``0..k-1`` (path halving); each set is named by its smallest member, so
    labels do not depend on the order of the unions."""

    def __init__(self, k: int) -> None:
        self.parent = list(range(k))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

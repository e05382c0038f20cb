"""Dimension maps of StableHLO ops: how each result dim relates to the operands' dims.

A sharding search (Alpa-style: one PartitionSpec per op on a logical mesh) needs, per op, which operand
dims become which result dims — a dim sharded on a mesh axis stays sharded on that axis through the
op without communication — and which dims are *reduced* (contracted or summed): sharding those leaves
partial sums that an all-reduce or reduce-scatter completes. :class:`~planmap.graph.DimMap` holds both.

Rules (``-1``: the dim is not carried to the result):

* elementwise ops: identity for operands of the result's shape, ``()`` for scalars;
* ``broadcast_in_dim`` / ``transpose`` / ``reverse`` / ``concatenate`` / ``sort``: by their attributes;
* ``reshape``: dims are grouped into factor groups of equal product; the major dim of a group maps to
  the major dim on the other side when one size divides the other (``(B,S,H*D)->(B,S,H,D)``: H*D -> H;
  ``(B,S,D)->(B*S,D)``: B -> B*S, S -> -1);
* ``dot_general`` / ``dot`` / ``convolution``: from the :class:`~planmap.graph.DimRoles` the cost model
  derives — contracting pairs are reduced slots; convolution spatial dims are -1 (no halo exchange);
* ``reduce``: kept dims to their positions, each reduced dim a slot; windowed ops: only dims with a
  trivial window; slices, pads, dynamic slices/updates: only dims taken whole;
* ``gather`` / ``scatter`` (add): by their dimension numbers; an indexed, collapsed operand dim of a
  gather and each update scatter dim of a scatter-add are reduced slots (masked gather + all-reduce);
* ``func.call`` of a pointwise function (only elementwise ops, constants, scalar broadcasts and such
  calls: ``jax.nn.relu``/``gelu`` export that way): like an elementwise op;
* ``iota`` / ``constant``: a map with no operands; other ops with bodies, collectives, custom calls, rng,
  tuples and unknown kinds: None (a unit that runs replicated).

Every mapped pair is then checked: it survives only when the operand dim and the result dim have the
same size > 1 (reshape: one divides the other). Slots whose dims all have size 1 are dropped.

Cost: the walker asks for each op's map as it passes (about 2 % of a load). Maps are memoised per load
by (kind, result type, operand types) — MLIR types are uniqued, so a 480-layer transformer computes
~50 maps — and, for the kinds whose map depends on attributes, by those attributes too. Attributes are
read only when the types leave the map open: a broadcast of a scalar, or a broadcast_in_dim whose
operand dims each match exactly one result dim by size (most of them), needs none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planmap.frontend.costs import ELEMENTWISE, _ints
from planmap.frontend.tensors import TypeInfo
from planmap.graph import DimMap, DimRoles

__all__ = ["DimMapper"]

_SH = "stablehlo."
_CHLO_BROADCAST = frozenset(k for k in ELEMENTWISE if k.startswith("chlo.broadcast_"))
# the attributes each kind's map depends on (read once per op, the memo key)
_ATTRS: dict[str, tuple[str, ...]] = {k: ("broadcast_dimensions",) for k in _CHLO_BROADCAST} | {
    _SH + "broadcast_in_dim": ("broadcast_dimensions",),
    _SH + "transpose": ("permutation",),
    _SH + "reduce": ("dimensions",),
    _SH + "reduce_window": ("window_dimensions", "window_strides", "base_dilations", "window_dilations", "padding"),
    _SH + "select_and_scatter": ("window_dimensions", "window_strides", "padding"),
    _SH + "sort": ("dimension",),
    _SH + "reverse": ("dimensions",),
    _SH + "concatenate": ("dimension",),
    _SH + "pad": ("edge_padding_low", "edge_padding_high", "interior_padding"),
    _SH + "gather": ("dimension_numbers", "slice_sizes"),
    _SH + "scatter": ("scatter_dimension_numbers",),
}
_SCATTER = _SH + "scatter"
_ELEMENTWISE = (ELEMENTWISE - {_SH + "rng"}) | {_SH + "map"}
_WHOLE = frozenset(_SH + k for k in ("slice", "dynamic_slice", "dynamic_update_slice"))
_CONTRACTIONS = frozenset(_SH + k for k in ("dot_general", "dot", "convolution", "dynamic_conv"))
_NO_OPERANDS = DimMap(operands=())
_CALL = "func.call"
_POINTWISE_BODY = _ELEMENTWISE | {_SH + "constant", "func.return", _SH + "return"}


def _callee(op: Any) -> str | None:
    attr = op.attributes.get("callee")
    if attr is None:
        return None
    from jaxlib.mlir import ir

    return ir.FlatSymbolRefAttr(attr).value


class DimMapper:
    """The :class:`DimMap` of each op of one load, memoised (see the module docstring).

    :meth:`op` is called once per op by the walker, with what it has at hand: the op, its operand
    value ids, its result types, the TypeInfo of every value so far, and a contraction's DimRoles.
    """

    def __init__(self, funcs: dict[str, Any] | None = None) -> None:
        self._memo: dict[Any, Any] = {}
        self._funcs = funcs or {}
        self._pointwise: dict[str, bool] = {}

    def op(self, kind: str, op: Any, ids: Sequence[int], outs: list[TypeInfo], value_types: list[TypeInfo],
           roles: DimRoles | None) -> DimMap | None:
        """The map of one op; attributes are read only when its types leave the map open."""
        if len(outs) != 1 and (not outs or any(o.type.rank != outs[0].type.rank for o in outs)):
            return None
        if kind == _CALL:
            if not self._is_pointwise(_callee(op)):
                return None
            kind = _SH + "add"  # a call of a pointwise function maps its operands like an elementwise op
        n = len(ids)  # spelled out for one and two operands: this runs once per op of the module
        key: tuple[object, ...]
        if n == 1:  # roles (a contraction's) by identity: the cost model memoises them per attribute and types
            key = (kind, id(outs[0]), id(roles), id(value_types[ids[0]]))
        elif n == 2:
            key = (kind, id(outs[0]), id(roles), id(value_types[ids[0]]), id(value_types[ids[1]]))
        else:
            key = (kind, id(outs[0]), id(roles), *map(id, map(value_types.__getitem__, ids)))
        dm = self._memo.get(key, _MISSING)
        if dm is _MISSING:
            shapes = [value_types[v].type.shape for v in ids]
            dm = self._memo[key] = _guarded(_by_types, kind, shapes, outs[0].type.shape, roles)
        if dm is _BY_ATTRIBUTES:
            return self._by_attributes(kind, op, ids, outs[0], value_types, key)
        return dm

    def _is_pointwise(self, name: str | None) -> bool:
        """Whether function ``name`` is pointwise: only elementwise ops, constants, scalar broadcasts
        and calls of pointwise functions (``jax.nn.relu``, ``gelu`` export as such private calls)."""
        if name is None or name not in self._funcs:
            return False
        known = self._pointwise.get(name)
        if known is not None:
            return known
        self._pointwise[name] = False  # a recursive call is not pointwise
        ok = all(self._pointwise_op(inner) for block in self._funcs[name].regions[0].blocks
                 for inner in block.operations)
        self._pointwise[name] = ok
        return ok

    def _pointwise_op(self, op: Any) -> bool:
        """Whether one op of a function body keeps the function pointwise."""
        kind = op.operation.name
        if kind == _CALL:
            return self._is_pointwise(_callee(op))
        if kind == _SH + "broadcast_in_dim":
            return all(len(v.type.shape) == 0 for v in op.operands)
        return kind in _POINTWISE_BODY

    def _by_attributes(self, kind: str, op: Any, ids: Sequence[int], out: TypeInfo, value_types: list[TypeInfo],
                       key: tuple) -> DimMap | None:
        names = _ATTRS[kind]
        if kind == _SCATTER:
            extra: Any = (op.attributes.get(names[0]), _is_add_body(op, (len(ids) - 1) // 2))
        else:
            extra = tuple(map(op.attributes.get, names))
        memo_key: tuple | None = (key, extra)
        try:
            return self._memo[memo_key]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute: compute without the memo
            memo_key = None
        shapes = [value_types[v].type.shape for v in ids]
        dm = _guarded(_by_attrs, kind, shapes, out.type.shape, extra)
        if memo_key is not None:
            self._memo[memo_key] = dm
        return dm


_MISSING = object()
_BY_ATTRIBUTES = object()  # memo entry: this op's map depends on its attributes, not just its types


def _guarded(compute: Any, kind: str, shapes: list[tuple[int, ...]], out: tuple[int, ...], extra: Any) -> Any:
    try:
        return compute(kind, shapes, out, extra)
    except (KeyError, IndexError, ValueError, TypeError):  # attributes not as the opset says
        return None


def _by_types(kind: str, shapes: list[tuple[int, ...]], out: tuple[int, ...], roles: DimRoles | None) -> Any:
    """The map when the kind and the types fix it, else :data:`_BY_ATTRIBUTES` or None (a unit)."""
    r = len(out)
    if kind in _ATTRS:
        if kind != _SCATTER and not any(shapes):  # scalar operands (a broadcast constant): no dims to map
            return DimMap(((),) * len(shapes))
        if kind == _SH + "broadcast_in_dim":
            return _broadcast_by_sizes(shapes[0], out) or _BY_ATTRIBUTES
        return _BY_ATTRIBUTES
    if kind in _ELEMENTWISE:
        return _finish([_aligned(s, r, None) for s in shapes], (), shapes, out)
    if kind == _SH + "bitcast_convert":
        return _finish([tuple(range(r))], (), shapes, out) if shapes == [out] else None
    if kind in _WHOLE:
        return _finish([tuple(range(len(s))) for s in shapes], (), shapes, out)
    if kind == _SH + "reshape":
        return DimMap((_reshape(shapes[0], out),))
    if kind in (_SH + "iota", _SH + "constant"):
        return _NO_OPERANDS if not shapes else None
    if kind == _SH + "broadcast":
        return _finish([tuple(range(r - len(shapes[0]), r))], (), shapes, out)
    if kind in _CONTRACTIONS:
        return _contraction(roles, shapes, out) if roles is not None else None
    return None


def _by_attrs(kind: str, shapes: list[tuple[int, ...]], out: tuple[int, ...], extra: tuple) -> DimMap | None:
    """The map of an op of :data:`_ATTRS` from its attributes ``extra`` (in the order of ``_ATTRS[kind]``)."""
    if kind in _CHLO_BROADCAST:
        dims = _int_list(extra[0])
        return _finish([_aligned(s, len(out), dims) for s in shapes], (), shapes, out)
    if kind == _SCATTER:
        return _scatter(extra[0], shapes, out) if extra[1] else None
    if kind == _SH + "gather":
        slice_sizes = _int_list(extra[1])
        if slice_sizes is None:  # a gather without its (required) slice_sizes: run it as a unit
            return None
        return _gather(extra[0], slice_sizes, shapes, out)
    return _attributed(kind, [_int_list(a) for a in extra], shapes, out)


def _broadcast_by_sizes(shape: tuple[int, ...], out: tuple[int, ...]) -> DimMap | None:
    """A broadcast_in_dim's map from sizes alone: when each operand dim of size > 1 has exactly one
    result dim of its size, its broadcast dimension must be that one (None otherwise: read them)."""
    m = []
    for s in shape:
        if s <= 1:
            m.append(-1)
            continue
        at = [i for i, o in enumerate(out) if o == s]
        if len(at) != 1:
            return None
        m.append(at[0])
    return _finish([tuple(m)], (), [shape], out)


def _int_list(attr: Any) -> list[int] | None:
    """The integers of an attribute (None when absent). A dense i64 array is read element by element:
    converting it through numpy or its iterator costs ~30 times as much."""
    if attr is None:
        return None
    if type(attr).__name__ == "DenseI64ArrayAttr":
        return [attr[k] for k in range(len(attr))]
    return _ints(attr)


def _attributed(kind: str, a: list[list[int] | None], shapes: list[tuple[int, ...]],
                out: tuple[int, ...]) -> DimMap | None:
    """Kinds whose map follows from integer attributes ``a`` (in the order of ``_ATTRS[kind]``)."""
    short = kind[len(_SH):]
    rank = len(shapes[0]) if shapes else 0
    ident = tuple(range(rank))
    if short == "broadcast_in_dim":
        return _finish([tuple(a[0] or ())], (), shapes, out)
    if short == "transpose":
        perm = a[0] or []
        inverse = [-1] * rank
        for i, p in enumerate(perm):
            inverse[p] = i
        return _finish([tuple(inverse)], (), shapes, out)
    if short in ("reverse", "sort", "concatenate"):
        cut = set(a[0] or ())
        m = tuple(-1 if j in cut else j for j in ident)
        return _finish([m] * len(shapes), (), shapes, out)
    if short == "reduce":
        k = len(shapes) // 2
        dims = a[0] or []
        kept = [j for j in ident if j not in dims]
        to_result = [-1] * rank
        for pos, j in enumerate(kept):
            to_result[j] = pos
        slots = tuple((d,) * k + (-1,) * k for d in dims)
        return _finish([tuple(to_result)] * k + [()] * k, slots, shapes, out)
    if short in ("reduce_window", "select_and_scatter"):
        names = _ATTRS[kind]
        vals = dict(zip(names, a, strict=True))
        trivial = _trivial_window(rank, vals)
        m = tuple(j if trivial[j] else -1 for j in ident)
        k = len(shapes) // 2 if short == "reduce_window" else 2
        return _finish([m] * k + [()] * (len(shapes) - k), (), shapes, out)
    if short == "pad":
        lo, hi, interior = (x or [0] * rank for x in a)
        m = tuple(j if lo[j] == 0 and hi[j] == 0 and interior[j] == 0 else -1 for j in ident)
        return _finish([m, ()], (), shapes, out)
    return None


def _trivial_window(rank: int, vals: dict[str, list[int] | None]) -> list[bool]:
    """Per dim: window 1, stride 1, no padding, no dilation (the op then keeps the dim as it is)."""
    ok = [True] * rank
    for name in ("window_dimensions", "window_strides", "base_dilations", "window_dilations"):
        v = vals.get(name)
        if v:
            ok = [o and x == 1 for o, x in zip(ok, v, strict=True)]
    pad = vals.get("padding")
    if pad:
        ok = [o and pad[2 * j] == 0 and pad[2 * j + 1] == 0 for j, o in enumerate(ok)]
    return ok


def _aligned(shape: tuple[int, ...], r: int, dims: list[int] | None) -> tuple[int, ...]:
    """Elementwise operand dims to result dims: by ``dims`` when given, else right-aligned (numpy)."""
    if dims is not None and len(dims) == len(shape):
        return tuple(dims)
    return tuple(range(r - len(shape), r)) if len(shape) <= r else (-1,) * len(shape)


def _finish(maps: list[tuple[int, ...]], slots: tuple[tuple[int, ...], ...], shapes: list[tuple[int, ...]],
            out: tuple[int, ...]) -> DimMap:
    """Keep a pair only when both dims have the same size > 1; drop slots over size-1 dims only.

    Raises ValueError when a map or a slot does not fit its operand (attributes not as the opset says).
    """
    if len(maps) != len(shapes):
        raise ValueError("one map per operand")
    r = len(out)
    ops = []
    for m, s in zip(maps, shapes, strict=True):
        if len(m) != len(s):
            raise ValueError("one entry per operand dim")
        ops.append(tuple(i if 0 <= i < r and s[j] == out[i] and s[j] > 1 else -1 for j, i in enumerate(m)))
    kept = []
    for slot in slots:
        if len(slot) != len(shapes) or any(e >= len(s) for e, s in zip(slot, shapes, strict=True)):
            raise ValueError("a reduced slot names a dim its operand does not have")
        if any(e >= 0 and s[e] > 1 for e, s in zip(slot, shapes, strict=True)):
            kept.append(tuple(slot))
    return DimMap(tuple(ops), tuple(kept))


def _reshape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Operand dim -> result dim of a reshape: the major dims of each factor group (see module docstring)."""
    m = [-1] * len(a)
    if 0 in a or 0 in b:
        return tuple(m)
    ia = [i for i, x in enumerate(a) if x != 1]
    ib = [j for j, x in enumerate(b) if x != 1]
    p = q = 0
    while p < len(ia) and q < len(ib):
        i, j = ia[p], ib[q]
        pa, pb = a[i], b[j]
        p, q = p + 1, q + 1
        while pa != pb:
            if pa < pb and p < len(ia):
                pa *= a[ia[p]]
                p += 1
            elif pb < pa and q < len(ib):
                pb *= b[ib[q]]
                q += 1
            else:  # products never meet: not a valid reshape
                return tuple([-1] * len(a))
        if a[i] % b[j] == 0 or b[j] % a[i] == 0:
            m[i] = j
    return tuple(m)


def _contraction(roles: DimRoles, shapes: list[tuple[int, ...]], out: tuple[int, ...]) -> DimMap:
    lhs, rhs = [-1] * len(shapes[0]), [-1] * len(shapes[1])
    extra: list[tuple[int, ...]] = [()] * (len(shapes) - 2)  # dynamic_conv's padding operand
    slots: tuple[tuple[int, ...], ...] = ()
    if roles.op != "convolution":
        for dims, res, m in ((roles.lhs_batch, roles.out_batch, lhs), (roles.rhs_batch, roles.out_batch, rhs),
                             (roles.lhs_free, roles.out_lhs_free, lhs), (roles.rhs_free, roles.out_rhs_free, rhs)):
            for d, o in zip(dims, res, strict=True):
                m[d] = o
        slots = tuple(zip(roles.lhs_contracting, roles.rhs_contracting, strict=True))
        return _finish([tuple(lhs), tuple(rhs)], slots, shapes, out)
    (b,), (ob,) = roles.lhs_batch, roles.out_batch
    (f,), (kf,), (ko,), (of,) = (roles.lhs_contracting, roles.rhs_contracting, roles.rhs_free,
                                 roles.out_rhs_free)
    lhs[b] = ob
    if roles.batch_group_count == 1 and roles.feature_group_count == 1:
        rhs[ko] = of
        slots = ((f, kf) + (-1,) * len(extra),)
    elif roles.batch_group_count == 1 and roles.feature_group_count == shapes[0][f]:  # depthwise
        lhs[f] = of
        rhs[ko] = of
    return _finish([tuple(lhs), tuple(rhs), *extra], slots, shapes, out)


def _gather(attr: Any, slice_sizes: list[int], shapes: list[tuple[int, ...]], out: tuple[int, ...]) -> DimMap | None:
    from jaxlib.mlir.dialects import stablehlo

    dn = stablehlo.GatherDimensionNumbers(attr)
    offset, collapsed = list(dn.offset_dims), set(dn.collapsed_slice_dims)
    obatch, ibatch = list(dn.operand_batching_dims), list(dn.start_indices_batching_dims)
    indexed, ivd = set(dn.start_index_map), dn.index_vector_dim
    operand, indices = shapes[0], shapes[1]
    res_batch = [i for i in range(len(out)) if i not in offset]
    idx_batch = [q for q in range(len(indices)) if q != ivd]
    if len(res_batch) != len(idx_batch):
        return None
    imap = [-1] * len(indices)
    for q, i in zip(idx_batch, res_batch, strict=True):
        imap[q] = i
    omap = [-1] * len(operand)
    window = [d for d in range(len(operand)) if d not in collapsed and d not in obatch]
    for d, o in zip(window, offset, strict=True):
        if slice_sizes[d] == operand[d]:
            omap[d] = o
    for d, q in zip(obatch, ibatch, strict=True):
        omap[d] = imap[q]
    slots = tuple((d, -1) for d in sorted(collapsed & indexed))
    return _finish([tuple(omap), tuple(imap)], slots, shapes, out)


def _scatter(attr: Any, shapes: list[tuple[int, ...]], out: tuple[int, ...]) -> DimMap | None:
    from jaxlib.mlir.dialects import stablehlo

    dn = stablehlo.ScatterDimensionNumbers(attr)
    k = (len(shapes) - 1) // 2
    window_dims, inserted = list(dn.update_window_dims), set(dn.inserted_window_dims)
    obatch, ibatch, ivd = list(dn.input_batching_dims), list(dn.scatter_indices_batching_dims), dn.index_vector_dim
    operand, indices, update = shapes[0], shapes[k], shapes[k + 1]
    umap, imap = [-1] * len(update), [-1] * len(indices)
    window = [d for d in range(len(operand)) if d not in inserted and d not in obatch]
    for u, d in zip(window_dims, window, strict=True):
        umap[u] = d
    scatter_dims = [u for u in range(len(update)) if u not in window_dims]
    idx_dims = [q for q in range(len(indices)) if q != ivd]
    if len(scatter_dims) != len(idx_dims):
        return None
    slots = []
    for u, q in zip(scatter_dims, idx_dims, strict=True):
        if q in ibatch:
            umap[u] = imap[q] = obatch[ibatch.index(q)]
        else:
            slots.append((-1,) * k + (q,) + (u,) * k)
    ident = tuple(range(len(operand)))
    return _finish([ident] * k + [tuple(imap)] + [tuple(umap)] * k, tuple(slots), shapes, out)


def _is_add_body(op: Any, k: int) -> bool:
    """Whether a scatter's body only adds (scatter-add): then update scatter dims are reductions."""
    if not len(op.regions) or len(op.regions[0].blocks) != 1:
        return False
    names = [o.operation.name for o in op.regions[0].blocks[0].operations]
    return names[-1:] == [_SH + "return"] and names[:-1] == [_SH + "add"] * k

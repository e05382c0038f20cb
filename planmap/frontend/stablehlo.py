"""StableHLO module -> :class:`~planmap.graph.OpGraph`: one node per op of the entry function's body.

Node ``i`` is the ``i``-th operation of the entry function's top-level block (``func.return``
excluded, constants included) so that the runtime finds op ``i`` again in the same artifact. Values
are the entry arguments (ids ``0..A-1``) followed by op results in op order; an edge is one distinct
``(value, consumer node)`` pair — a value used twice by one op is transferred once.

Ops with bodies are single nodes costed from their bodies:

* ``func.call`` / ``stablehlo.composite``: the callee (the composite's decomposition) is costed once
  and memoised, and charged at every call site;
* ``stablehlo.while``: ``trip count x (cond + body)``; the trip count is exact when the loop has a
  static bound (:mod:`planmap.frontend.loops`), else the spec's ``loop_trip_count``;
* ``stablehlo.case`` / ``stablehlo.if``: the most expensive branch (by FLOPs, then bytes) — a plan
  must fit the worst case, and which branch runs is data-dependent;
* ``sdy.manual_computation`` / ``sdy.named_computation``: their body (a manual computation's body
  has per-device shapes: its cost is that of one device's share);
* ``chlo.scan``: its body once per element of the scanned dimension.

Values a body captures from the entry function (``case`` branches do) are edges into the op that
owns the body. Why the Python bindings are used the way they are: every attribute access crosses
into C++, so the hot loop touches each op's name, location, operands and result types once, types
are converted once per distinct type, and only the few ops that need attributes are inspected.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from planmap.errors import InputError
from planmap.frontend import costs as C
from planmap.frontend.arguments import assign_roles
from planmap.frontend.callees import callee_bodies
from planmap.frontend.dimmaps import DimMapper
from planmap.frontend.loops import static_trip_count
from planmap.frontend.mlir import ParsedModule
from planmap.frontend.namestack import label_ops
from planmap.frontend.nogc import gc_paused
from planmap.frontend.shardings import collect_shardings
from planmap.frontend.tensors import TypeInfo, TypeTable
from planmap.graph import Arg, DimMap, DimRoles, OpGraph, TensorType

__all__ = ["build_graph", "location_name", "entry_ops", "entry_return", "top_level_ops"]

_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def location_name(loc: Any) -> str:
    """The name of a location: a NameLoc's name, else the first quoted name inside (fused, callsite)."""
    try:
        return loc.name_str
    except AttributeError:
        return _quoted_name(loc)


def _quoted_name(loc: Any) -> str:
    """The first quoted name in a location that is not a NameLoc (file, fused, callsite), as printed.

    A file location whose name MLIR prints unescaped (printable ASCII without quote or backslash)
    is read from its ``filename`` directly: printing a location costs twenty times more, and text
    without locations gives every op a file location.
    """
    try:
        name = loc.filename
    except AttributeError:
        m = _QUOTED.search(str(loc))
        return m.group(1) if m else ""
    return _file_name(loc, name)


def _file_name(loc: Any, name: str) -> str:
    """The name of a file location ``loc`` whose filename is ``name``, as :func:`_quoted_name` reads it."""
    if name.isascii() and name.isprintable() and '"' not in name and "\\" not in name:
        return name
    m = _QUOTED.search(str(loc))
    return m.group(1) if m else ""


class _Coster:
    """Costs of functions and regions, memoised per callee (a function is costed once, charged per call)."""

    def __init__(self, module: Any, types: TypeTable, where: str, loop_trip_count: int) -> None:
        self.types = types
        self.where = where
        self.loop_trip_count = loop_trip_count
        self.funcs: dict[str, Any] = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                self.funcs[op.attributes["sym_name"].value] = op
        self._func_costs: dict[str, tuple[float, float, str]] = {}
        self._active: list[str] = []
        self.unknown: Counter[str] = Counter()
        self.loops: list[dict[str, Any]] = []
        self.memo: dict[Any, Any] = {}

    # -------------------------------------------------------------------------- bodies
    def body(self, op: Any) -> tuple[float, float, str]:
        kind = op.name
        if kind == "func.call":
            return self.function(op.attributes["callee"].value)
        if kind == "stablehlo.composite":
            return self.function(op.attributes["decomposition"].value)
        if kind == "stablehlo.while":
            cond, body = self.region(op.regions[0]), self.region(op.regions[1])
            trips = static_trip_count(op)
            static = trips is not None
            if trips is None:
                trips = self.loop_trip_count
            self.loops.append({"trip_count": trips, "static": static})
            return (trips * body[0] + (trips + 1) * cond[0], trips * body[1] + (trips + 1) * cond[1],
                    body[2] or cond[2])
        if kind in ("stablehlo.case", "stablehlo.if"):
            branches = [self.region(r) for r in op.regions]
            if not branches:
                return 0.0, 0.0, ""
            worst = max(branches, key=lambda b: (b[0], b[1]))
            return worst[0], max(b[1] for b in branches), worst[2]
        if kind == "chlo.scan":  # the body runs once per element along the scanned dimension
            attrs = op.attributes
            if "scan_dim_size" in attrs:
                trips = int(attrs["scan_dim_size"].value)
            else:
                shape = self.types(op.results[0].type).type.shape if len(op.results) else ()
                dim = int(attrs["dimension"].value)
                trips = shape[dim] if 0 <= dim < len(shape) else 1
            flops, nbytes, dtype = self.region(op.regions[0])
            return trips * flops, trips * nbytes, dtype
        # sdy.manual_computation / sdy.named_computation: one region
        total = [self.region(r) for r in op.regions]
        return sum(t[0] for t in total), sum(t[1] for t in total), _heaviest(total)

    def function(self, name: str) -> tuple[float, float, str]:
        cached = self._func_costs.get(name)
        if cached is not None:
            return cached
        fn = self.funcs.get(name)
        if fn is None:
            raise InputError(f"{self.where}: a call refers to @{name}, which the module does not define")
        if name in self._active:
            raise InputError(f"{self.where}: @{name} calls itself (recursion: "
                             f"{' -> '.join('@' + n for n in [*self._active, name])}); StableHLO has no "
                             f"recursive functions")
        self._active.append(name)
        try:
            cost = self.region(fn.regions[0])
        finally:
            self._active.pop()
        self._func_costs[name] = cost
        return cost

    def region(self, region: Any) -> tuple[float, float, str]:
        flops = nbytes = 0.0
        best, dtype = -1.0, ""
        for block in region.blocks:
            for op in block.operations:
                c = self.op(op.operation)
                flops += c.flops
                nbytes += c.bytes
                if c.flops > best:
                    best, dtype = c.flops, c.dtype
        return flops, nbytes, dtype

    def op(self, op: Any) -> C.OpCost:
        """Cost of an op nested in a body (types read from the op itself)."""
        kind = op.name
        if kind in C.FREE:
            return C.OpCost(0.0, 0.0, "")
        ins, in_bytes = _operand_infos(op, self.types)
        outs = [self.types(r.type) for r in op.results]
        cost = C.op_cost(kind, op, ins, outs, self.body, in_bytes=in_bytes, memo=self.memo)
        if cost.unknown:
            self.unknown[cost.unknown] += 1
        return cost


_TERMINATORS = frozenset({"func.return", "stablehlo.return"})


def entry_ops(block: Any) -> Iterator[tuple[Any, str]]:
    """``(operation, name)`` of each op of an entry function's body, in the plan's numbering.

    Op ``i`` is the ``i``-th operation of the block, constants included, the terminator excluded.
    The front end's nodes and the runtime's op ids both come from here, so a plan's op ranges name
    the same ops for both.
    """
    for opv in block.operations:
        op = opv.operation
        name = op.name
        if name not in _TERMINATORS:
            yield op, name


def entry_return(block: Any) -> Any:
    """The terminator of an entry function's body (its operands are the function's results), or None."""
    ops = block.operations
    last = ops[len(ops) - 1].operation if len(ops) else None
    return last if last is not None and last.name in _TERMINATORS else None


def top_level_ops(fn: Any) -> list:
    """The operations of function ``fn``'s body in the plan's numbering (see :func:`entry_ops`)."""
    return [op for op, _ in entry_ops(fn.regions[0].blocks[0])]


def _heaviest(costs: list[tuple[float, float, str]]) -> str:
    return max(costs, key=lambda c: c[0])[2] if costs else ""


def _find_entry(coster: _Coster, entry: str, where: str) -> Any:
    fn = coster.funcs.get(entry)
    if fn is None:
        names = sorted(coster.funcs)
        public = [n for n in names if "sym_visibility" not in coster.funcs[n].attributes
                  or coster.funcs[n].attributes["sym_visibility"].value == "public"]
        if not names:
            raise InputError(f"{where}: the module has no functions (is it a StableHLO module?)")
        hint = f"; public functions: {', '.join('@' + n for n in public)}" if public else ""
        raise InputError(f"{where}: the module has no entry function @{entry}{hint} (set model.entry)")
    if len(fn.regions) == 0 or len(fn.regions[0].blocks) == 0:
        raise InputError(f"{where}: @{entry} is only a declaration (it has no body)")
    if len(fn.regions[0].blocks) > 1:
        raise InputError(f"{where}: @{entry} has {len(fn.regions[0].blocks)} blocks; StableHLO functions "
                         f"have one")
    return fn


def _arg_names(fn: Any, block: Any) -> list[str]:
    from jaxlib.mlir import ir

    infos: list[str | None] = [None] * len(block.arguments)
    if "arg_attrs" in fn.attributes:
        for i, d in enumerate(fn.attributes["arg_attrs"]):
            if i < len(infos) and isinstance(d, ir.DictAttr) and "jax.arg_info" in d:
                infos[i] = ir.StringAttr(d["jax.arg_info"]).value
    return [info if info is not None else location_name(a.location) for info, a in zip(infos, block.arguments,
                                                                                         strict=True)]


def _result_names(fn: Any, n: int) -> list[str]:
    from jaxlib.mlir import ir

    names = [""] * n
    if "res_attrs" in fn.attributes:
        for i, d in enumerate(fn.attributes["res_attrs"]):
            if i < n and isinstance(d, ir.DictAttr) and "jax.result_info" in d:
                names[i] = ir.StringAttr(d["jax.result_info"]).value
    return names


def _captures(op: Any, vid: dict[Any, int], out: set[int]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                for v in inner.operands:
                    i = vid.get(v)
                    if i is not None:
                        out.add(i)
                if len(inner.regions):
                    _captures(inner, vid, out)


def build_graph(parsed: ParsedModule, *, name: str, entry: str = "main", arguments: Any = None,
                loop_trip_count: int = 1) -> OpGraph:
    """The OpGraph of ``parsed``'s entry function (see module docstring)."""
    where = parsed.where
    if loop_trip_count < 1:
        raise ValueError(f"loop_trip_count requires a value >= 1, but got {loop_trip_count}")
    with parsed.context:
        types = TypeTable(where)
        coster = _Coster(parsed.module, types, where, loop_trip_count)
        fn = _find_entry(coster, entry, where)
        block = fn.regions[0].blocks[0]
        with gc_paused():
            walk = _walk_entry(fn, block, types, coster)
        arg_names = _arg_names(fn, block)
        roles = assign_roles(arg_names, arguments, where)
        shardings = collect_shardings(parsed.module, fn, walk.constraint_ops)
        result_names = _result_names(fn, len(walk.results))
        bodies = callee_bodies(coster.funcs, set(walk.calls.values()), types) if walk.calls else {}
        attrs = parsed.module.operation.attributes
        module_name = attrs["sym_name"].value if "sym_name" in attrs else ""

    if coster.unknown:
        listed = ", ".join(f"{k} ({v} op{'s' if v > 1 else ''})" for k, v in sorted(coster.unknown.items()))
        warnings.warn(C.CostWarning(f"{where}: no cost formula for {len(coster.unknown)} op kind(s), costed "
                                    f"from their bytes: {listed}"), stacklevel=3)
    n = len(walk.kinds)
    n_args = len(walk.arg_types)
    n_results = np.asarray(walk.n_results, np.int64)
    value_node = np.r_[np.full(n_args, -1, np.int64), np.repeat(np.arange(n, dtype=np.int64), n_results)]
    starts = np.repeat(np.cumsum(n_results) - n_results, n_results)
    value_index = np.r_[np.arange(n_args, dtype=np.int64), np.arange(len(value_node) - n_args) - starts]
    offsets = n_args + np.cumsum(n_results) - n_results  # id of each node's first result
    first_bytes = np.fromiter((t.nbytes for t in walk.first), np.int64, n)
    value_bytes = np.empty(len(value_node), np.int64)
    value_bytes[:n_args] = [t.nbytes for t in walk.arg_types]
    single = n_results == 1
    value_bytes[offsets[single]] = first_bytes[single]
    for i, outs in walk.multi.items():
        value_bytes[offsets[i]: offsets[i] + len(outs)] = [t.nbytes for t in outs]
    m = max(len(value_node), 1)
    ev = np.asarray(walk.edge_v, np.int64)
    ed = np.repeat(np.arange(n, dtype=np.int64), np.asarray(walk.n_operands, np.int64))
    if walk.captures:
        cap = np.asarray(walk.captures, np.int64)
        ev, ed = np.r_[ev, cap[:, 0]], np.r_[ed, cap[:, 1]]
    keys = ed * m + ev
    keys.sort()  # distinct (consumer, value) pairs, sorted by consumer then value
    keys = keys[np.r_[True, keys[1:] != keys[:-1]]] if len(keys) else keys
    ed, ev = keys // m, keys % m
    first: list[TypeInfo] = walk.first
    cat = np.asarray(walk.category, np.int8)
    elems = np.fromiter((t.elements for t in first), np.float64, n)
    out_bytes = first_bytes.copy()
    for i, outs in walk.multi.items():
        out_bytes[i] = sum(t.nbytes for t in outs)
    flops = np.where(cat == _ELEMENTWISE, elems, 0.0)
    # bytes accessed = distinct operand bytes + result bytes, unless the op's cost said otherwise
    nbytes = np.bincount(ed, weights=value_bytes[ev].astype(np.float64), minlength=n) + out_bytes
    nbytes[cat == _FREE] = 0.0
    dtypes = [t.type.dtype for t in first]
    for i, c in walk.special.items():
        flops[i] = c.flops
        nbytes[i] = c.bytes
        dtypes[i] = c.dtype
    outputs = [t.as_tuple for t in first]
    for i, outs in walk.multi.items():
        outputs[i] = tuple(t.type for t in outs)
    state = np.zeros(n, np.int64)
    constants = np.flatnonzero(cat == _CONSTANT)
    state[constants] = out_bytes[constants]
    state[walk.splats] = 0
    dims: list[DimRoles | None] = [None] * n
    for i, c in walk.special.items():
        if c.dims is not None:
            dims[i] = c.dims
    labels = label_ops(walk.names)
    meta: dict[str, Any] = {
        "format": parsed.format,
        "source": where,
        "entry": entry,
        "module": module_name,
        "result_names": result_names,
        "unknown_ops": dict(sorted(coster.unknown.items())),
        "loops": coster.loops,
        "layer_names": list(labels.layer_names),
    }
    if shardings:
        meta["shardings"] = shardings
    if bodies:  # for the memory model (planmap.frontend.callees)
        meta["calls"] = {i: c for i, c in walk.calls.items() if c in bodies}
        meta["callees"] = bodies
    if parsed.info:
        meta["exported"] = parsed.info
    graph_args = [Arg(index=i, name=arg_names[i], type=walk.arg_types[i].type, role=roles[i], value=i)
                  for i in range(len(walk.arg_types))]
    return OpGraph(
        name=name, kind=walk.kinds, op_name=walk.names, flops=flops, bytes_accessed=nbytes,
        out_bytes=out_bytes, state_bytes=state, dtype=dtypes, value_node=value_node,
        value_index=value_index, value_bytes=value_bytes, edge_value=ev, edge_dst=ed, args=graph_args,
        results=walk.results, outputs=outputs, dims=dims, backward=labels.backward, layer=labels.layer,
        meta=meta, operands=walk.operands, dim_maps=walk.dim_maps)


_ELEMENTWISE, _DATA, _FREE, _CONSTANT, _SPECIAL = 0, 1, 2, 3, 4
_CATEGORY = {**{k: _ELEMENTWISE for k in C.ELEMENTWISE}, **{k: _DATA for k in C.DATA_MOVEMENT},
             **{k: _FREE for k in C.FREE}, "stablehlo.constant": _CONSTANT}
_NO_RESULT = TypeInfo(TensorType((), ""), 0, 0)


class _Walk:
    """Columns collected by one pass over the entry block (plain lists: appends are the cheapest).

    Per node: ``kinds``, ``names``, ``category`` (how it is costed), ``first`` (the first result's
    TypeInfo); ops with several results list them all in ``multi``; ops costed one by one (contractions,
    bodies, reductions, unknown kinds) have their :class:`~planmap.frontend.costs.OpCost` in ``special``.
    """

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.names: list[str] = []
        self.category: list[int] = []
        self.first: list[TypeInfo] = []
        self.multi: dict[int, list[TypeInfo]] = {}
        self.special: dict[int, C.OpCost] = {}
        self.n_operands: list[int] = []
        self.n_results: list[int] = []
        self.edge_v: list[int] = []
        self.captures: list[tuple[int, int]] = []  # (value, node): values a body uses from outside
        self.results: list[int] = []
        self.arg_types: list[TypeInfo] = []
        self.constraint_ops: list[tuple[int, Any]] = []
        self.operands: list[tuple[int, ...]] = []
        self.dim_maps: list[DimMap | None] = []
        self.splats: list[int] = []  # splat constants: one element, materialised by the fusion reading it
        self.calls: dict[int, str] = {}  # func.call node -> callee name


def _body_ops(fn: Any) -> list:
    """The operations of ``fn``'s body block in order, terminator included (as ``block.operations``).

    Collected by one pre-order walk that skips every op's regions: the walk hands out plain
    ``Operation`` objects, where iterating ``block.operations`` builds a dialect ``OpView`` per op
    (a class lookup and a Python object, ~3 µs each; a 200k-op chain spent 0.6 s there).
    """
    from jaxlib.mlir import ir

    ops: list = []
    append, skip, advance = ops.append, ir.WalkResult.SKIP, ir.WalkResult.ADVANCE
    inside = False

    def visit(op: Any) -> Any:
        nonlocal inside
        if inside:
            append(op)
            return skip
        inside = True  # pre-order: the first op visited is the function itself; descend into its body
        return advance

    fn.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return ops


def _walk_entry(fn: Any, block: Any, types: TypeTable, coster: _Coster) -> _Walk:
    """One pass over the entry block: the hot loop of the front end (see the module docstring).

    Per op it only crosses into the bindings for the name, operands, results, result types and
    location, and appends to a few lists; everything derivable (value columns, edge destinations,
    costs of elementwise and data-movement ops) is computed afterwards with numpy.
    """
    w = _Walk()
    args = list(block.arguments)
    w.arg_types = [types(a.type) for a in args]
    vid: dict[Any, int] = {a: i for i, a in enumerate(args)}
    vinfo: list[TypeInfo] = list(w.arg_types)  # TypeInfo per value id
    operands, dim_maps, dim_map = w.operands, w.dim_maps, DimMapper(coster.funcs).op
    kinds, names, category, first = w.kinds, w.names, w.category, w.first
    edge_v, n_operands, n_results = w.edge_v, w.n_operands, w.n_results
    category_of = _CATEGORY.get
    tcache: dict[Any, TypeInfo] = {}
    file_names: dict[str, str] = {}
    nv = len(args)
    named_locs = True  # whether the last location was a NameLoc: try its reader first (a miss raises)
    n = -1
    for op in _body_ops(fn):  # entry_ops inlined: the generator costs ~1 µs per op
        kind = op.name
        if kind in _TERMINATORS:
            continue
        n += 1
        opnds = op.operands  # indexed, not iterated: iteration costs twice as much per operand
        k = len(opnds)
        if k == 1:
            ids: tuple[int, ...] = (vid[opnds[0]],)
        elif k == 2:
            ids = (vid[opnds[0]], vid[opnds[1]])
        else:
            ids = tuple(map(vid.__getitem__, opnds))
        edge_v += ids
        operands.append(ids)
        n_operands.append(len(ids))
        try:  # one result: the cheapest binding call (listing results builds a list object per op)
            results = (op.result,)
        except ValueError:  # none or several
            results = op.results
        outs = []
        for r in results:
            vid[r] = nv
            nv += 1
            ty = r.type
            t = tcache.get(ty)
            if t is None:
                t = tcache[ty] = types(ty)
            outs.append(t)
            vinfo.append(t)
        loc = op.location
        if named_locs:
            try:
                names.append(loc.name_str)
            except AttributeError:
                named_locs = False
                names.append(_quoted_name(loc))
        else:  # file locations so far (text without locations): no NameLoc attempt, which raises
            try:
                file = loc.filename
            except AttributeError:
                named_locs = True
                names.append(location_name(loc))
            else:
                nm = file_names.get(file)  # the name depends on the file name only (the first quoted string)
                if nm is None:
                    nm = file_names[file] = _file_name(loc, file)
                names.append(nm)
        kinds.append(kind)
        n_results.append(len(outs))
        if len(outs) == 1:
            first.append(outs[0])
        else:
            first.append(outs[0] if outs else _NO_RESULT)
            w.multi[n] = outs
        cat = category_of(kind, _SPECIAL)
        category.append(cat)
        if cat == _SPECIAL:
            if len(op.regions):
                captured: set[int] = set()
                _captures(op, vid, captured)
                w.captures += [(i, n) for i in captured]
            in_bytes = float(sum(vinfo[i].nbytes for i in set(ids)))
            cost = C.op_cost(kind, op, [vinfo[i] for i in ids], outs, coster.body, in_bytes=in_bytes,
                             memo=coster.memo)
            if cost.unknown:
                coster.unknown[cost.unknown] += 1
            w.special[n] = cost
            if kind == "func.call":
                w.calls[n] = op.attributes["callee"].value
        elif cat == _FREE and kind == "sdy.sharding_constraint":
            w.constraint_ops.append((n, op))
        elif cat == _CONSTANT and _is_splat(op):
            w.splats.append(n)
        dim_maps.append(dim_map(kind, op, ids, outs, vinfo, cost.dims if cat == _SPECIAL else None))
    ret = entry_return(block)
    w.results = [] if ret is None else [vid[v] for v in ret.operands]
    return w


def _is_splat(op: Any) -> bool:
    """Whether a ``stablehlo.constant`` holds one repeated element (``dense<c>``): no resident data."""
    try:
        return bool(getattr(op.attributes["value"], "is_splat", False))
    except KeyError:
        return False


def _operand_infos(op: Any, types: TypeTable) -> tuple[list[TypeInfo], float]:
    """Operand types in order, and the bytes of the distinct operands (an op reads a value once)."""
    seen = set()
    ins = []
    in_bytes = 0
    for v in op.operands:
        t = types(v.type)
        ins.append(t)
        if v not in seen:
            seen.add(v)
            in_bytes += t.nbytes
    return ins, float(in_bytes)

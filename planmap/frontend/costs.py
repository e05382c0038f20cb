"""FLOPs and bytes of StableHLO (and chlo/sdy) operations — the whole opset, never a crash.

Conventions (chosen to agree with XLA's ``HloCostAnalysis``, which ``compile().cost_analysis()``
reports, so that planmap's estimates can be checked against the compiler):

* A multiply-add is 2 FLOPs. ``dot_general``: ``2 * |result| * |contracting dims|``. ``dot`` (legacy,
  emitted by TensorFlow) contracts the last lhs dim with the first rhs dim.
* ``convolution``: 2 FLOPs per multiply-add that touches real input — taps that fall into padding or
  between dilated input elements are not counted (as XLA does). Feature groups are in the kernel's
  input-feature size already; batch groups shrink the output batch. Both are exact.
* Elementwise ops: 1 FLOP per result element, transcendental ones included (XLA reports those as a
  separate "transcendentals" count; a placement cost model needs them in the work, so they are here).
* Reductions: the reducer body's scalar FLOPs once per combined element — ``reduce``:
  ``(|input| - |result|) * body``; ``reduce_window``: ``|result| * (|window| - 1) * body``;
  ``scatter``: ``|updates| * body``; ``sort``: ``|input| * ceil(log2 n) * comparator``.
* Data movement (reshape, broadcast, transpose, slice, gather, pad, ...) and constants: 0 FLOPs.
* Bytes accessed: distinct operand bytes + result bytes; sharding annotations and tuple plumbing are
  free (0 bytes) because they move no data at run time.
* Ops with bodies (``while``, ``case``, ``if``, ``func.call``, ``composite``, ``sdy.manual_computation``,
  ``chlo.scan``) are costed by the caller (:mod:`planmap.frontend.stablehlo`) from their bodies.
* Deprecated ``einsum``/``unary_einsum``: 2 FLOPs (1 for unary) per point of the index space;
  ``dynamic_conv`` like a convolution without padding.
* An op kind not listed here is costed conservatively from its bytes (1 FLOP per result element,
  operand + result bytes) and reported, once per load, in a :class:`CostWarning`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.frontend.tensors import TypeInfo
from planmap.graph import DimRoles

__all__ = [
    "CostWarning",
    "OpCost",
    "ELEMENTWISE",
    "TRANSCENDENTAL",
    "DATA_MOVEMENT",
    "FREE",
    "CONTRACTIONS",
    "BODY_OPS",
    "SPECIAL",
    "FREE_CUSTOM_CALLS",
    "op_cost",
    "scalar_body_flops",
    "dot_general_roles",
    "conv_window_taps",
    "is_known",
]


class CostWarning(UserWarning):
    """Some op kinds have no cost formula and were costed from their bytes."""


_SH = "stablehlo."
_CH = "chlo."
TRANSCENDENTAL = frozenset(
    [_SH + k for k in ("exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "rsqrt", "sqrt",
                       "cbrt", "tanh", "tan", "sine", "cosine", "atan2", "power")]
    + [_CH + k for k in ("acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "cosh", "sinh", "tan",
                         "digamma", "erf", "erf_inv", "erfc", "lgamma", "polygamma", "zeta", "_asin_acos_kernel",
                         "broadcast_atan2", "broadcast_power", "broadcast_polygamma", "broadcast_zeta")])
ELEMENTWISE = TRANSCENDENTAL | frozenset(
    [_SH + k for k in ("abs", "add", "and", "ceil", "clamp", "compare", "complex", "convert", "count_leading_zeros",
                       "divide", "floor", "imag", "is_finite", "maximum", "minimum", "multiply", "negate", "not",
                       "or", "popcnt", "real", "reduce_precision", "remainder", "round_nearest_afz",
                       "round_nearest_even", "select", "shift_left", "shift_right_arithmetic",
                       "shift_right_logical", "sign", "subtract", "xor", "uniform_quantize", "uniform_dequantize",
                       "rng")]
    + [_CH + k for k in ("broadcast_add", "broadcast_and", "broadcast_compare", "broadcast_complex",
                         "broadcast_divide", "broadcast_maximum", "broadcast_minimum", "broadcast_multiply",
                         "broadcast_next_after", "broadcast_or", "broadcast_remainder", "broadcast_select",
                         "broadcast_shift_left", "broadcast_shift_right_arithmetic",
                         "broadcast_shift_right_logical", "broadcast_subtract", "broadcast_xor", "conj", "is_inf",
                         "is_neg_inf", "is_pos_inf", "mulhi", "next_after", "square")])
DATA_MOVEMENT = frozenset(
    [_SH + k for k in ("broadcast", "broadcast_in_dim", "reshape", "transpose", "slice", "dynamic_slice",
                       "dynamic_update_slice", "concatenate", "pad", "reverse", "gather", "iota", "bitcast_convert",
                       "dynamic_broadcast_in_dim", "dynamic_iota", "dynamic_pad", "dynamic_reshape",
                       "dynamic_gather", "real_dynamic_slice", "torch_index_select", "get_dimension_size",
                       "set_dimension_size", "constant", "rng_bit_generator", "all_gather", "all_to_all",
                       "collective_permute", "collective_broadcast", "send", "recv", "infeed", "outfeed",
                       "async_start", "async_done")]
    + [_CH + "constant", _CH + "constant_like", "sdy.constant", "sdy.all_gather", "sdy.all_slice", "sdy.all_to_all",
       "sdy.collective_permute", "sdy.reshard"])
FREE = frozenset(
    [_SH + k for k in ("optimization_barrier", "get_tuple_element", "tuple", "after_all", "create_token",
                       "partition_id", "replica_id", "return")]
    + ["sdy.sharding_constraint", "sdy.sharding_group", "sdy.propagation_barrier", "sdy.data_flow_edge",
       "sdy.func_data_flow_edge", "sdy.replicated_to_unreduced", "sdy.sharded_to_unreduced", "sdy.return",
       "sdy.mesh", "func.return"])
CONTRACTIONS = frozenset([_SH + "dot_general", _SH + "dot", _SH + "convolution"])
BODY_OPS = frozenset([_SH + "while", _SH + "case", _SH + "if", "func.call", _SH + "composite",
                      "sdy.manual_computation", "sdy.named_computation", _CH + "scan"])
SPECIAL = CONTRACTIONS | frozenset(
    [_SH + k for k in ("dynamic_conv", "einsum", "unary_einsum", "reduce", "reduce_window", "select_and_scatter",
                       "scatter", "sort", "map", "fft", "cholesky", "triangular_solve", "batch_norm_training",
                       "batch_norm_inference", "batch_norm_grad", "all_reduce", "reduce_scatter", "cross-replica-sum",
                       "custom_call")]
    + [_CH + "top_k", _CH + "ragged_dot", "sdy.all_reduce", "sdy.reduce_scatter"])
# custom_call targets that JAX emits as annotations: they move no data.
FREE_CUSTOM_CALLS = frozenset(["Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "ShardBarrierFrom",
                               "ShardBarrierTo", "annotate_device_placement", "MoveToHost", "MoveToDevice",
                               "X64Combine", "X64SplitLow", "X64SplitHigh", "LayoutConstraint"])
_BATCH_NORM_FLOPS = {"batch_norm_training": 7, "batch_norm_inference": 5, "batch_norm_grad": 11}


def is_known(kind: str) -> bool:
    """True when ``kind`` has a cost formula (bodies are costed by the walker)."""
    return kind in ELEMENTWISE or kind in DATA_MOVEMENT or kind in FREE or kind in SPECIAL or kind in BODY_OPS


@dataclass(frozen=True)
class OpCost:
    """FLOPs, bytes accessed and peak-selecting dtype of one op; ``unknown`` names an uncosted kind."""

    flops: float
    bytes: float
    dtype: str
    dims: DimRoles | None = None
    unknown: str | None = None


def _attr(op: Any, name: str) -> Any:
    return op.attributes.get(name, None)


def _ints(attr: Any) -> list[int]:
    """Integers of a dense elements / dense array attribute (splats expanded), [] when absent."""
    if attr is None:
        return []
    try:
        return [int(x) for x in np.asarray(attr).reshape(-1)]
    except (TypeError, ValueError):
        return [int(x) for x in attr]


def _int(attr: Any, default: int) -> int:
    return default if attr is None else int(attr.value)


def scalar_body_flops(region: Any) -> int:
    """Scalar FLOPs of one application of a reducer/comparator body (at least 1)."""
    n = 0
    for block in region.blocks:
        for op in block.operations:
            if op.operation.name in ELEMENTWISE:
                n += 1
    return max(n, 1)


def dot_general_roles(lhs_rank: int, rhs_rank: int, lb: Sequence[int], rb: Sequence[int], lc: Sequence[int],
                      rc: Sequence[int]) -> DimRoles:
    """DimRoles of a dot_general: result dims are batch, then lhs free, then rhs free (StableHLO's order)."""
    lf = tuple(d for d in range(lhs_rank) if d not in lb and d not in lc)
    rf = tuple(d for d in range(rhs_rank) if d not in rb and d not in rc)
    nb = len(lb)
    return DimRoles(op="dot_general", lhs_batch=tuple(lb), rhs_batch=tuple(rb), lhs_contracting=tuple(lc),
                    rhs_contracting=tuple(rc), lhs_free=lf, rhs_free=rf, out_batch=tuple(range(nb)),
                    out_lhs_free=tuple(range(nb, nb + len(lf))),
                    out_rhs_free=tuple(range(nb + len(lf), nb + len(lf) + len(rf))))


def _dot_general(op: Any, ins: list[TypeInfo], outs: list[TypeInfo], memo: dict | None) -> tuple[float, DimRoles]:
    from jaxlib.mlir.dialects import stablehlo

    attr = op.attributes["dot_dimension_numbers"]
    key = (attr, id(ins[0]), id(ins[1]), id(outs[0]))  # TypeInfos are unique per type within one load
    if memo is not None and key in memo:
        return memo[key]
    dn = stablehlo.DotDimensionNumbers(attr)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    lb, rb = list(dn.lhs_batching_dimensions), list(dn.rhs_batching_dimensions)
    lhs = ins[0].type.shape
    k = math.prod(lhs[d] for d in lc)
    roles = dot_general_roles(len(lhs), ins[1].type.rank, lb, rb, lc, rc)
    result = (2.0 * outs[0].elements * k, roles)
    if memo is not None:
        memo[key] = result
    return result


def _dot(ins: list[TypeInfo], outs: list[TypeInfo]) -> tuple[float, DimRoles]:
    lhs, rhs = ins[0].type.shape, ins[1].type.shape
    k = lhs[-1] if lhs else 1
    lf = (0,) if len(lhs) == 2 else ()
    rf = (1,) if len(rhs) == 2 else ()
    roles = DimRoles(op="dot", lhs_contracting=(len(lhs) - 1,), rhs_contracting=(0,), lhs_free=lf, rhs_free=rf,
                     out_lhs_free=tuple(range(len(lf))), out_rhs_free=tuple(range(len(lf), len(lf) + len(rf))))
    return 2.0 * outs[0].elements * k, roles


def conv_window_taps(in_size: int, kernel: int, out_size: int, stride: int, pad_lo: int, lhs_dil: int,
                     rhs_dil: int) -> int:
    """(output position, kernel tap) pairs along one spatial dim whose input element is real.

    Input position of tap ``k`` for output ``o``: ``o*stride + k*rhs_dil - pad_lo`` in the
    lhs-dilated input; it is real when inside ``[0, (in-1)*lhs_dil]`` and on a multiple of ``lhs_dil``.
    """
    o = np.arange(out_size, dtype=np.int64)[:, None]
    k = np.arange(kernel, dtype=np.int64)[None, :]
    pos = o * stride + k * rhs_dil - pad_lo
    ok = (pos >= 0) & (pos <= (in_size - 1) * lhs_dil) & (pos % lhs_dil == 0)
    return int(ok.sum())


def _convolution(op: Any, ins: list[TypeInfo], outs: list[TypeInfo]) -> tuple[float, DimRoles]:
    from jaxlib.mlir.dialects import stablehlo

    dn = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    lhs, rhs, out = ins[0].type.shape, ins[1].type.shape, outs[0].type.shape
    in_sp, k_sp, o_sp = (list(dn.input_spatial_dimensions), list(dn.kernel_spatial_dimensions),
                         list(dn.output_spatial_dimensions))
    n = len(in_sp)
    strides = _ints(_attr(op, "window_strides")) or [1] * n
    lhs_dil = _ints(_attr(op, "lhs_dilation")) or [1] * n
    rhs_dil = _ints(_attr(op, "rhs_dilation")) or [1] * n
    pad = _ints(_attr(op, "padding")) or [0] * (2 * n)
    taps = 1
    for i in range(n):
        taps *= conv_window_taps(lhs[in_sp[i]], rhs[k_sp[i]], out[o_sp[i]], strides[i], pad[2 * i], lhs_dil[i],
                                 rhs_dil[i])
    fgc = _int(_attr(op, "feature_group_count"), 1)
    bgc = _int(_attr(op, "batch_group_count"), 1)
    macs = out[dn.output_batch_dimension] * out[dn.output_feature_dimension] * rhs[
        dn.kernel_input_feature_dimension] * taps
    roles = DimRoles(op="convolution", lhs_batch=(dn.input_batch_dimension,),
                     lhs_contracting=(dn.input_feature_dimension,),
                     rhs_contracting=(dn.kernel_input_feature_dimension,),
                     rhs_free=(dn.kernel_output_feature_dimension,), out_batch=(dn.output_batch_dimension,),
                     out_rhs_free=(dn.output_feature_dimension,), lhs_spatial=tuple(in_sp), rhs_spatial=tuple(k_sp),
                     out_spatial=tuple(o_sp), feature_group_count=fgc, batch_group_count=bgc)
    return 2.0 * macs, roles


def _einsum(op: Any, ins: list[TypeInfo]) -> float:
    """Legacy einsum ops: one multiply-add (2 FLOPs) per point of the full index space (1 for unary)."""
    config = op.attributes["einsum_config"].value
    inputs = config.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for spec, t in zip(inputs, ins, strict=False):
        for letter, size in zip(spec.strip(), t.type.shape, strict=False):
            sizes[letter] = size
    return (2.0 if len(inputs) > 1 else 1.0) * math.prod(sizes.values())


def _window_size(op: Any) -> int:
    return math.prod(_ints(_attr(op, "window_dimensions")) or [1])


def _special_flops(kind: str, op: Any, ins: list[TypeInfo], outs: list[TypeInfo],
                   memo: dict | None) -> tuple[float, DimRoles | None]:
    short = kind.split(".", 1)[1]
    out_n = outs[0].elements if outs else 0
    if short == "dot_general":
        return _dot_general(op, ins, outs, memo)
    if short == "dot":
        return _dot(ins, outs)
    if short in ("convolution", "dynamic_conv"):  # dynamic_conv: its padding operand is taken as zero
        return _convolution(op, ins, outs)
    if short in ("einsum", "unary_einsum"):
        return _einsum(op, ins), None
    if short in ("reduce", "all_reduce", "reduce_scatter", "cross-replica-sum", "map", "scatter",
                 "reduce_window", "select_and_scatter", "sort"):
        body = scalar_body_flops(op.regions[0]) if len(op.regions) else 1
        if short == "reduce":
            return float(max(ins[0].elements - out_n, 0) * body), None
        if short in ("all_reduce", "reduce_scatter", "cross-replica-sum"):
            return float(sum(i.elements for i in ins) * body), None
        if short == "map":
            return float(out_n * body), None
        if short == "scatter":
            n_in = (len(ins) - 1) // 2
            return float(sum(i.elements for i in ins[n_in + 1:]) * body), None
        if short == "reduce_window":
            return float(out_n * max(_window_size(op) - 1, 1) * body), None
        if short == "select_and_scatter":
            scatter = scalar_body_flops(op.regions[1]) if len(op.regions) > 1 else 1
            return float(ins[1].elements * (_window_size(op) * body + scatter)), None
        dim = _int(_attr(op, "dimension"), -1)
        shape = ins[0].type.shape
        n = shape[dim] if shape else 1
        return float(ins[0].elements * max(math.ceil(math.log2(max(n, 2))), 1) * body), None
    if short == "fft":
        lengths = _ints(_attr(op, "fft_length")) or [1]
        n = math.prod(lengths)
        batch = ins[0].elements // max(n, 1)
        return 5.0 * batch * n * max(math.log2(max(n, 2)), 1.0), None
    if short == "cholesky":
        shape = ins[0].type.shape
        n = shape[-1] if shape else 1
        return ins[0].elements / max(n * n, 1) * n**3 / 3.0, None
    if short == "triangular_solve":
        a = ins[0].type.shape
        n = a[-1] if a else 1
        return float(ins[1].elements * n), None  # b is [..., n, k] (or [..., k, n]): n*n*k per batch
    if short.startswith("batch_norm_"):
        return float(_BATCH_NORM_FLOPS[short] * ins[0].elements), None
    if short == "top_k":
        k = outs[0].type.shape[-1] if outs and outs[0].type.shape else 1
        return float(ins[0].elements * max(math.ceil(math.log2(max(k, 2))), 1)), None
    if short == "ragged_dot":
        lhs, rhs = ins[0].type.shape, ins[1].type.shape
        return 2.0 * ins[0].elements * (rhs[-1] if rhs else 1) if lhs else 0.0, None
    return 0.0, None


def op_cost(kind: str, op: Any, ins: list[TypeInfo], outs: list[TypeInfo],
            body: Callable[[Any], tuple[float, float, str]] | None = None, *, in_bytes: float | None = None,
            memo: dict | None = None) -> OpCost:
    """Cost of one op; ``ins`` are its operand types (positional), ``outs`` its result types.

    ``in_bytes``: bytes of its *distinct* operands (default: all of ``ins``). ``body(op)`` returns
    ``(flops, bytes, dtype)`` for ops in :data:`BODY_OPS`; without it they are costed from their bytes
    like an unknown op. ``memo``: a dict the caller keeps per load, to reuse results of identical ops.
    """
    out_bytes = sum(o.nbytes for o in outs)
    io_bytes = float((sum(i.nbytes for i in ins) if in_bytes is None else in_bytes) + out_bytes)
    dtype = outs[0].type.dtype if outs else (ins[0].type.dtype if ins else "")
    if kind in ELEMENTWISE:
        return OpCost(float(outs[0].elements if outs else 0), io_bytes, dtype)
    if kind in DATA_MOVEMENT:
        return OpCost(0.0, io_bytes, dtype)
    if kind in FREE:
        return OpCost(0.0, 0.0, dtype)
    if kind in BODY_OPS and body is not None:
        flops, nbytes, body_dtype = body(op)
        return OpCost(flops, nbytes, body_dtype or dtype)
    if kind == _SH + "custom_call":
        target = _attr(op, "call_target_name")
        name = target.value if target is not None and hasattr(target, "value") else "?"
        if name in FREE_CUSTOM_CALLS:
            return OpCost(0.0, 0.0, dtype)
        return OpCost(float(sum(o.elements for o in outs)), io_bytes, dtype, unknown=f"{kind} @{name}")
    if kind in SPECIAL:
        try:
            flops, dims = _special_flops(kind, op, ins, outs, memo)
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError):
            # an op whose attributes are not what the opset says (a newer/older StableHLO): cost by bytes
            return OpCost(float(sum(o.elements for o in outs)), io_bytes, dtype, unknown=kind)
        if kind in CONTRACTIONS and ins:
            dtype = ins[0].type.dtype
        return OpCost(float(flops), io_bytes, dtype, dims)
    return OpCost(float(sum(o.elements for o in outs)), io_bytes, dtype, unknown=kind)

"""Static trip counts of ``stablehlo.while`` loops.

``jax.lax.fori_loop`` and ``jax.lax.scan`` (and TensorFlow's ``tf.while_loop`` with a constant bound)
lower to a ``while`` whose condition compares one loop-carried integer with a bound, and whose body
adds a constant to it. When the start, the step and the bound are constants (in the module, or
loop-carried unchanged from a constant), the trip count is known exactly; otherwise the caller uses
the spec's ``loop_trip_count`` estimate.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["static_trip_count", "constant_int"]

_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def _owner_op(value: Any) -> Any | None:
    from jaxlib.mlir import ir

    if not isinstance(value, ir.OpResult):
        return None
    owner = value.owner
    return getattr(owner, "operation", owner)


def constant_int(value: Any) -> int | None:
    """The integer held by ``value`` if it is a scalar (or splat) integer ``stablehlo.constant``."""
    from jaxlib.mlir import ir

    op = _owner_op(value)
    if op is None or op.name != "stablehlo.constant":
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseIntElementsAttr):
        return None
    if attr.is_splat:
        return int(ir.IntegerAttr(attr.get_splat_value()).value)
    return int(attr[0]) if len(attr) == 1 else None


def _block_arg_index(value: Any, block: Any) -> int | None:
    from jaxlib.mlir import ir

    if isinstance(value, ir.BlockArgument):
        n = value.arg_number
        if n < len(block.arguments) and block.arguments[n] == value:
            return n
    return None


def static_trip_count(op: Any) -> int | None:
    """Exact trip count of a ``stablehlo.while`` ``op``, or None when it is not recognisably static."""
    try:
        return _trip_count(op)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError):
        return None


def _trip_count(op: Any) -> int | None:
    cond_block = op.regions[0].blocks[0]
    body_block = op.regions[1].blocks[0]
    cond_ops = list(cond_block.operations)
    body_ops = list(body_block.operations)
    if not cond_ops or not body_ops:
        return None
    term = cond_ops[-1].operation
    if len(term.operands) != 1:
        return None
    cmp = _owner_op(term.operands[0])
    if cmp is None or cmp.name != "stablehlo.compare":
        return None
    direction = str(cmp.attributes["comparison_direction"]).rstrip(">").split()[-1]
    lhs, rhs = cmp.operands[0], cmp.operands[1]
    inits = list(op.operands)
    body_ret = list(body_ops[-1].operation.operands)

    def loop_invariant_const(v: Any) -> int | None:
        c = constant_int(v)
        if c is not None:
            return c
        j = _block_arg_index(v, cond_block)
        if j is None or j >= len(body_ret) or _block_arg_index(body_ret[j], body_block) != j:
            return None
        return constant_int(inits[j])

    k = _block_arg_index(lhs, cond_block)
    bound = loop_invariant_const(rhs)
    if k is None or bound is None:
        k = _block_arg_index(rhs, cond_block)
        bound = loop_invariant_const(lhs)
        direction = _FLIP.get(direction, direction)
    if k is None or bound is None or k >= len(inits) or k >= len(body_ret):
        return None
    start = constant_int(inits[k])
    step = _step(body_ret[k], body_block, k)
    if start is None or step is None or step == 0:
        return None
    return _count(direction, start, bound, step)


def _step(update: Any, body_block: Any, k: int) -> int | None:
    upd = _owner_op(update)
    if upd is None or upd.name not in ("stablehlo.add", "stablehlo.subtract"):
        return None
    a, b = upd.operands[0], upd.operands[1]
    if _block_arg_index(a, body_block) == k:
        c = constant_int(b)
        return None if c is None else (c if upd.name == "stablehlo.add" else -c)
    if upd.name == "stablehlo.add" and _block_arg_index(b, body_block) == k:
        return constant_int(a)
    return None


def _count(direction: str, start: int, bound: int, step: int) -> int | None:
    if direction == "LT" and step > 0:
        return max(0, math.ceil((bound - start) / step))
    if direction == "LE" and step > 0:
        return max(0, (bound - start) // step + 1)
    if direction == "GT" and step < 0:
        return max(0, math.ceil((start - bound) / -step))
    if direction == "GE" and step < 0:
        return max(0, (start - bound) // -step + 1)
    if direction == "NE" and (bound - start) % step == 0 and (bound - start) // step >= 0:
        return (bound - start) // step
    return None

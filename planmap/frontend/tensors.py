"""Tensor types of a parsed module as planmap sees them: shape, dtype, element count and bytes.

MLIR types are uniqued per context, so a module with 60,000 ops has only a few dozen distinct
types. :class:`TypeTable` converts each distinct ``ir.Type`` once (keyed by the type object, whose
hash is its uniqued storage) — reading ``.shape`` and ``.element_type`` through the Python bindings
for every op would dominate the load time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from planmap.errors import InputError
from planmap.graph import TensorType

__all__ = ["TypeInfo", "TypeTable", "element_bits"]

_FLOAT_BITS = {"f64": 64, "f32": 32, "tf32": 32, "f16": 16, "bf16": 16, "index": 64}
_INT_RE = re.compile(r"^(?:u|s)?i(\d+)$")
_SMALL_FLOAT_RE = re.compile(r"^f(\d+)E\d+M\d+")


def element_bits(dtype: str) -> int:
    """Storage bits of one element of MLIR element type ``dtype`` (i1 is stored as a byte, as XLA does).

    Unknown element types count 32 bits: a guess that keeps byte costs of the rare exotic type
    in the right order of magnitude instead of failing the whole load.
    """
    if dtype in _FLOAT_BITS:
        return _FLOAT_BITS[dtype]
    m = _INT_RE.match(dtype)
    if m:
        bits = int(m.group(1))
        return 8 if bits == 1 else bits
    m = _SMALL_FLOAT_RE.match(dtype)
    if m:
        return int(m.group(1))
    if dtype.startswith("complex<") and dtype.endswith(">"):
        return 2 * element_bits(dtype[8:-1])
    return 32


@dataclass(frozen=True)
class TypeInfo:
    """What the front end needs of one value type."""

    type: TensorType
    elements: int
    nbytes: int

    # ``(type,)``: the outputs entry of a one-result op, shared so 60k ops do not build 60k tuples
    as_tuple: tuple[TensorType, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "as_tuple", (self.type,))


class TypeTable:
    """Converts ``ir.Type`` objects to :class:`TypeInfo`, once per distinct type.

    ``where`` names the artifact in error messages (dynamic shapes are rejected with a hint).
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._cache: dict[Any, TypeInfo] = {}

    def __call__(self, t: Any) -> TypeInfo:
        info = self._cache.get(t)
        if info is None:
            info = self._cache[t] = self._convert(t)
        return info

    def _convert(self, t: Any) -> TypeInfo:
        from jaxlib.mlir import ir

        if isinstance(t, ir.RankedTensorType):
            if not t.has_static_shape:
                raise InputError(f"{self._where}: the module has a dynamic shape ({t}); planmap needs static "
                                 f"shapes: export with concrete shapes (no shape polymorphism)")
            shape = tuple(int(d) for d in t.shape)
            dtype = str(t.element_type)
            n = math.prod(shape)
            return TypeInfo(TensorType(shape, dtype), n, (n * element_bits(dtype) + 7) // 8)
        if isinstance(t, ir.UnrankedTensorType):
            raise InputError(f"{self._where}: the module has an unranked tensor ({t}); planmap needs static "
                             f"shapes: export with concrete shapes (no shape polymorphism)")
        if isinstance(t, ir.TupleType):
            parts = [self(t.get_type(i)) for i in range(t.num_types)]
            return TypeInfo(TensorType((), "tuple"), sum(p.elements for p in parts), sum(p.nbytes for p in parts))
        if isinstance(t, ir.ShapedType):  # vectors, memrefs: not StableHLO, but costable
            try:
                shape = tuple(int(d) for d in t.shape)
            except Exception:
                shape = ()
            dtype = str(t.element_type)
            n = math.prod(shape) if all(d >= 0 for d in shape) else 0
            return TypeInfo(TensorType(shape, dtype), n, (n * element_bits(dtype) + 7) // 8)
        # tokens and other opaque types carry no data planmap can cost
        text = str(t)
        name = "token" if text.endswith("token") else text
        return TypeInfo(TensorType((), name), 0, 0)

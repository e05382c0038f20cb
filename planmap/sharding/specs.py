"""Sharding specs: which mesh axes split each dim of a tensor.

A :data:`Spec` is a tuple with one entry per tensor dim, each the ascending tuple of mesh axis
indices sharding that dim (``()`` = not split). Internally the sharding model also uses the
equivalent *assignment* form — per mesh axis, the dim it shards or -1 — because it vectorises
(a list of specs is an ``(n, axes)`` int array); :func:`to_assignment` and :func:`from_assignment`
convert. A spec is valid for a shape when no axis is used twice and every dim is divisible by the
product of its axes' sizes. Plan files spell specs the JAX way (:func:`partition_spec`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["Spec", "replicated", "shards", "is_valid", "valid_specs", "to_assignment", "from_assignment",
           "assignments_valid", "partition_spec", "from_partition_spec"]

Spec = tuple[tuple[int, ...], ...]


def replicated(rank: int) -> Spec:
    return ((),) * rank


def shards(spec: Spec, sizes: Sequence[int]) -> int:
    """Number of pieces a tensor is split into: the product of the sizes of all axes used."""
    return math.prod(sizes[a] for dim in spec for a in dim)


def is_valid(spec: Spec, shape: Sequence[int], sizes: Sequence[int]) -> bool:
    """No axis used twice, axes ascending within a dim, every dim divisible by its axes' sizes."""
    if len(spec) != len(shape):
        return False
    used = [a for dim in spec for a in dim]
    if len(set(used)) != len(used) or any(a < 0 or a >= len(sizes) for a in used):
        return False
    return all(list(dim) == sorted(dim) and n % math.prod(sizes[a] for a in dim) == 0
               for dim, n in zip(spec, shape, strict=True))


def to_assignment(spec: Spec, num_axes: int) -> tuple[int, ...]:
    """Per mesh axis, the dim of ``spec`` it shards (-1: none)."""
    out = [-1] * num_axes
    for d, dim in enumerate(spec):
        for a in dim:
            out[a] = d
    return tuple(out)


def from_assignment(assignment: Sequence[int], rank: int) -> Spec:
    """The spec of a per-axis assignment (axes ascending within each dim)."""
    return tuple(tuple(a for a, d in enumerate(assignment) if d == j) for j in range(rank))


def assignments_valid(asg: np.ndarray, shape: Sequence[int], sizes: Sequence[int]) -> np.ndarray:
    """(n,) bool: which rows of an ``(n, axes)`` assignment array give a divisible spec for ``shape``."""
    ok = np.ones(len(asg), bool)
    sz = np.asarray(sizes, np.int64)
    for j, n in enumerate(shape):
        prod = np.prod(np.where(asg == j, sz, 1), axis=1)
        ok &= n % prod == 0
    return ok & np.all(asg < len(shape), axis=1)


def valid_specs(shape: Sequence[int], sizes: Sequence[int]) -> np.ndarray:
    """(n, axes) assignments of every valid spec of ``shape`` (replicated first; size-1 axes unused)."""
    options = [[-1] + (list(range(len(shape))) if s > 1 else []) for s in sizes]
    asg = np.array(list(itertools.product(*options)), np.int64).reshape(-1, len(sizes))
    return asg[assignments_valid(asg, shape, sizes)]


def partition_spec(spec: Spec, axis_names: Sequence[str]) -> list:
    """The JAX PartitionSpec entries of ``spec``: None, an axis name, or a list of names per dim."""
    return [None if not dim else axis_names[dim[0]] if len(dim) == 1 else [axis_names[a] for a in dim]
            for dim in spec]


def from_partition_spec(entries: Sequence, axis_names: Sequence[str]) -> Spec:
    """Inverse of :func:`partition_spec` (raises ``ValueError`` for an unknown axis name)."""
    index = {n: i for i, n in enumerate(axis_names)}

    def axes(e) -> tuple[int, ...]:
        names = () if e is None else (e,) if isinstance(e, str) else tuple(e)
        unknown = [n for n in names if n not in index]
        if unknown:
            raise ValueError(f"unknown mesh axis {unknown[0]!r}; the mesh has {', '.join(axis_names)}")
        return tuple(index[n] for n in names)

    return tuple(axes(e) for e in entries)

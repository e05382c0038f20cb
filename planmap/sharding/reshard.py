"""Resharding: the cost of turning a tensor held in spec P into the spec Q a consumer requires.

Axis by axis (specs in assignment form: per mesh axis, the dim it splits or -1):

* same dim (or both unsplit) → free;
* P splits dim i, Q does not use the axis → all-gather over the axis (listed as one collective per
  gathered dim, over all its axes, as XLA emits it);
* P does not use the axis, Q splits dim j → free (each device slices its part locally);
* P splits dim i, Q splits dim j ≠ i → all-to-all over the axis.

Every collective moves ``B / shards(Q)`` bytes per device (what a device holds after resharding) —
a documented approximation that ignores the order of the axes. Costs are matrices over a list of
producer specs × a list of required specs, vectorised; :class:`ReshardCache` keys them by
(shape, bytes, P list, Q list), so repeated layers compute each matrix once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planmap.sharding.mesh import LogicalMesh

__all__ = ["reshard_matrix", "reshard_collectives", "ReshardCache"]


def _per_device(nbytes: float, q: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    return nbytes / np.prod(np.where(q >= 0, np.asarray(sizes, np.int64), 1), axis=-1)


def reshard_matrix(producer: np.ndarray, required: np.ndarray, nbytes: float, mesh: LogicalMesh) -> np.ndarray:
    """(len(producer), len(required)) seconds to reshard a ``nbytes`` tensor between assignment rows."""
    p, q = np.asarray(producer), np.asarray(required)
    b = _per_device(nbytes, q, mesh.axis_sizes)
    total = np.zeros((len(p), len(q)))
    for a in range(mesh.num_axes):
        pa, qa = p[:, a][:, None], q[:, a][None, :]
        gather = (pa >= 0) & (qa < 0)
        a2a = (pa >= 0) & (qa >= 0) & (pa != qa)
        if gather.any():
            total += np.where(gather, mesh.allgather(b, a)[None, :], 0.0)
        if a2a.any():
            total += np.where(a2a, mesh.alltoall(b, a)[None, :], 0.0)
    return total


def reshard_collectives(producer: Sequence[int], required: Sequence[int], nbytes: float,
                        mesh: LogicalMesh) -> tuple[tuple[str, tuple[int, ...], float], ...]:
    """The ``(kind, axes, bytes)`` collectives of one reshard: one all-gather per dim that is gathered (over
    every axis that split it, as XLA gathers a dim in one collective over the product of its axes; its cost
    is still the sum of the per-axis terms), one all-to-all per axis that moves a split to another dim."""
    b = float(_per_device(nbytes, np.asarray(required), mesh.axis_sizes))
    if b <= 0:
        return ()
    gathers: dict[int, list[int]] = {}
    out: list[tuple[str, tuple[int, ...], float]] = []
    for a, (pa, qa) in enumerate(zip(producer, required, strict=True)):
        if mesh.axis_sizes[a] <= 1:
            continue
        if pa >= 0 and qa < 0:
            gathers.setdefault(int(pa), []).append(a)
        elif pa >= 0 and pa != qa:
            out.append(("all-to-all", (a,), b))
    return tuple([("all-gather", tuple(axes), b) for _, axes in sorted(gathers.items())] + out)


class ReshardCache:
    """Reshard matrices of one mesh keyed by (shape, bytes, P list, Q list); owned by one table build."""

    def __init__(self, mesh: LogicalMesh) -> None:
        self.mesh = mesh
        self._cache: dict[tuple, np.ndarray] = {}
        self.hits = 0

    def matrix(self, shape: tuple[int, ...], nbytes: float, producer: np.ndarray, required: np.ndarray) -> np.ndarray:
        key = (shape, float(nbytes), producer.shape, producer.tobytes(), required.shape, required.tobytes())
        m = self._cache.get(key)
        if m is None:
            m = reshard_matrix(producer, required, nbytes, self.mesh)
            m.setflags(write=False)
            self._cache[key] = m
        else:
            self.hits += 1
        return m

    def __len__(self) -> int:
        return len(self._cache)

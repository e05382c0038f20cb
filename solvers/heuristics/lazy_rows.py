"""Rows of a device × device matrix as Python lists, converted only when first read.

The greedy heuristics read transfer charges per (sender, receiver) in tight Python loops, where list
indexing beats numpy scalar access several times over. Converting the whole D × D matrices up front
(``.tolist()``) costs D² Python floats per matrix: on 4,096 devices, six matrices of 16.7 M entries,
seconds and gigabytes before the first decision, although a plan touches the rows of a few devices.
:class:`LazyRows` converts a row on first access and keeps it; the values are the same floats.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LazyRows"]


class LazyRows:
    """``rows[a][b] == matrix[a, b]`` as Python scalars; row ``a`` becomes a list on first use."""

    __slots__ = ("_matrix", "_rows")

    def __init__(self, matrix: np.ndarray) -> None:
        self._matrix = matrix
        self._rows: dict[int, list] = {}

    def __getitem__(self, a: int) -> list:
        row = self._rows.get(a)
        if row is None:
            row = self._rows[a] = self._matrix[a].tolist()
        return row

    def __len__(self) -> int:
        return len(self._matrix)

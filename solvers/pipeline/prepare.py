"""Everything the pipeline DP needs, built once: units in DP order, ideals, stage-cost tables, engine.

Shared by the ``dp`` solver (:mod:`.dp`: the ideals of the unit graph) and PipeDream
(:mod:`.pipedream`: the prefixes of a layer chain), which differ only in the ideal family.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.problem import Problem

from .engine import PipelineDP
from .ideals import enumerate_ideals
from .reductions import merge_free_leaves
from .stage_costs import StageCosts
from .stage_units import DeviceClasses, build_units, device_classes

__all__ = ["PreparedDP", "prepare", "DEFAULT_MAX_IDEALS"]

DEFAULT_MAX_IDEALS = 250_000


@dataclass(frozen=True, eq=False)
class PreparedDP:
    """Everything the DP needs, built once: units in DP order, ideals, stage-cost tables, engine."""

    unit_of: np.ndarray  # (n,) unit of each node, in DP order (reversed pipeline order)
    num_units: int
    bits: np.ndarray
    classes: DeviceClasses
    costs: StageCosts
    engine: PipelineDP
    merged: int = 0  # units merged away by the lossless reductions (free leaves)

    @property
    def num_ideals(self) -> int:
        return len(self.bits)


def prepare(problem: Problem, max_ideals: int = DEFAULT_MAX_IDEALS, bits: np.ndarray | None = None,
            unit_of: np.ndarray | None = None, num_units: int | None = None, reduce: bool = True) -> PreparedDP:
    """Units, ideals (of the reversed contiguity graph: the DP places the last stage first) and tables.

    ``reduce`` merges free leaves first (:mod:`.reductions`; lossless). ``bits``/``unit_of``/``num_units``
    replace the ideal family (PipeDream passes the prefixes of a layer chain)."""
    classes = device_classes(problem)
    merged = 0
    if bits is None:
        units = build_units(problem)
        if reduce:
            units, merged = merge_free_leaves(problem, units)
        U = units.num_units
        unit_of = (U - 1 - units.unit_of).astype(np.int64)
        rev = (U - 1 - units.edges[:, ::-1]) if len(units.edges) else units.edges
        bits = enumerate_ideals(U, rev, max_ideals)
        num_units = U
    elif unit_of is None or num_units is None:
        raise ValueError("prepare: an ideal family (bits) requires its unit_of and num_units")
    level = _popcount(bits)
    costs = StageCosts(problem, unit_of, num_units, classes, bits)
    return PreparedDP(unit_of, num_units, bits, classes, costs, PipelineDP(problem, classes, costs, level), merged)


def _popcount(bits: np.ndarray) -> np.ndarray:
    b = np.ascontiguousarray(bits).view(np.uint8).reshape(len(bits), -1)
    return np.unpackbits(b, axis=1).sum(axis=1).astype(np.int64)

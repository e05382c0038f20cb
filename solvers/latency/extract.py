"""Reading a placement back from a solved latency IP, in the evaluator's terms.

Kept below both the solver (:mod:`.ip`) and the neighbourhood search (:mod:`.search`), which read
every incumbent through :func:`extract`.
"""

from __future__ import annotations

import numpy as np

from planmap.problem import Certificate, Problem, Solution, Stage, Status

from .data import LatencyData
from .report import NAME, VERSION

__all__ = ["extract", "unit_of"]


def extract(model, problem: Problem) -> Solution:
    """The placement held by ``model``'s variables: one stage per used subgraph slot (in start-time
    order, slot order on each device) and one per used CPU device."""
    dt: LatencyData = model.data
    n, S, U = dt.n, dt.num_slots, dt.num_units
    unit_of_node = unit_of(model)
    used = np.unique(unit_of_node)
    ud = dt.unit_dev
    lat = np.array([model.lat[v].value or 0.0 for v in range(n)])

    def key(w: int):
        if w < S:
            return (round(float(model.start[w].value or 0.0), 9), int(ud[w]), int(dt.slot_pos[w]))
        members = np.flatnonzero(unit_of_node == w)
        first = float(min(lat[v] - dt.t[v, ud[w]] for v in members))
        return (round(first, 9), int(ud[w]), 0)

    order = sorted(used.tolist(), key=key)
    stage_of_unit = np.full(U, -1, np.int64)
    stage_of_unit[order] = np.arange(len(order))
    return Solution(stage_of_unit[unit_of_node], tuple(Stage((int(ud[w]),)) for w in order),
                    Certificate(Status.HEURISTIC, NAME, version=VERSION))


def unit_of(model) -> np.ndarray:
    """Unit of each node in the model's current values (the largest x of the node)."""
    dt: LatencyData = model.data
    val = np.full((dt.n, dt.num_units), -1.0)
    for (v, w), var in model.x.items():
        val[v, w] = var.value if var.value is not None else 0.0
    return val.argmax(axis=1)

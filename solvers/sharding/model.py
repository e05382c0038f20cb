"""The sharding integer program over a :class:`~.reduce.Reduced` decision space, as a Pyomo model.

* ``x[c]`` (binary): one column per strategy of every group with more than one strategy (``m.col_group``
  / ``m.col_strategy`` say whose); exactly one per group;
* ``e[j]`` (continuous in [0, 1]): one per entry of every edge matrix (rows p × columns q): the pair of
  layouts the edge is in. ``Σ_q e[p, q]`` = the producer group's strategies with row p, ``Σ_p e[p, q]``
  = the consumer group's strategies with column q; at integer ``x`` the two one-hot marginals fix ``e``;
* ``peak`` (continuous): the largest working set, ≥ each group's (the largest over all ops);
* memory: Σ memory·x + peak ≤ capacity (rows dropped when no layout can exceed it);
* objective: Σ cost·x + Σ matrix·e + the constant groups' costs, seconds per microbatch in
  ``m.time_unit`` units.

Every array is built with numpy; Pyomo components are indexed by flat ranges and their rules read
prepared CSR arrays, so the build costs one Python call per row, not per coefficient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..mip_model import lin as linear
from ..mip_model import new_model
from .reduce import Reduced

__all__ = ["ModelData", "model_data", "build_model", "load_start", "read_choice", "start_values"]

TIME_UNIT = 1e-6  # seconds per model time unit (microseconds keep coefficients near 1)
MEMORY_MARGIN = 1e-6  # share of memory kept free of backend tolerances


@dataclass(frozen=True, eq=False)
class ModelData:
    """Column and row layout of the model (flat numpy arrays; see the module doc)."""

    reduced: Reduced
    free: np.ndarray  # groups with > 1 strategy
    x_off: np.ndarray  # (groups + 1,) first x column of each group (free groups only own columns)
    e_off: np.ndarray  # (edges + 1,) first e column of each edge
    constant: float  # seconds: costs of the one-strategy groups
    const_memory: float  # bytes per device of the one-strategy groups
    peak_lb: float  # bytes: the largest working set of any op in any layout is at least this
    ws_groups: np.ndarray  # groups whose working set can exceed peak_lb
    memory_row: bool  # whether memory can bind
    capacity: float

    @property
    def num_x(self) -> int:
        return int(self.x_off[-1])

    @property
    def num_e(self) -> int:
        return int(self.e_off[-1])


def model_data(red: Reduced) -> ModelData:
    """Columns, constants and which rows are needed (rows that cannot bind are left out)."""
    counts = red.counts
    free = np.flatnonzero(counts > 1)
    x_off = np.zeros(red.num_groups + 1, np.int64)
    x_off[1:] = np.cumsum(np.where(counts > 1, counts, 0))
    sizes = np.array([m.size for m in red.edge_matrix], np.int64)
    e_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    const = counts == 1
    constant = float(sum(red.cost[g][0] for g in np.flatnonzero(const)))
    const_mem = float(sum(red.memory[g][0] for g in np.flatnonzero(const)))
    peak_lb = max((float(w.min()) for w in red.working), default=0.0)
    ws_max = np.array([float(w.max()) for w in red.working])
    ws_groups = np.flatnonzero((ws_max > peak_lb) & (counts > 1))
    worst = const_mem + sum(float(red.memory[g].max()) for g in free) + float(ws_max.max(initial=0.0))
    cap = float(red.tables.capacity)
    return ModelData(red, free, x_off, e_off, constant, const_mem, peak_lb, ws_groups,
                     bool(np.isfinite(cap) and worst > cap * (1 - MEMORY_MARGIN)), cap)


def build_model(red: Reduced, *, data: ModelData | None = None, name: str = "sharding"):
    """The sharding IP of ``red`` as a Pyomo ``ConcreteModel`` (objective in ``m.time_unit`` seconds)."""
    import pyomo.environ as pyo

    dt = data if data is not None else model_data(red)
    u = TIME_UNIT
    counts = red.counts
    m = new_model(f"sharding-ip:{name}", u, dt)

    def lin(coefs, vars_, const=0.0):  # coefficients come as numpy arrays here
        return linear([float(c) for c in coefs], vars_, const)

    # ---------------------------------------------------------------------------------- Sets
    m.G = pyo.Set(initialize=dt.free.tolist(), doc="groups with more than one strategy")
    m.X = pyo.RangeSet(0, dt.num_x - 1, doc="strategy columns of the free groups (group-major)")
    m.Ed = pyo.RangeSet(0, len(red.edge_matrix) - 1, doc="modelled edges (between two free groups)")
    m.EX = pyo.RangeSet(0, dt.num_e - 1, doc="entries (p, q) of the edge matrices, edge-major, row-major")
    out_rows = [(j, p) for j, mat in enumerate(red.edge_matrix) for p in range(mat.shape[0])]
    in_cols = [(j, q) for j, mat in enumerate(red.edge_matrix) for q in range(mat.shape[1])]
    m.OR = pyo.Set(dimen=2, initialize=out_rows, doc="(edge, producer row): a layout the producer may hold")
    m.IC = pyo.Set(dimen=2, initialize=in_cols, doc="(edge, consumer column): a layout the consumer may require")
    m.W = pyo.Set(initialize=dt.ws_groups.tolist(), doc="groups whose working set may be the peak")

    # -------------------------------------------------------------------------------- Params
    m.constant = pyo.Param(initialize=dt.constant / u, doc="cost of the one-strategy groups (time units)")
    m.capacity = pyo.Param(initialize=dt.capacity if np.isfinite(dt.capacity) else 0.0,
                           doc="device memory (bytes)")

    # ---------------------------------------------------------------------------------- Vars
    m.x = pyo.Var(m.X, domain=pyo.Binary, doc="the group runs this strategy")
    m.e = pyo.Var(m.EX, bounds=(0, 1), doc="the edge's producer holds row p and its consumer requires column q")
    m.peak = pyo.Var(bounds=(dt.peak_lb / max(dt.capacity, 1.0) if dt.memory_row else 0.0, None),
                     doc="largest working set (share of memory)")

    def xcols(g):
        return [m.x[c] for c in range(int(dt.x_off[g]), int(dt.x_off[g + 1]))]

    # --------------------------------------------------------------------------- Constraints
    def _one_strategy(m, g):
        return (1, lin(np.ones(counts[g]), xcols(g)), 1)
    m.one_strategy = pyo.Constraint(m.G, doc="every free group runs exactly one strategy", rule=_one_strategy)

    def _marginal(out: bool):
        def rule(m, j, r):
            mat, off = red.edge_matrix[j], int(dt.e_off[j])
            P, Q = mat.shape
            ents = off + (r * Q + np.arange(Q) if out else np.arange(P) * Q + r)
            g = int(red.edge_src[j] if out else red.edge_dst[j])
            sel = np.flatnonzero((red.edge_row[j] if out else red.edge_col[j]) == r)
            cols = dt.x_off[g] + sel
            return (0, lin(np.concatenate([np.ones(len(ents)), -np.ones(len(cols))]),
                           [m.e[int(c)] for c in ents] + [m.x[int(c)] for c in cols]), 0)
        return rule
    m.producer_layout = pyo.Constraint(m.OR, rule=_marginal(True),
                                       doc="an edge's entries of row p sum to the producer's strategies with row p")
    m.consumer_layout = pyo.Constraint(m.IC, rule=_marginal(False),
                                       doc="an edge's entries of column q sum to the consumer's strategies "
                                           "with column q")

    def _ws(m, g):
        c = red.working[g] / dt.capacity
        return lin(np.concatenate([[1.0], -c]), [m.peak] + xcols(g)) >= 0
    m.working_set = pyo.Constraint(m.W if dt.memory_row else [], rule=_ws,
                                   doc="the peak working set is at least every group's")

    def _memory(m, _):
        coefs = np.concatenate([red.memory[g] / dt.capacity for g in dt.free] + [[1.0]])
        vars_ = [v for g in dt.free for v in xcols(g)] + [m.peak]
        return lin(coefs, vars_, dt.const_memory / dt.capacity) <= 1.0 - MEMORY_MARGIN
    m.memory = pyo.Constraint([0] if dt.memory_row else [], rule=_memory,
                              doc="parameters + data + stash + peak working set fit one device")

    # ---------------------------------------------------------------------------- Objective
    xc = np.concatenate([red.cost[g] for g in dt.free] + [np.zeros(0)]) / u
    ec = np.concatenate([mat.ravel() for mat in red.edge_matrix] + [np.zeros(0)]) / u
    nz_x, nz_e = np.flatnonzero(xc), np.flatnonzero(ec)
    m.step = pyo.Objective(expr=lin(np.concatenate([xc[nz_x], ec[nz_e]]),
                                    [m.x[int(c)] for c in nz_x] + [m.e[int(c)] for c in nz_e], float(m.constant)),
                           sense=pyo.minimize, doc="seconds per microbatch: compute + comm + resharding")
    return m


def start_values(dt: ModelData, group_choice: np.ndarray) -> np.ndarray:
    """Values of every column (``x``, then ``e``, then ``peak``) in the layout ``group_choice`` (one strategy
    per group)."""
    red = dt.reduced
    col = np.zeros(dt.num_x + dt.num_e + 1)
    for g in dt.free:
        col[int(dt.x_off[g]) + int(group_choice[g])] = 1.0
    for j, mat in enumerate(red.edge_matrix):
        p = int(red.edge_row[j][int(group_choice[red.edge_src[j]])])
        q = int(red.edge_col[j][int(group_choice[red.edge_dst[j]])])
        col[dt.num_x + int(dt.e_off[j]) + p * mat.shape[1] + q] = 1.0
    peak = max([float(red.working[g][int(group_choice[g])]) for g in range(red.num_groups)], default=0.0)
    col[-1] = max(peak, dt.peak_lb) / max(dt.capacity, 1.0) if dt.memory_row else 0.0
    return col


def load_start(m, group_choice: np.ndarray) -> None:
    """Set every variable of ``m`` to the layout ``group_choice`` (one strategy per group) as a MIP start."""
    dt: ModelData = m.data
    col = start_values(dt, group_choice)
    for c in range(dt.num_x):
        m.x[c].set_value(float(col[c]))
    for c in range(dt.num_e):
        m.e[c].set_value(float(col[dt.num_x + c]))
    m.peak.set_value(float(col[-1]))


def read_choice(m) -> np.ndarray:
    """(groups,) the strategy of every group in the model's current solution."""
    dt: ModelData = m.data
    out = np.zeros(dt.reduced.num_groups, np.int64)
    for g in dt.free:
        vals = [m.x[c].value or 0.0 for c in range(int(dt.x_off[g]), int(dt.x_off[g + 1]))]
        out[g] = int(np.argmax(vals))
    return out

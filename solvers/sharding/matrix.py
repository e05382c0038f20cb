"""The sharding IP of :mod:`.model` as sparse matrices, passed to HiGHS directly (no Pyomo translation).

Same columns, rows and objective as the Pyomo model (which stays the model for every other backend):
columns ``x`` (binary, ``ModelData.x_off`` order), then ``e`` (``ModelData.e_off`` order), then
``peak``; rows ``one_strategy``, ``producer_layout``, ``consumer_layout``, ``working_set``, ``memory``.
Building and translating the Pyomo model costs one Python expression per row — minutes for the
thousands of groups of a 12-layer training step — while these arrays cost milliseconds, so with
HiGHS (the default backend) the time limit goes to the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from planmap.problem import SolveOptions

from .. import mip
from .model import MEMORY_MARGIN, TIME_UNIT, ModelData, start_values

__all__ = ["SparseModel", "sparse_model", "solve_sparse", "start_vector", "choice_of", "satisfies"]


@dataclass(frozen=True, eq=False)
class SparseModel:
    """``min cost·col + offset`` s.t. ``row_lo ≤ A·col ≤ row_hi``, ``col_lo ≤ col ≤ col_hi``, the first
    ``integer`` columns binary; ``A`` in CSR (``start``, ``index``, ``value``). Times in TIME_UNIT."""

    data: ModelData
    cost: np.ndarray
    offset: float
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: int
    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    row_lo: np.ndarray
    row_hi: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.row_lo)

    @property
    def num_cols(self) -> int:
        return len(self.cost)


class _Rows:
    """Rows collected as coordinates (row, column, coefficient) with per-row bounds; :meth:`csr` sorts them."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.n = 0

    def block(self, count: int, lo: float, hi: float) -> int:
        """Open ``count`` rows with bounds [lo, hi]; the first one's id."""
        first = self.n
        self.n += count
        self.lo.append(np.full(count, lo))
        self.hi.append(np.full(count, hi))
        return first

    def add(self, rows, cols, coefs) -> None:
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        self.r.append(np.broadcast_to(rows, cols.shape))
        self.c.append(cols)
        self.v.append(np.broadcast_to(np.asarray(coefs, float), cols.shape))

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r, c, v = (np.concatenate([*x, np.zeros(0, dt)]) for x, dt in ((self.r, np.int64), (self.c, np.int64),
                                                                       (self.v, float)))
        order = np.argsort(r, kind="stable")
        start = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(r, minlength=self.n), out=start[1:])
        return start, c[order], v[order]


def _edge_rows(rows: _Rows, dt: ModelData, base_e: int) -> None:
    """``producer_layout`` then ``consumer_layout`` rows of every modelled edge (as :mod:`.model` orders them)."""
    red = dt.reduced
    for out in (True, False):
        for j, mat in enumerate(red.edge_matrix):
            P, Q = mat.shape
            off = base_e + int(dt.e_off[j])
            g = int(red.edge_src[j] if out else red.edge_dst[j])
            which = red.edge_row[j] if out else red.edge_col[j]
            first = rows.block(P if out else Q, 0.0, 0.0)
            pq = np.arange(P * Q)
            rows.add(first + (pq // Q if out else pq % Q), off + pq, 1.0)
            rows.add(first + which, dt.x_off[g] + np.arange(len(which)), -1.0)


def sparse_model(dt: ModelData) -> SparseModel:
    """The sharding IP of ``dt`` as matrices (see the module doc)."""
    red = dt.reduced
    nx, ne = dt.num_x, dt.num_e
    peak = nx + ne
    cap = max(dt.capacity, 1.0) if np.isfinite(dt.capacity) else 1.0
    rows = _Rows()
    first = rows.block(len(dt.free), 1.0, 1.0)
    counts = np.diff(dt.x_off)[dt.free]
    rows.add(first + np.repeat(np.arange(len(dt.free)), counts), np.arange(nx), 1.0)
    _edge_rows(rows, dt, nx)
    if dt.memory_row:
        for g in dt.ws_groups.tolist():
            cols = np.arange(int(dt.x_off[g]), int(dt.x_off[g + 1]))
            r = rows.block(1, 0.0, np.inf)
            rows.add(r, np.concatenate([[peak], cols]), np.concatenate([[1.0], -red.working[g] / dt.capacity]))
        r = rows.block(1, -np.inf, 1.0 - MEMORY_MARGIN - dt.const_memory / dt.capacity)
        rows.add(r, np.concatenate([np.arange(nx), [peak]]),
                 np.concatenate([red.memory[g] / dt.capacity for g in dt.free] + [[1.0]]))
    cost = np.concatenate([red.cost[g] for g in dt.free] + [mat.ravel() for mat in red.edge_matrix]
                          + [np.zeros(1)]) / TIME_UNIT
    col_lo = np.zeros(nx + ne + 1)
    col_lo[peak] = dt.peak_lb / cap if dt.memory_row else 0.0
    col_hi = np.ones(nx + ne + 1)
    col_hi[peak] = np.inf
    start, index, value = rows.csr()
    return SparseModel(dt, cost, dt.constant / TIME_UNIT, col_lo, col_hi, nx, start, index, value,
                       np.concatenate([*rows.lo, np.zeros(0)]), np.concatenate([*rows.hi, np.zeros(0)]))


def start_vector(sm: SparseModel, group_choice: np.ndarray) -> np.ndarray:
    """Column values of the layout ``group_choice`` (one strategy per group)."""
    return start_values(sm.data, group_choice)


def choice_of(sm: SparseModel, col: np.ndarray) -> np.ndarray:
    """(groups,) the strategy of every group in the column values ``col``."""
    dt = sm.data
    out = np.zeros(dt.reduced.num_groups, np.int64)
    for g in dt.free:
        out[g] = int(np.argmax(col[int(dt.x_off[g]): int(dt.x_off[g + 1])]))
    return out


def solve_sparse(sm: SparseModel, options: SolveOptions, *, start: np.ndarray | None = None,
                 build_time: float = 0.0) -> tuple[mip.MipResult, np.ndarray | None]:
    """Solve ``sm`` with HiGHS: (result in seconds, column values or None)."""
    import highspy

    t0 = time.perf_counter()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = sm.num_cols, sm.num_rows
    lp.col_cost_, lp.offset_ = sm.cost, sm.offset
    lp.col_lower_, lp.col_upper_ = sm.col_lo, sm.col_hi
    lp.row_lower_, lp.row_upper_ = sm.row_lo, sm.row_hi
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = sm.num_cols, sm.num_rows
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = sm.start, sm.index, sm.value
    lp.integrality_ = [highspy.HighsVarType.kInteger] * sm.integer + [highspy.HighsVarType.kContinuous] * (
        sm.num_cols - sm.integer)
    from pyomo.common.tee import capture_output

    with capture_output(capture_fd=True):  # HiGHS prints a banner when created
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    res = mip.run_highs(h, options, scale=TIME_UNIT, start=start,
                        translate_time=build_time + time.perf_counter() - t0)
    if start is not None and res.warm_start == "unknown":  # HiGHS takes a start that satisfies every row
        res = replace(res, warm_start="accepted" if satisfies(sm, start) else "rejected")
    col = np.asarray(h.getSolution().col_value, float) if res.has_solution else None
    return res, col


def satisfies(sm: SparseModel, col: np.ndarray, tol: float = 1e-7) -> bool:
    """Whether column values ``col`` satisfy every bound and row of ``sm`` (binaries integral) to ``tol``."""
    ax = np.add.reduceat(sm.value * col[sm.index], sm.start[:-1]) if len(sm.index) else np.zeros(0)
    ax[np.diff(sm.start) == 0] = 0.0
    ints = col[: sm.integer]
    return bool(np.all(ax >= sm.row_lo - tol) and np.all(ax <= sm.row_hi + tol)
                and np.all(col >= sm.col_lo - tol) and np.all(col <= sm.col_hi + tol)
                and np.all(np.abs(ints - np.round(ints)) <= tol))

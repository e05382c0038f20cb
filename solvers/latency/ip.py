"""Provably optimal single-stream latency placement: the integer program of Tarnawski et al. (2020).

The model is the paper's latency IP (§4 and Appendix A: nodes on CPU cores or on up to ``q``
contiguous subgraphs per accelerator, subgraphs as atomic calls that receive, compute and send;
convexity by a predecessor-closed cover ``z``; start/finish times linked by big-M rows) generalised
to exactly what :func:`planmap.evaluate.evaluate` defines, so the optimum it proves is the
evaluator's optimum:

* charges come from the cluster's :class:`~planmap.cost.CostModel`: a subgraph pays what it
  receives once per value, and what it sends once per value at the most expensive destination; a
  value crossing between two subgraphs of one host-memory device is paid at both ends. When a
  value's charge does not depend on where the other end is (the paper's setting: one ``c_u``),
  the paper's rows are used as they are; otherwise the charge is the maximum over "levels" of
  where the other end may be;
* CPU nodes run in parallel along independent paths; what a CPU node pays to receive is a delay;
* memory per device is evaluate's: distinct parameters x ``param_factor`` + state (+ stash in
  training) + the largest working set;
* pins and unsupported ops (``problem.allowed``), colocation classes.

Strength before brute force (:mod:`.cuts`): two sweeps over the graph bound, for every
node and device, the node's finish and the latency of any placement that runs it there — charging
the transfers a call pays when a neighbour is elsewhere, and the memory a call can hold along a
path, so a path heavier than a device must be cut. Those bounds set each node's time window (and
so every big-M), give disaggregated rows ``T >= sum_u bound(v, u) x[v, u]``, and rule out, before
the model is built, every device on which a node cannot beat the horizon (the best baseline's
latency: the search never leaves the region that beats the warm start) or does not fit alone.
Identical devices are ordered by their first node, empty subgraphs come last, no value flows from a
later call of a device back to an earlier one (symmetry breaking), and the MIP starts from the best
baseline the registry has or the exact DP over contiguous splits finds (:mod:`.splits`;
loaded by :mod:`.start`). The graph is the problem's graph, which is
already coarsened; the solution's assignment is per coarse node, which ``graph.members`` maps back
to every op.

``build_model`` → ``load_warm_start`` → ``solve`` → ``extract``; :class:`LatencyIP` runs them, then
improves the incumbent by large-neighbourhood search (:mod:`.search`) when the time limit
stops the full MIP. The model's data come from :mod:`.data`, the warm start's baselines from
:mod:`.baselines`, the placement read back from :mod:`.extract`, the certificate's fields from :mod:`.report`.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from planmap.crossings import crossings
from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions, Status
from planmap.vocabulary import ObjectiveKind

from .. import mip, mip_backends
from ..mip_model import by_second, lin, new_model
from ..timebox import TimeBoxExpired, time_box
from .anneal import anneal, anneal_budget
from .baselines import BASELINES, best_baseline
from .cuts import add_bound_rows, add_slot_order_rows
from .data import (
    FRONTIER_SECONDS,
    MEMORY_MARGIN,
    PROBE_SECONDS,
    LatencyData,
    charge_levels,
    interchangeable_devices,
    prepare,
)
from .extract import extract
from .moves import MIN_NODES as MOVES_MIN_NODES
from .moves import improve, moves_budget
from .recut import recut, recut_budget
from .report import NAME, _certificate_fields, _interrupted
from .search import neighbourhood_search
from .start import canonical, load_warm_start

__all__ = ["LatencyIP", "LatencyData", "prepare", "build_model", "load_warm_start", "canonical", "solve", "extract",
           "best_baseline", "interchangeable_devices", "neighbourhood_search", "BASELINES"]

LNS_MIN_NODES = 60  # below this the MIP alone is fast enough
LNS_SHARE = 0.5  # share of the time the full MIP gets before neighbourhood search takes over
PROBE_SHARE = 0.1  # share of the time limit the probing lower bound may take
FRONTIER_SHARE = 0.25  # share of the time limit for the frontier DP (it gives up early where ideals do not fit)
BASELINE_SHARE = 0.5  # share of the time limit the start methods may use (all of them together)
BUILD_FLOOR_S = 2.0  # the model build may always take this long (a fixed start-up, like the backend's)
MAX_TABLE_CELLS = 50_000_000  # crossing values x devices²: beyond, the model's dense tables alone take GBs


# -------------------------------------------------------------------------------------- model
def build_model(problem: Problem, *, horizon: float | None = None, data: LatencyData | None = None,
                cuts: bool = True, probe_seconds: float = PROBE_SECONDS,
                frontier_seconds: float = FRONTIER_SECONDS):
    """The latency IP of ``problem`` as a Pyomo ``ConcreteModel`` (times in ``model.time_unit`` s).

    ``horizon`` (seconds) caps the latency (usually the warm start's): the optimum is kept as long as
    some placement reaches it, and every big-M shrinks to it. ``cuts=False`` builds the plain model
    (no time bounds, bound rows, slot-order rows or presolve) — the same optimum, proved slower; it
    is ignored when ``data`` (from :func:`prepare`) is given. ``probe_seconds`` caps the probing that raises
    the latency's lower bound (with a horizon; see :func:`.cuts.probe_lower_bound`), ``frontier_seconds`` the
    frontier DP that raises it first (:mod:`.frontier`).
    """
    import pyomo.environ as pyo

    dt = data if data is not None else prepare(problem, horizon, bounds=cuts, probe_seconds=probe_seconds,
                                               frontier_seconds=frontier_seconds)
    n, S, U, D = dt.n, dt.num_slots, dt.num_units, problem.num_devices
    H = dt.horizon
    unit_dev = dt.unit_dev
    units_on = [np.flatnonzero(unit_dev == d) for d in range(D)]
    xs = dt.allowed[:, unit_dev]  # (n, U) x exists
    src, dst = dt.edges
    m = new_model(f"latency-ip:{problem.name}", dt.time_scale, dt)

    # ---------------------------------------------------------------------------------- Sets
    m.N = pyo.RangeSet(0, n - 1, doc="nodes of the (coarsened) graph, in topological order")
    m.U = pyo.RangeSet(0, U - 1, doc="units: accelerator subgraph slots, then one per CPU device")
    m.S = pyo.RangeSet(0, S - 1, doc="accelerator subgraph slots (q per accelerator, run in order)")
    m.V = pyo.RangeSet(0, len(dt.val_prod) - 1, doc="values some other node consumes")
    m.XI = pyo.Set(dimen=2, initialize=[(int(v), int(w)) for v, w in zip(*np.nonzero(xs), strict=True)],
                   doc="(node, unit) pairs allowed by support and pins")
    m.E = pyo.RangeSet(0, len(src) - 1, doc="node edges (producer, consumer)")
    m.P = pyo.RangeSet(0, len(dt.pair_val) - 1, doc="uses (value, consumer node)")
    V = len(dt.val_prod)
    cons_allowed = np.zeros((V, D), bool)
    np.logical_or.at(cons_allowed, dt.pair_val, dt.allowed[dt.pair_cons])
    slot_dev = unit_dev[:S]
    in_pairs = [(int(j), int(s)) for j, s in zip(*np.nonzero(cons_allowed[:, slot_dev]), strict=True)]
    out_pairs = [(int(j), int(s)) for j, s in zip(*np.nonzero(dt.allowed[dt.val_prod][:, slot_dev]), strict=True)]
    m.CI = pyo.Set(dimen=2, initialize=in_pairs, doc="(value, slot): the value may enter the slot")
    m.CO = pyo.Set(dimen=2, initialize=out_pairs, doc="(value, slot): the value may leave the slot")
    mem_devs = [d for d in range(D) if math.isfinite(dt.capacity[d])]
    m.M = pyo.Set(initialize=mem_devs, doc="devices with a memory limit")

    # -------------------------------------------------------------------------------- Params
    m.horizon = pyo.Param(initialize=H, doc="latency upper bound (warm start), model time units")
    m.mem_limit = pyo.Param(m.M, initialize=1.0 - MEMORY_MARGIN, mutable=True,
                            doc="usable share of each device's memory")

    # ---------------------------------------------------------------------------------- Vars
    m.x = pyo.Var(m.XI, domain=pyo.Binary, doc="node runs on unit")
    lat_ub = dt.lat_ub if dt.lat_ub is not None else np.full(n, H)
    t_lb = float(dt.head.max()) if n else 0.0
    if dt.bounds is not None and n:
        t_lb = max(t_lb, float(np.where(dt.allowed, dt.bounds.through, np.inf).min(axis=1).max()), dt.lower)
    m.T = pyo.Var(bounds=(min(t_lb, H), H), doc="latency")

    def _lat_bounds(m, v):
        return (float(dt.head[v]), float(lat_ub[v]))
    m.lat = pyo.Var(m.N, bounds=_lat_bounds, doc="finish time of each node")
    m.start = pyo.Var(m.S, bounds=(0, H), doc="start of each subgraph call")
    m.fin = pyo.Var(m.S, bounds=(0, H), doc="finish of each subgraph call")
    m.z = pyo.Var(m.N, m.S, bounds=(0, 1), doc="predecessor-closed cover of a subgraph (convexity)")
    m.cin = pyo.Var(m.CI, bounds=(0, 1), doc="value enters the subgraph")
    m.cout = pyo.Var(m.CO, bounds=(0, 1), doc="value leaves the subgraph")

    def x(v, w):
        return m.x[v, w] if xs[v, w] else None

    def y_terms(v, d, exclude=-1):
        """Terms of 'node v runs on device d' (optionally not counting unit ``exclude``)."""
        return [m.x[v, w] for w in units_on[d] if xs[v, w] and w != exclude]

    # charges per (value, slot): uniform -> coefficient on cin/cout; else level rows on R/O
    cons_of: list[list[tuple[int, int]]] = [[] for _ in range(V)]
    for i, (j, c) in enumerate(zip(dt.pair_val.tolist(), dt.pair_cons.tolist(), strict=True)):
        cons_of[j].append((i, c))
    recv_c, send_c, recv_lv, send_lv = {}, {}, {}, {}
    for j, s in in_pairs:
        d = int(unit_dev[s])
        where = dt.allowed[int(dt.val_prod[j])].copy()
        where[d] &= dt.q > 1
        c, lv = charge_levels(dt.recv[j, :, d], where)
        if c is not None:
            recv_c[j, s] = c
        else:
            recv_lv[j, s] = lv
    for j, s in out_pairs:
        d = int(unit_dev[s])
        where = cons_allowed[j].copy()
        where[d] &= dt.q > 1
        c, lv = charge_levels(dt.send[j, d, :], where)
        if c is not None:
            send_c[j, s] = c
        else:
            send_lv[j, s] = lv
    m.R = pyo.Var(sorted(recv_lv), bounds=(0, None), doc="receive charge (charges depend on the sender)")
    m.O = pyo.Var(sorted(send_lv), bounds=(0, None), doc="send charge (charges depend on the receivers)")
    cpu_units = list(range(S, U))
    delay_c, delay_lv = {}, {}
    for i in range(len(dt.pair_val)):
        j, v = int(dt.pair_val[i]), int(dt.pair_cons[i])
        p = int(dt.val_prod[j])
        for w in cpu_units:
            if not xs[v, w]:
                continue
            c, lv = charge_levels(dt.recv[j, :, unit_dev[w]], dt.allowed[p].copy())
            if c is not None and c > 0:
                delay_c[i, w] = c
            elif c is None:
                delay_lv[i, w] = lv
    m.delay = pyo.Var(sorted({i for i, _ in delay_lv}), bounds=(0, None), doc="receive delay of a CPU node")
    m.levels = {"recv": recv_lv, "send": send_lv, "delay": delay_lv}
    has_params = len(dt.param_use[0]) > 0 and any(dt.param_bytes[np.unique(dt.param_use[0])] > 0)
    pm_index = sorted({(int(p), d) for p in np.unique(dt.param_use[0]) for d in mem_devs}) if has_params else []
    m.pm = pyo.Var(pm_index, bounds=(0, 1), doc="parameter held by device")
    m.ws = pyo.Var(m.M, bounds=(0, None), doc="largest working set on device (share of memory)")

    # --------------------------------------------------------------------------- Constraints
    def _assign(m, v):
        return (1, lin([1.0] * int(xs[v].sum()), [m.x[v, w] for w in np.flatnonzero(xs[v])]), 1)
    m.assign = pyo.Constraint(m.N, doc="every node runs on exactly one unit", rule=_assign)

    coloc_idx = [(a, b, d) for a, b in dt.colocated for d in range(D)
                 if len(y_terms(a, d)) + len(y_terms(b, d)) > 0]

    def _coloc(m, a, b, d):
        ta, tb = y_terms(a, d), y_terms(b, d)
        return (0, lin([1.0] * len(ta) + [-1.0] * len(tb), ta + tb), 0)
    m.colocation = pyo.Constraint(coloc_idx, rule=_coloc, doc="a colocation class shares one device")

    def _pm(m, i, d):
        p, v = int(dt.param_use[0][i]), int(dt.param_use[1][i])
        tv = y_terms(v, d)
        return lin([1.0] + [-1.0] * len(tv), [m.pm[p, d]] + tv) >= 0 if tv else pyo.Constraint.Skip
    m.param_held = pyo.Constraint(range(len(dt.param_use[0])) if has_params else [], m.M, rule=_pm,
                                  doc="a device holds every parameter its nodes use")

    def _ws(m, v, d):
        tv = y_terms(v, d)
        c = dt.working_set[v] / dt.capacity[d]
        if c <= 0 or not tv:
            return pyo.Constraint.Skip
        return lin([1.0] + [-c] * len(tv), [m.ws[d]] + tv) >= 0
    m.working_set = pyo.Constraint(m.N, m.M, rule=_ws, doc="the largest working set of a device's nodes")

    def _memory(m, d):
        coefs, vs = [], []
        for v in range(n):
            if dt.node_mem[v] > 0:
                for w in units_on[d]:
                    if xs[v, w]:
                        coefs.append(dt.node_mem[v] / dt.capacity[d])
                        vs.append(m.x[v, w])
        if has_params:
            for p in np.unique(dt.param_use[0]).tolist():
                coefs.append(dt.param_bytes[p] / dt.capacity[d])
                vs.append(m.pm[p, d])
        coefs.append(1.0)
        vs.append(m.ws[d])
        return lin(coefs, vs) <= m.mem_limit[d]
    m.memory = pyo.Constraint(m.M, rule=_memory, doc="parameters + state + largest working set fit the device")

    def _cover(m, v, s):
        return lin([1.0, -1.0], [m.z[v, s], m.x[v, s]]) >= 0 if xs[v, s] else pyo.Constraint.Skip
    m.convex_cover = pyo.Constraint(m.N, m.S, rule=_cover, doc="the cover contains the subgraph")

    def _closed(m, e, s):
        return lin([1.0, -1.0], [m.z[int(src[e]), s], m.z[int(dst[e]), s]]) >= 0
    m.convex_closed = pyo.Constraint(m.E, m.S, doc="the cover is closed under predecessors", rule=_closed)

    def _exit(m, e, s):
        a, b = int(src[e]), int(dst[e])
        if not xs[a, s]:
            return pyo.Constraint.Skip
        terms = [m.z[b, s], m.x[a, s]] + ([m.x[b, s]] if xs[b, s] else [])
        return lin([1.0, 1.0] + ([-1.0] if xs[b, s] else []), terms) <= 1
    m.convex_exit = pyo.Constraint(m.E, m.S, rule=_exit, doc="no path leaves the subgraph and comes back")

    def _flag(into: bool):
        def rule(m, i, s):
            j, c = int(dt.pair_val[i]), int(dt.pair_cons[i])
            p = int(dt.val_prod[j])
            inside, outside = (x(c, s), x(p, s)) if into else (x(p, s), x(c, s))
            if inside is None:
                return pyo.Constraint.Skip
            flag = m.cin[j, s] if into else m.cout[j, s]
            return lin([1.0, -1.0] + ([1.0] if outside is not None else []),
                       [flag, inside] + ([outside] if outside is not None else [])) >= 0
        return rule
    m.enters = pyo.Constraint(m.P, m.S, rule=_flag(True),
                              doc="a value consumed in a subgraph but made elsewhere enters it")
    m.leaves = pyo.Constraint(m.P, m.S, rule=_flag(False),
                              doc="a value made in a subgraph and consumed elsewhere leaves it")

    def _level_terms(node, s, positions):
        out = []
        for a in np.flatnonzero(positions):
            out += [m.x[node, w] for w in units_on[a] if xs[node, w] and w != s]
        return out

    recv_rows = [(i, s, k) for (j, s), lv in sorted(recv_lv.items()) for i, _ in cons_of[j] for k in range(len(lv))]

    def _recv_level(m, i, s, k):
        j, c = int(dt.pair_val[i]), int(dt.pair_cons[i])
        if not xs[c, s]:
            return pyo.Constraint.Skip
        level, pos = recv_lv[j, s][k]
        terms = _level_terms(int(dt.val_prod[j]), s, pos)
        return lin([1.0, -level] + [-level] * len(terms), [m.R[j, s], m.x[c, s]] + terms) >= -level
    m.receive_charge = pyo.Constraint(recv_rows, rule=_recv_level, doc="receive charge at the sender's level")
    send_rows = [(i, s, k) for (j, s), lv in sorted(send_lv.items()) for i, _ in cons_of[j] for k in range(len(lv))]

    def _send_level(m, i, s, k):
        j, c = int(dt.pair_val[i]), int(dt.pair_cons[i])
        p = int(dt.val_prod[j])
        if not xs[p, s]:
            return pyo.Constraint.Skip
        level, pos = send_lv[j, s][k]
        terms = _level_terms(c, s, pos)
        return lin([1.0, -level] + [-level] * len(terms), [m.O[j, s], m.x[p, s]] + terms) >= -level
    m.send_charge = pyo.Constraint(send_rows, rule=_send_level, doc="send charge at the dearest receiver's level")
    delay_rows = [(i, w, k) for (i, w), lv in sorted(delay_lv.items()) for k in range(len(lv))]

    def _delay_level(m, i, w, k):
        j, c = int(dt.pair_val[i]), int(dt.pair_cons[i])
        level, pos = delay_lv[i, w][k]
        terms = _level_terms(int(dt.val_prod[j]), -1, pos)
        return lin([1.0, -level] + [-level] * len(terms), [m.delay[i], m.x[c, w]] + terms) >= -level
    m.cpu_delay = pyo.Constraint(delay_rows, rule=_delay_level, doc="a CPU node waits for what it receives")

    ins, outs = by_second(in_pairs, S), by_second(out_pairs, S)

    def _duration(m, s):
        d = int(unit_dev[s])
        coefs, vs = [1.0, -1.0], [m.fin[s], m.start[s]]
        for v in np.flatnonzero(xs[:, s]).tolist():
            coefs.append(-float(dt.t[v, d]))
            vs.append(m.x[v, s])
        # each value received or sent: a fixed charge on its indicator, or its charge-level variable
        for js, fixed, indicator, levels, charge in ((ins[s], recv_c, m.cin, recv_lv, m.R),
                                                     (outs[s], send_c, m.cout, send_lv, m.O)):
            for j in js:
                c = fixed.get((j, s))
                if c:
                    coefs.append(-c)
                    vs.append(indicator[j, s])
                elif (j, s) in levels:
                    coefs.append(-1.0)
                    vs.append(charge[j, s])
        return (0, lin(coefs, vs), 0)
    m.duration = pyo.Constraint(m.S, rule=_duration, doc="a call receives, computes and sends, one after another")

    def _ready(m, j, s):
        p = int(dt.val_prod[j])
        big = float(lat_ub[p])
        return lin([1.0, -1.0, -big], [m.start[s], m.lat[p], m.cin[j, s]]) >= -big
    m.ready = pyo.Constraint(m.CI, rule=_ready, doc="a call starts once every value it receives exists")

    def _after_call(m, v, s):
        if not xs[v, s]:
            return pyo.Constraint.Skip
        big = H - float(dt.head[v])
        return lin([1.0, -1.0, -big], [m.lat[v], m.fin[s], m.x[v, s]]) >= -big
    m.after_call = pyo.Constraint(m.N, m.S, rule=_after_call, doc="a node on a subgraph finishes with its call")

    def _cpu_terms(v):
        return [(float(dt.t[v, unit_dev[w]]), m.x[v, w]) for w in cpu_units if xs[v, w]]

    def _after_use(m, i):
        j, v = int(dt.pair_val[i]), int(dt.pair_cons[i])
        p = int(dt.val_prod[j])
        terms = _cpu_terms(v) + [(delay_c[i, w], m.x[v, w]) for w in cpu_units if (i, w) in delay_c]
        coefs = [1.0, -1.0] + [-c for c, _ in terms] + ([-1.0] if i in m.delay else [])
        vs = [m.lat[v], m.lat[p]] + [x_ for _, x_ in terms] + ([m.delay[i]] if i in m.delay else [])
        return lin(coefs, vs) >= 0
    m.after_use = pyo.Constraint(m.P, rule=_after_use, doc="a node finishes after what it consumes (+ CPU time)")
    sources = np.setdiff1d(np.arange(n), dst).tolist()

    def _source(m, v):
        terms = _cpu_terms(v)
        if not terms:
            return pyo.Constraint.Skip
        return lin([1.0] + [-c for c, _ in terms], [m.lat[v]] + [x_ for _, x_ in terms]) >= 0
    m.source_cpu = pyo.Constraint(sources, rule=_source, doc="a CPU node takes its compute time")

    def _device_order(m, s):
        return lin([1.0, -1.0], [m.start[s], m.fin[s - 1]]) >= 0
    m.device_order = pyo.Constraint([s for s in range(S) if dt.slot_pos[s] > 0], rule=_device_order,
                                    doc="calls on a device run in slot order")
    sinks = np.setdiff1d(np.arange(n), src).tolist()

    def _makespan(m, v):
        return lin([1.0, -1.0], [m.T, m.lat[v]]) >= 0
    m.makespan = pyo.Constraint(sinks, rule=_makespan, doc="latency: the last node's finish")

    def _makespan_call(m, s):
        return lin([1.0, -1.0], [m.T, m.fin[s]]) >= 0
    m.makespan_call = pyo.Constraint(m.S, rule=_makespan_call, doc="latency: the last call's finish")

    # symmetry: interchangeable devices ordered by their first node; empty slots last
    sym_pairs = [(cls[k], cls[k + 1]) for cls in dt.classes for k in range(len(cls) - 1)]
    sym_devs = sorted({d for cls in dt.classes for d in cls})
    m.used = pyo.Var(m.N, sym_devs, bounds=(0, 1), doc="device runs some node numbered <= v")

    def _used(m, v, d):
        tv = y_terms(v, d)
        prev = [m.used[v - 1, d]] if v > 0 else []
        return lin([1.0] + [-1.0] * (len(prev) + len(tv)), [m.used[v, d]] + prev + tv) <= 0
    m.first_use = pyo.Constraint(m.N, sym_devs, rule=_used, doc="a device is used once one of its nodes is")

    def _order(m, v, k):
        d, e = sym_pairs[k]
        te = y_terms(v, e)
        if not te or v == 0:
            return lin([1.0] * len(te), te) <= 0 if te else pyo.Constraint.Skip
        return lin([1.0] * len(te) + [-1.0], te + [m.used[v - 1, d]]) <= 0
    m.symmetry = pyo.Constraint(m.N, range(len(sym_pairs)), rule=_order,
                                doc="identical devices take nodes in order of their first node")
    later = [s for s in range(S) if dt.slot_pos[s] > 0]
    m.nonempty = pyo.Var(m.S, bounds=(0, 1), doc="slot holds some node")

    def _slot_count(m, s):
        on = np.flatnonzero(xs[:, s])
        return lin([1.0] + [-1.0] * int(xs[:, s].sum()), [m.nonempty[s]] + [m.x[v, s] for v in on]) <= 0
    m.slot_count = pyo.Constraint([s - 1 for s in later], doc="a slot counts as used only with a node",
                                  rule=_slot_count)

    def _empty_last(m, v, s):
        return lin([1.0, -1.0], [m.x[v, s], m.nonempty[s - 1]]) <= 0 if xs[v, s] else pyo.Constraint.Skip
    m.empty_last = pyo.Constraint(m.N, later, rule=_empty_last, doc="a later slot is used only after the one before")

    if dt.bounds is not None:
        add_bound_rows(m, dt, lin)
        add_slot_order_rows(m, dt, lin)

    # ------------------------------------------------------------------------------- Objective
    m.latency = pyo.Objective(expr=m.T, sense=pyo.minimize, doc="single-stream latency")
    return m


# -------------------------------------------------------------------------------------- solve
def solve(model, options: SolveOptions, *, warm_start: bool = False) -> mip.MipResult:
    """Run the backend of ``options`` on ``model``; objective values come back in seconds."""
    return mip.solve_model(model, options, warm_start=warm_start, scale=model.time_unit)


# ----------------------------------------------------------------------------------- solver
class LatencyIP:
    """The exact latency solver: best baseline -> warm-started IP -> placement checked by evaluate."""

    name = NAME
    objectives = frozenset({ObjectiveKind.LATENCY})

    def __init__(self, *, cuts: bool = True):
        self.cuts = cuts  # False: the plain model (no time bounds, rows or presolve), for comparisons

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        mip_backends.get_backend(options.backend or "highs")  # fail before any work when the backend is missing
        start, start_name, notes = best_baseline(problem, options, options.time_limit,
                                                 seconds=BASELINE_SHARE * options.time_limit)
        start_latency = evaluate(problem, start).objective if start is not None else None
        if start is not None and start_latency is not None and any(n.startswith("interrupted") for n in notes):
            return _interrupted(start, start_latency, start_name, notes, time.perf_counter() - t0)
        moves_end = t0 + BASELINE_SHARE * options.time_limit  # the model build keeps the time it had
        if start is not None and start_latency is not None and problem.num_nodes >= MOVES_MIN_NODES:
            # call moves (a producer or a branch in a call of its own), the longest calls recut into diamonds on
            # freed slots (then the moves again, when that changed the placement), then annealing out of the
            # local optimum they stop in: the MIP's start and horizon
            steps = (("call moves", improve, moves_budget(problem, options.time_limit), False),
                     ("recutting", recut, recut_budget(problem, options.time_limit), False),
                     ("call moves", improve, moves_budget(problem, options.time_limit), True),
                     ("annealing", anneal, anneal_budget(problem, options.time_limit), False))
            found = 0
            for label, step, budget, only_after_change in steps:
                if time.perf_counter() >= moves_end - 1.0:
                    break
                if only_after_change and not found:
                    continue
                try:
                    better, found = step(problem, start, budget=budget, deadline=moves_end)
                except KeyboardInterrupt:
                    return _interrupted(start, start_latency, start_name, notes + [f"interrupted during the {label}"],
                                        time.perf_counter() - t0)
                if found:
                    latency = evaluate(problem, better).objective
                    notes.append(f"{label}: {start_latency * 1e3:.4g} -> {latency * 1e3:.4g} ms from {start_name}")
                    start, start_name, start_latency = better, f"{label} from {start_name}", latency
        # the latency the call moves ran to their end from; None (cut short): the LNS starts with them
        polished = start_latency if time.perf_counter() < moves_end else None
        cells = len(crossings(problem.graph, np.arange(problem.num_nodes)).values) * problem.num_devices ** 2
        if cells > MAX_TABLE_CELLS and start is not None and start_latency is not None:
            # numpy builds these tables in single calls that no time box can interrupt
            return _interrupted(start, start_latency, start_name, notes + [
                f"the model's transfer tables ({cells:,} entries for {problem.num_devices:,} devices) are too large "
                f"to build within the time limit"], time.perf_counter() - t0, timed_out=True)
        tb = time.perf_counter()
        session = None
        try:  # building and translating the model is pure Python, D² in places: boxed by the time limit
            with time_box(max(options.time_limit - (tb - t0), BUILD_FLOOR_S)):
                model = build_model(problem, horizon=start_latency, cuts=self.cuts,
                                    probe_seconds=PROBE_SHARE * options.time_limit,
                                    frontier_seconds=FRONTIER_SHARE * options.time_limit)
                build_time = time.perf_counter() - tb
                warm = start is not None and load_warm_start(model, problem, start)
                if (options.backend or "highs").lower() == "highs":
                    session = mip.HighsSession(model)
        except (KeyboardInterrupt, TimeBoxExpired) as stop:
            if start is None or start_latency is None:
                if isinstance(stop, KeyboardInterrupt):
                    raise
                raise PlanmapError(f"{problem.name}: the latency IP found no placement within "
                                   f"{options.time_limit:g} s (building the model); raise the time limit") from None
            limit = isinstance(stop, TimeBoxExpired)
            why = "the time limit ran out" if limit else "interrupted"
            return _interrupted(start, start_latency, start_name, notes + [f"{why} while building the model"],
                                time.perf_counter() - t0, timed_out=limit)
        if start is not None and not warm:
            notes.append(f"warm start from {start_name} does not fit the model")
        left = max(0.1, options.time_limit - (time.perf_counter() - t0))
        if session is not None:
            lns = problem.num_nodes >= LNS_MIN_NODES
            result = session.run(replace(options, time_limit=left * (LNS_SHARE if lns else 1.0)), warm_start=warm,
                                 scale=model.time_unit, t0=t0)
        else:
            result = solve(model, replace(options, time_limit=left), warm_start=warm)
        ip_sol = extract(model, problem) if result.has_solution else None
        if (session is not None and ip_sol is not None and result.status == Status.TIME_LIMIT
                and t0 + options.time_limit - time.perf_counter() > 3.0):
            ip_sol, lns_note, stopped = neighbourhood_search(session, model, problem, ip_sol, options,
                                                                result.bound, t0, polished=polished)
            notes.append(lns_note)
            if stopped:
                result = replace(result, status=Status.INTERRUPTED, termination="Interrupted by user")
        chosen, origin = mip.choose_answer(problem, ip_sol, start, start_name, start_latency, notes)
        if chosen is None:
            if result.status == Status.INFEASIBLE:
                raise InfeasibleError(
                    f"{problem.name}: no placement satisfies memory, pins, colocation and at most "
                    f"{model.data.q} subgraph(s) per accelerator (proven by {result.backend})")
            raise PlanmapError(f"{problem.name}: the latency IP found no placement within {options.time_limit:g} s "
                               f"({result.backend}: {result.termination}); raise the time limit")
        ev = evaluate(problem, chosen)
        return chosen.with_certificate(**_certificate_fields(problem, ev.objective, result, origin, start_name,
                                                             start_latency, notes, model, build_time, warm,
                                                             time.perf_counter() - t0))

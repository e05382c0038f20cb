"""The Pyomo model of the pipelined-throughput IP (see :mod:`planmap.solvers.pipeline.ip` for what it
minimises and why contiguity is modelled as a pipeline order): sets, variables, load, memory,
order, symmetry and 1F1B rows built from :class:`~planmap.solvers.pipeline.ip_data.IPData`."""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from planmap.problem import Problem
from planmap.vocabulary import ThroughputVariant

from ..mip_model import by_second, lin, new_model
from .ip_data import IPData, prepare

__all__ = ["MEMORY_MARGIN", "build_model"]

MEMORY_MARGIN = 1e-6  # share of memory kept free of backend tolerances


# ---------------------------------------------------------------------------------------- model
def build_model(problem: Problem, *, data: IPData | None = None, horizon: float | None = None):
    """The throughput IP of ``problem`` as a Pyomo ``ConcreteModel`` (times in ``model.time_unit`` s).

    ``horizon`` (seconds) caps the objective (usually the warm start's): stages slower than it are
    cut off early, and nothing better than the start is lost.
    """
    import pyomo.environ as pyo

    dt = data if data is not None else prepare(problem)
    U, D, u = dt.U, dt.D, dt.time_scale
    V = len(dt.val_prod)
    H = (horizon / u) * (1 + 1e-6) if horizon is not None and math.isfinite(horizon) else None
    m = new_model(f"throughput-ip:{problem.name}", u, dt)

    # ---------------------------------------------------------------------------------- Sets
    m.Un = pyo.RangeSet(0, U - 1, doc="units: colocation classes (a classless node is its own)")
    m.Dv = pyo.RangeSet(0, D - 1, doc="devices")
    m.XI = pyo.Set(dimen=2, initialize=[(int(a), int(b)) for a, b in zip(*np.nonzero(dt.allowed), strict=True)],
                   doc="(unit, device) pairs allowed by support and pins")
    general = dt.pair_recv is not None  # charges depend on both ends: rates per (sender, receiver)
    in_idx = [(j, d) for j in range(V) for d in range(D) if dt.recv[j, d] > 0 and dt.allowed[dt.val_cons[j], d].any()]
    out_idx = [(j, d) for j in range(V) for d in range(D) if dt.send[j, d] > 0 and dt.allowed[dt.val_prod[j], d]]
    cin_idx, cout_idx = ([], []) if general else (in_idx, out_idx)
    rate_in, rate_out = (in_idx, out_idx) if general else ([], [])
    m.CI = pyo.Set(dimen=2, initialize=cin_idx, doc="(value, device): the device may pay to receive the value")
    m.CO = pyo.Set(dimen=2, initialize=cout_idx, doc="(value, device): the device may pay to send the value")
    mem_devs = [d for d in range(D) if math.isfinite(dt.capacity[d])]
    m.M = pyo.Set(initialize=mem_devs, doc="devices with a memory limit")
    pairs = [(d, e) for d in range(D) for e in range(D) if d != e] if dt.ordered else []
    m.P = pyo.Set(dimen=2, initialize=pairs, doc="ordered device pairs (pipeline order)")
    m.J = pyo.RangeSet(2, dt.microbatches, doc="in-flight levels above one (1F1B)") if dt.one_f_one_b else pyo.Set(
        initialize=[], doc="in-flight levels above one (1F1B)")

    # -------------------------------------------------------------------------------- Params
    m.mem_limit = pyo.Param(m.M, initialize=1.0 - MEMORY_MARGIN, mutable=True, doc="usable share of memory")

    # ---------------------------------------------------------------------------------- Vars
    m.x = pyo.Var(m.XI, domain=pyo.Binary, doc="unit runs on device")
    m.used = pyo.Var(m.Dv, bounds=(0, 1), doc="device runs some unit")
    m.cin = pyo.Var(m.CI, bounds=(0, 1), doc="device receives the value")
    m.cout = pyo.Var(m.CO, bounds=(0, 1), doc="device sends the value")
    m.R = pyo.Var(rate_in, bounds=(0, None), doc="receive charge at the sender's rate (model time units)")
    m.O = pyo.Var(rate_out, bounds=(0, None), doc="send charge at the dearest receiver's rate (model time units)")
    m.fw = pyo.Var(m.Dv, bounds=(0, H), doc="forward load of the device")
    m.bw = pyo.Var(m.Dv, bounds=(0, H), doc="backward load of the device")
    m.L = pyo.Var(bounds=(0, H), doc="largest load")
    m.Lf = pyo.Var(bounds=(0, H), doc="largest forward load")
    m.Lb = pyo.Var(bounds=(0, H), doc="largest backward load")
    p_idx = [(k, d) for k in range(len(dt.params)) for d in mem_devs]
    m.pm = pyo.Var(p_idx, bounds=(0, 1), doc="device holds the parameter")
    m.ws = pyo.Var(m.M, bounds=(0, None), doc="largest working set on the device (share of memory)")
    m.o = pyo.Var(m.P, domain=pyo.Binary, doc="device d comes before device e in the pipeline")
    fb_devs = mem_devs if dt.one_f_one_b else []
    m.after = pyo.Var([(d, e) for d in fb_devs for e in range(D) if e != d], bounds=(0, 1),
                      doc="device e is a used stage after device d")
    m.fl = pyo.Var([(d, j) for d in fb_devs for j in range(2, dt.microbatches + 1)], domain=pyo.Binary,
                   doc="device d holds at least j microbatches in flight")
    m.extra = pyo.Var([(d, j) for d in fb_devs for j in range(2, dt.microbatches + 1)], bounds=(0, None),
                      doc="stash of the j-th in-flight microbatch (share of memory)")

    def xv(a, d):
        return m.x[a, d] if dt.allowed[a, d] else None

    units_on = [np.flatnonzero(dt.allowed[:, d]) for d in range(D)]

    # --------------------------------------------------------------------------- Constraints
    def _assign(m, a):
        return (1, lin([1.0] * int(dt.allowed[a].sum()), [m.x[a, d] for d in np.flatnonzero(dt.allowed[a])]), 1)
    m.assign = pyo.Constraint(m.Un, doc="every unit runs on exactly one device", rule=_assign)

    def _use(m, a, d):
        return lin([1.0, -1.0], [m.used[d], m.x[a, d]]) >= 0
    m.use = pyo.Constraint(m.XI, doc="a device with a unit is used", rule=_use)

    def _use_ub(m, d):
        return lin([1.0] + [-1.0] * len(units_on[d]), [m.used[d]] + [m.x[a, d] for a in units_on[d]]) <= 0
    m.use_ub = pyo.Constraint(m.Dv, doc="a device without units is not used", rule=_use_ub)

    def _recv(m, j, d):
        return [lin([1.0, -1.0] + ([1.0] if xv(int(dt.val_prod[j]), d) is not None else []),
                    [m.cin[j, d], m.x[int(c), d]] + ([m.x[int(dt.val_prod[j]), d]]
                                                     if xv(int(dt.val_prod[j]), d) is not None else [])) >= 0
                for c in dt.val_cons[j] if dt.allowed[c, d]]
    m.receives = pyo.ConstraintList(doc="a value consumed on a device but made elsewhere is received once")
    for j, d in cin_idx:
        for row in _recv(m, j, d):
            m.receives.add(row)
    m.sends = pyo.ConstraintList(doc="a value made on a device and consumed elsewhere is sent once")
    for j, d in cout_idx:
        p = int(dt.val_prod[j])
        for c in dt.val_cons[j].tolist():
            terms = [m.cout[j, d], m.x[p, d]] + ([m.x[c, d]] if dt.allowed[c, d] else [])
            m.sends.add(lin([1.0, -1.0] + ([1.0] if dt.allowed[c, d] else []), terms) >= 0)
    m.receive_rate = pyo.ConstraintList(doc="a receiver pays the value at the rate from its sender's device")
    m.send_rate = pyo.ConstraintList(doc="a sender pays the value once, at its dearest receiver's rate")
    pair_recv, pair_send = cast(np.ndarray, dt.pair_recv), cast(np.ndarray, dt.pair_send)  # rate rows: general only
    for j, d in rate_in:
        p = int(dt.val_prod[j])
        for c in dt.val_cons[j].tolist():
            for a in range(D):
                r = pair_recv[j, a, d] / u
                if a != d and r > 0 and dt.allowed[c, d] and dt.allowed[p, a]:
                    m.receive_rate.add(lin([1.0, -r, -r], [m.R[j, d], m.x[c, d], m.x[p, a]]) >= -r)
    for j, d in rate_out:
        p = int(dt.val_prod[j])
        for c in dt.val_cons[j].tolist():
            for b in range(D):
                r = pair_send[j, d, b] / u
                if b != d and r > 0 and dt.allowed[c, b]:
                    m.send_rate.add(lin([1.0, -r, -r], [m.O[j, d], m.x[p, d], m.x[c, b]]) >= -r)
    ins, outs = by_second(in_idx, D), by_second(out_idx, D)

    def _load(back: bool):
        t = dt.tb if back else dt.tf

        def rule(m, d):
            coefs = [1.0]
            vs = [m.bw[d] if back else m.fw[d]]
            for a in units_on[d].tolist():
                if t[a, d] > 0:
                    coefs.append(-t[a, d] / u)
                    vs.append(m.x[a, d])
            for j in ins[d]:
                if bool(dt.val_back[j]) == back:
                    coefs.append(-1.0 if general else -dt.recv[j, d] / u)
                    vs.append(m.R[j, d] if general else m.cin[j, d])
            for j in outs[d]:
                if bool(dt.val_back[j]) == back:
                    coefs.append(-1.0 if general else -dt.send[j, d] / u)
                    vs.append(m.O[j, d] if general else m.cout[j, d])
            return lin(coefs, vs) >= 0
        return rule
    m.forward_load = pyo.Constraint(m.Dv, rule=_load(False), doc="forward compute + forward transfers")
    m.backward_load = pyo.Constraint(m.Dv, rule=_load(True), doc="backward compute + backward transfers")

    def _largest(m, d):
        return lin([1.0, -1.0, -1.0], [m.L, m.fw[d], m.bw[d]]) >= 0
    m.largest = pyo.Constraint(m.Dv, doc="the largest load", rule=_largest)

    def _largest_fw(m, d):
        return lin([1.0, -1.0], [m.Lf, m.fw[d]]) >= 0
    m.largest_fw = pyo.Constraint(m.Dv, doc="the largest forward load", rule=_largest_fw)

    def _largest_bw(m, d):
        return lin([1.0, -1.0], [m.Lb, m.bw[d]]) >= 0
    m.largest_bw = pyo.Constraint(m.Dv, doc="the largest backward load", rule=_largest_bw)

    # memory (shares of each device's capacity)
    param_users: list[list[int]] = [[] for _ in range(len(dt.params))]
    for k, (_, users) in enumerate(dt.params):
        param_users[k] = users.tolist()
    m.param_held = pyo.ConstraintList(doc="a device holds every parameter its units use")
    for k, d in p_idx:
        for a in param_users[k]:
            if dt.allowed[a, d]:
                m.param_held.add(lin([1.0, -1.0], [m.pm[k, d], m.x[a, d]]) >= 0)

    def _working_set(m, a, d):
        return lin([1.0, -dt.ws[a] / dt.capacity[d]], [m.ws[d], m.x[a, d]]) >= 0
    m.working_set = pyo.Constraint([(a, d) for d in mem_devs for a in units_on[d].tolist() if dt.ws[a] > 0],
                                   doc="the largest working set of a device's units", rule=_working_set)

    def _memory(m, d):
        cap = dt.capacity[d]
        coefs, vs = [], []
        for a in units_on[d].tolist():
            c = (dt.state[a] + dt.stash[a] * dt.in_flight) / cap
            if c > 0:
                coefs.append(c)
                vs.append(m.x[a, d])
        for k, (b, _) in enumerate(dt.params):
            coefs.append(b / cap)
            vs.append(m.pm[k, d])
        coefs.append(1.0)
        vs.append(m.ws[d])
        for j in m.J:
            coefs.append(1.0)
            vs.append(m.extra[d, j])
        return lin(coefs, vs) <= m.mem_limit[d]
    m.memory = pyo.Constraint(m.M, rule=_memory, doc="parameters + state + stash x in-flight + working set fit")

    # pipeline order: a transitive tournament consistent with every contiguity edge
    def _antisymmetric(m, d, e):
        return (1, lin([1.0, 1.0], [m.o[d, e], m.o[e, d]]), 1)
    m.antisymmetric = pyo.Constraint([(d, e) for d, e in pairs if d < e], doc="one of two devices comes first",
                                     rule=_antisymmetric)
    triples = [(a, b, c) for a in range(D) for b in range(D) for c in range(D) if len({a, b, c}) == 3] if pairs else []

    def _transitive(m, a, b, c):
        return lin([1.0, 1.0, -1.0], [m.o[a, b], m.o[b, c], m.o[a, c]]) <= 1
    m.transitive = pyo.Constraint(triples, doc="the order is transitive (no cycle of stages)", rule=_transitive)
    edge_rows = []
    if problem.contiguous:
        for a, b in dt.edges.tolist():
            for d in range(D):
                for e in range(D):
                    if d != e and dt.allowed[a, e] and dt.allowed[b, d]:
                        edge_rows.append((a, b, e, d))

    def _pipeline(m, a, b, e, d):
        return lin([1.0, 1.0, -1.0], [m.x[a, e], m.x[b, d], m.o[e, d]]) <= 1
    m.pipeline = pyo.Constraint(edge_rows, doc="an edge a -> b with a on e and b on d puts e before d",
                                rule=_pipeline)
    # identical devices: in pipeline order by index (contiguous), and the used ones first
    sym = [(c[i], c[i + 1]) for c in dt.classes for i in range(len(c) - 1)]

    def _used_first(m, d, e):
        return lin([1.0, -1.0], [m.used[d], m.used[e]]) >= 0
    m.used_first = pyo.Constraint(sym, doc="of identical devices, lower indices are used first", rule=_used_first)

    def _identical_order(m, d, e):
        return (1, lin([1.0], [m.o[d, e]]), 1)
    m.identical_order = pyo.Constraint([(d, e) for c in dt.classes for d in c for e in c if d < e] if pairs else [],
                                       doc="identical devices come in index order", rule=_identical_order)
    if not pairs:
        first = sorted({d for c in dt.classes for d in c})
        m.first_unit = pyo.Var([(a, d) for a in range(U) for d in first], bounds=(0, 1),
                               doc="device runs some unit numbered <= a")

        def _first_use(m, a, d):
            prev = [m.first_unit[a - 1, d]] if a else []
            own = [m.x[a, d]] if dt.allowed[a, d] else []
            return lin([1.0] + [-1.0] * (len(prev) + len(own)), [m.first_unit[a, d]] + prev + own) <= 0
        m.first_use = pyo.Constraint([(a, d) for a in range(U) for d in first], doc="a device is used once a unit is",
                                     rule=_first_use)

        def _symmetry(m, a, k):
            return _sym_rule(m, a, k, sym, dt)
        m.symmetry = pyo.Constraint([(a, k) for a in range(U) for k in range(len(sym))],
                                    doc="identical devices take units in order of their first unit", rule=_symmetry)

    # 1F1B: in flight = min(m, used stages after + 1)
    def _after_def(m, d, e):
        return lin([1.0, -1.0, -1.0], [m.after[d, e], m.o[d, e], m.used[e]]) >= -1
    m.after_def = pyo.Constraint(list(m.after.keys()), doc="e is a used stage after d", rule=_after_def)

    def _in_flight(m, d, j):
        return lin([float(D)] + [-1.0] * (D - 1), [m.fl[d, j]] + [m.after[d, e] for e in range(D) if e != d]) >= 2 - j
    m.in_flight = pyo.Constraint(list(m.fl.keys()), doc="j or more stages after-and-including d: j in flight",
                                 rule=_in_flight)

    def _extra(m, d, j):
        cap = dt.capacity[d]
        coefs = [1.0, -1.0] + [-dt.stash[a] / cap for a in units_on[d].tolist() if dt.stash[a] > 0]
        vs = [m.extra[d, j], m.fl[d, j]] + [m.x[a, d] for a in units_on[d].tolist() if dt.stash[a] > 0]
        big = float(dt.stash[units_on[d]].sum()) / cap
        coefs[1] = -big
        return lin(coefs, vs) >= -big
    m.stash_extra = pyo.Constraint(list(m.extra.keys()), rule=_extra,
                                   doc="the stash of the j-th microbatch is held when j are in flight")
    m.max_stages = pyo.Constraint(expr=lin([1.0] * D, [m.used[d] for d in range(D)]) <= (
        problem.max_stages if problem.max_stages is not None else D), doc="at most maxStages stages")

    # ------------------------------------------------------------------------------- Objective
    if problem.variant is ThroughputVariant.MAX_FW_PLUS_MAX_BW:
        m.time_per_sample = pyo.Objective(expr=m.Lf + m.Lb, sense=pyo.minimize, doc="largest fw + largest bw load")
    else:
        m.time_per_sample = pyo.Objective(expr=m.L, sense=pyo.minimize, doc="largest device load")
    return m


def _sym_rule(m, a, k, sym, dt):
    import pyomo.environ as pyo

    d, e = sym[k]
    if not dt.allowed[a, e]:
        return pyo.Constraint.Skip
    if a == 0:
        return lin([1.0], [m.x[a, e]]) <= 0
    return lin([1.0, -1.0], [m.x[a, e], m.first_unit[a - 1, d]]) <= 0

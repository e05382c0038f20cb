"""The pipelined-throughput integer program (Tarnawski et al., ``throughput-ip/ip.py``), exact under evaluate.

Minimises the time per sample of a pipeline — the largest device load, or the largest forward
load plus the largest backward load (``variant: max-fw-plus-max-bw``) — over *non-contiguous*
placements (any node anywhere, colocation classes together) or *contiguous* ones, with the same
model as :func:`planmap.evaluate.evaluate`:

* a device's load: its nodes' compute + each value it receives (once) + each value it produces that
  another device consumes (once); charges from the cost model. When they depend only on the paying
  device (the paper's cluster: accelerators pay the host link, CPUs nothing) each is one
  coefficient on a 0/1 flag, as in the paper; otherwise (direct links to some devices and host
  memory to others, several hosts) a receiver pays at its sender's rate and a sender at its
  dearest receiver's, through rate rows per (sender, receiver) pair;
* memory: distinct parameters x factor + state + stashed activations x in-flight microbatches +
  the largest working set;
* **contiguity as evaluate defines it**: every stage convex on the contiguity graph (the forward
  graph in training) *and* the stages in a pipeline order. The paper's IP only asks for convexity,
  which admits stage graphs with cycles (a pipeline that cannot run, and that the DP never
  builds). Here each pair of devices gets an order variable ``o[d, e]`` (a tournament made
  transitive), and an edge ``a -> b`` with ``a`` on ``e`` and ``b`` on ``d`` forces ``e`` before ``d``:
  a total order consistent with every edge makes every stage convex and the stage graph acyclic.
  The contiguous optimum is then the DP's (the tests check it on a sample);
* 1F1B memory: a stage holds ``min(m, stages after it + 1)`` microbatches; the count comes from the
  order variables, unrolled into binaries "at least j in flight" (so the model stays linear).

Replicated stages are not modelled (the ``dp`` solver plans them); a problem that allows them is
refused so that ``solver: auto`` moves on. In non-contiguous mode evaluate orders stages by a rule
(topological when the stage graph is acyclic, else by first node) that a linear model cannot
follow, so with 1F1B memory the model counts one microbatch in flight — a relaxation: its bound is
valid, and an answer the evaluator finds over memory is replaced by the (feasible) warm start.

``build_model`` → ``load_warm_start`` → ``solve`` → ``extract``; :class:`ThroughputIP` runs them with
a warm start from the DP (or the best baseline) and returns the better of the MIP's answer and the
start, with the backend's bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError, SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Stage, Status, relative_gap

from .. import mip
from .ip_data import IPData, prepare

__all__ = ["ThroughputIP", "IPData", "prepare", "build_model", "load_warm_start", "solve", "extract"]

VERSION = "1"
MEMORY_MARGIN = 1e-6  # share of memory kept free of backend tolerances


# ---------------------------------------------------------------------------------------- model
def build_model(problem: Problem, *, data: IPData | None = None, horizon: float | None = None):
    """The throughput IP of ``problem`` as a Pyomo ``ConcreteModel`` (times in ``model.time_unit`` s).

    ``horizon`` (seconds) caps the objective (usually the warm start's): stages slower than it are
    cut off early, and nothing better than the start is lost.
    """
    import pyomo.environ as pyo
    from pyomo.core.expr.numeric_expr import LinearExpression

    dt = data if data is not None else prepare(problem)
    U, D, u = dt.U, dt.D, dt.unit
    V = len(dt.val_prod)
    H = (horizon / u) * (1 + 1e-6) if horizon is not None and math.isfinite(horizon) else None
    m = pyo.ConcreteModel(name=f"throughput-ip:{problem.name}")
    m.time_unit = u
    m.data = dt

    def lin(coefs, vars_, const=0.0):
        return LinearExpression(constant=const, linear_coefs=list(coefs), linear_vars=list(vars_))

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
    m.assign = pyo.Constraint(m.Un, doc="every unit runs on exactly one device", rule=lambda m, a: (
        1, lin([1.0] * int(dt.allowed[a].sum()), [m.x[a, d] for d in np.flatnonzero(dt.allowed[a])]), 1))
    m.use = pyo.Constraint(m.XI, doc="a device with a unit is used",
                           rule=lambda m, a, d: lin([1.0, -1.0], [m.used[d], m.x[a, d]]) >= 0)
    m.use_ub = pyo.Constraint(m.Dv, doc="a device without units is not used", rule=lambda m, d: lin(
        [1.0] + [-1.0] * len(units_on[d]), [m.used[d]] + [m.x[a, d] for a in units_on[d]]) <= 0)

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
    for j, d in rate_in:
        p = int(dt.val_prod[j])
        for c in dt.val_cons[j].tolist():
            for a in range(D):
                r = dt.pair_recv[j, a, d] / u
                if a != d and r > 0 and dt.allowed[c, d] and dt.allowed[p, a]:
                    m.receive_rate.add(lin([1.0, -r, -r], [m.R[j, d], m.x[c, d], m.x[p, a]]) >= -r)
    for j, d in rate_out:
        p = int(dt.val_prod[j])
        for c in dt.val_cons[j].tolist():
            for b in range(D):
                r = dt.pair_send[j, d, b] / u
                if b != d and r > 0 and dt.allowed[c, b]:
                    m.send_rate.add(lin([1.0, -r, -r], [m.O[j, d], m.x[p, d], m.x[c, b]]) >= -r)
    ins = [[] for _ in range(D)]
    outs = [[] for _ in range(D)]
    for j, d in in_idx:
        ins[d].append(j)
    for j, d in out_idx:
        outs[d].append(j)

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
    m.largest = pyo.Constraint(m.Dv, doc="the largest load", rule=lambda m, d: lin([1.0, -1.0, -1.0], [m.L, m.fw[d], m.bw[d]]) >= 0)
    m.largest_fw = pyo.Constraint(m.Dv, doc="the largest forward load", rule=lambda m, d: lin([1.0, -1.0], [m.Lf, m.fw[d]]) >= 0)
    m.largest_bw = pyo.Constraint(m.Dv, doc="the largest backward load", rule=lambda m, d: lin([1.0, -1.0], [m.Lb, m.bw[d]]) >= 0)

    # memory (shares of each device's capacity)
    param_users = [[] for _ in range(len(dt.params))]
    for k, (_, users) in enumerate(dt.params):
        param_users[k] = users.tolist()
    m.param_held = pyo.ConstraintList(doc="a device holds every parameter its units use")
    for k, d in p_idx:
        for a in param_users[k]:
            if dt.allowed[a, d]:
                m.param_held.add(lin([1.0, -1.0], [m.pm[k, d], m.x[a, d]]) >= 0)
    m.working_set = pyo.Constraint([(a, d) for d in mem_devs for a in units_on[d].tolist() if dt.ws[a] > 0],
                                   doc="the largest working set of a device's units",
                                   rule=lambda m, a, d: lin([1.0, -dt.ws[a] / dt.capacity[d]], [m.ws[d], m.x[a, d]]) >= 0)

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
    m.antisymmetric = pyo.Constraint([(d, e) for d, e in pairs if d < e], doc="one of two devices comes first",
                                     rule=lambda m, d, e: (1, lin([1.0, 1.0], [m.o[d, e], m.o[e, d]]), 1))
    triples = [(a, b, c) for a in range(D) for b in range(D) for c in range(D) if len({a, b, c}) == 3] if pairs else []
    m.transitive = pyo.Constraint(triples, doc="the order is transitive (no cycle of stages)",
                                  rule=lambda m, a, b, c: lin([1.0, 1.0, -1.0], [m.o[a, b], m.o[b, c], m.o[a, c]]) <= 1)
    edge_rows = []
    if problem.contiguous:
        for a, b in dt.edges.tolist():
            for d in range(D):
                for e in range(D):
                    if d != e and dt.allowed[a, e] and dt.allowed[b, d]:
                        edge_rows.append((a, b, e, d))
    m.pipeline = pyo.Constraint(edge_rows, doc="an edge a -> b with a on e and b on d puts e before d",
                                rule=lambda m, a, b, e, d: lin([1.0, 1.0, -1.0], [m.x[a, e], m.x[b, d], m.o[e, d]]) <= 1)
    # identical devices: in pipeline order by index (contiguous), and the used ones first
    sym = [(c[i], c[i + 1]) for c in dt.classes for i in range(len(c) - 1)]
    m.used_first = pyo.Constraint(sym, doc="of identical devices, lower indices are used first",
                                  rule=lambda m, d, e: lin([1.0, -1.0], [m.used[d], m.used[e]]) >= 0)
    m.identical_order = pyo.Constraint([(d, e) for c in dt.classes for d in c for e in c if d < e] if pairs else [],
                                       doc="identical devices come in index order",
                                       rule=lambda m, d, e: (1, lin([1.0], [m.o[d, e]]), 1))
    if not pairs:
        first = sorted({d for c in dt.classes for d in c})
        m.first_unit = pyo.Var([(a, d) for a in range(U) for d in first], bounds=(0, 1),
                               doc="device runs some unit numbered <= a")
        m.first_use = pyo.Constraint([(a, d) for a in range(U) for d in first], doc="a device is used once a unit is",
                                     rule=lambda m, a, d: lin([1.0] + ([-1.0] if a else []) + ([-1.0] if dt.allowed[a, d] else []),
                                                              [m.first_unit[a, d]] + ([m.first_unit[a - 1, d]] if a else [])
                                                              + ([m.x[a, d]] if dt.allowed[a, d] else [])) <= 0)
        m.symmetry = pyo.Constraint([(a, k) for a in range(U) for k in range(len(sym))],
                                    doc="identical devices take units in order of their first unit",
                                    rule=lambda m, a, k: _sym_rule(m, a, k, sym, dt, lin))
    # 1F1B: in flight = min(m, used stages after + 1)
    m.after_def = pyo.Constraint(list(m.after.keys()), doc="e is a used stage after d",
                                 rule=lambda m, d, e: lin([1.0, -1.0, -1.0], [m.after[d, e], m.o[d, e], m.used[e]]) >= -1)
    m.in_flight = pyo.Constraint(list(m.fl.keys()), doc="j or more stages after-and-including d: j in flight",
                                 rule=lambda m, d, j: lin([float(D)] + [-1.0] * (D - 1),
                                                          [m.fl[d, j]] + [m.after[d, e] for e in range(D) if e != d]) >= 2 - j)

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
    if problem.variant == "max-fw-plus-max-bw":
        m.time_per_sample = pyo.Objective(expr=m.Lf + m.Lb, sense=pyo.minimize, doc="largest fw + largest bw load")
    else:
        m.time_per_sample = pyo.Objective(expr=m.L, sense=pyo.minimize, doc="largest device load")
    return m


def _sym_rule(m, a, k, sym, dt, lin):
    import pyomo.environ as pyo

    d, e = sym[k]
    if not dt.allowed[a, e]:
        return pyo.Constraint.Skip
    if a == 0:
        return lin([1.0], [m.x[a, e]]) <= 0
    return lin([1.0, -1.0], [m.x[a, e], m.first_unit[a - 1, d]]) <= 0


# ------------------------------------------------------------------------------- warm start
def _canonical(problem: Problem, dt: IPData, solution: Solution) -> tuple[np.ndarray, list[int]] | None:
    """Device of each unit and the used devices in pipeline order, with interchangeable devices
    renumbered the way the symmetry rows want (None when the plan cannot be a start)."""
    if any(s.replicas != 1 for s in solution.stages):
        return None
    sol = solution.compact()
    ev = evaluate(problem, sol)
    if not ev.feasible:
        return None
    dev_node = sol.node_device()
    dev = np.full(dt.U, -1, np.int64)
    dev[dt.unit_of] = dev_node
    if (dev[dt.unit_of] != dev_node).any():
        return None  # a colocation class split (evaluate would have said so)
    order = [int(sol.stages[k].device) for k in ev.stage_order]
    if not dt.ordered:
        first = {d: int(np.flatnonzero(dev == d).min()) for d in set(dev.tolist())}
        order = sorted(first, key=first.get)
    pos = {d: i for i, d in enumerate(order)}
    mapping = np.arange(dt.D)
    for cls in dt.classes:
        used = sorted((d for d in cls if d in pos), key=pos.get)
        unused = [d for d in cls if d not in pos]
        for new, old in zip(cls, used + unused, strict=True):
            mapping[old] = new
    return mapping[dev], [int(mapping[d]) for d in order]


def load_warm_start(model, problem: Problem, solution: Solution) -> bool:
    """Set every variable of ``model`` to what ``solution`` implies (a complete MIP start); False, with
    the model untouched, when the solution cannot be one (infeasible, replicated, over the horizon)."""
    dt: IPData = model.data
    can = _canonical(problem, dt, solution)
    if can is None:
        return False
    dev, order = can
    if (~dt.allowed[np.arange(dt.U), dev]).any():
        return False
    D, u = dt.D, dt.unit
    X = np.zeros((dt.U, D), bool)
    X[np.arange(dt.U), dev] = True
    for (a, d), var in model.x.items():
        var.set_value(float(X[a, d]))
    used = X.any(axis=0)
    for d in range(D):
        model.used[d].set_value(float(used[d]))
    prod_dev = dev[dt.val_prod]
    cons_devs = [set(dev[c].tolist()) for c in dt.val_cons]
    for (j, d), var in model.cin.items():
        var.set_value(float(d in cons_devs[j] and prod_dev[j] != d))
    for (j, d), var in model.cout.items():
        var.set_value(float(prod_dev[j] == d and bool(cons_devs[j] - {d})))
    fw = (dt.tf * X).sum(axis=0)
    bw = (dt.tb * X).sum(axis=0)
    for (j, d), var in model.cin.items():
        (bw if dt.val_back[j] else fw)[d] += dt.recv[j, d] * var.value
    for (j, d), var in model.cout.items():
        (bw if dt.val_back[j] else fw)[d] += dt.send[j, d] * var.value
    for (j, d), var in model.R.items():
        rate = float(dt.pair_recv[j, prod_dev[j], d]) if d in cons_devs[j] and prod_dev[j] != d else 0.0
        var.set_value(rate / u)
        (bw if dt.val_back[j] else fw)[d] += rate
    for (j, d), var in model.O.items():
        rates = [float(dt.pair_send[j, d, b]) for b in cons_devs[j] if b != d]
        rate = max(rates) if prod_dev[j] == d and rates else 0.0
        var.set_value(rate / u)
        (bw if dt.val_back[j] else fw)[d] += rate
    for d in range(D):
        model.fw[d].set_value(fw[d] / u)
        model.bw[d].set_value(bw[d] / u)
    model.L.set_value(float((fw + bw).max()) / u)
    model.Lf.set_value(float(fw.max()) / u)
    model.Lb.set_value(float(bw.max()) / u)
    if any(v.ub is not None and v.value > v.ub for v in (model.L, model.Lf, model.Lb)):
        return False
    for (k, d), var in model.pm.items():
        var.set_value(float((dev[dt.params[k][1]] == d).any()))
    for d in model.M:
        on = dev == d
        model.ws[d].set_value(float((dt.ws[on] / dt.capacity[d]).max()) if on.any() else 0.0)
    pos = {d: i for i, d in enumerate(order)}
    rank = {d: pos.get(d, len(order) + d) for d in range(D)}
    for (d, e), var in model.o.items():
        var.set_value(float(rank[d] < rank[e]))
    after = {}
    for (d, e), var in model.after.items():
        after[d, e] = float(rank[d] < rank[e] and used[e])
        var.set_value(after[d, e])
    for (d, j), var in model.fl.items():
        n_after = sum(after[d, e] for e in range(D) if e != d)
        on = bool(used[d]) and n_after + 1 >= j
        var.set_value(float(on))
        model.extra[d, j].set_value(float((dt.stash[dev == d]).sum() / dt.capacity[d]) if on else 0.0)
    if hasattr(model, "first_unit"):
        for (a, d), var in model.first_unit.items():
            var.set_value(float((dev[: a + 1] == d).any()))
    stage_of = {d: k for k, d in enumerate(order)}
    canon = Solution(np.array([stage_of[int(d)] for d in dev[dt.unit_of]]), tuple(Stage((d,)) for d in order),
                     solution.certificate, schedule=problem.schedule, microbatches=max(problem.microbatches, 1))
    ev = evaluate(problem, canon)
    if not ev.feasible:
        return False
    for d in model.M:
        model.mem_limit[d] = max(1.0 - MEMORY_MARGIN, float(ev.memory[d] / dt.capacity[d]))
    return True


# ------------------------------------------------------------------------------ solve/extract
def solve(model, options: SolveOptions, *, warm_start: bool = False) -> mip.MipResult:
    """Run the backend of ``options`` on ``model``; objective values come back in seconds."""
    return mip.solve_model(model, options, warm_start=warm_start, scale=model.time_unit)


def extract(model, problem: Problem) -> Solution:
    """The plan held by ``model``'s variables: one stage per used device, in pipeline order (order
    variables) or, without them, in order of each device's first node."""
    dt: IPData = model.data
    X = np.zeros((dt.U, dt.D))
    for (a, d), var in model.x.items():
        X[a, d] = var.value or 0.0
    dev = np.argmax(X, axis=1)[dt.unit_of]
    cert = Certificate(Status.HEURISTIC, ThroughputIP.name, version=VERSION)
    kw = dict(schedule=problem.schedule, microbatches=max(problem.microbatches, 1))
    if not dt.ordered:
        return Solution.from_devices(problem, dev, cert, **kw)
    used = sorted(set(dev.tolist()))
    before = {d: sum(round(model.o[e, d].value or 0.0) for e in used if e != d) for d in used}
    order = sorted(used, key=lambda d: (before[d], d))
    stage_of = {d: k for k, d in enumerate(order)}
    return Solution(np.array([stage_of[d] for d in dev.tolist()]), tuple(Stage((d,)) for d in order), cert, **kw)


# ----------------------------------------------------------------------------------- solver
_OWN_KEYS = ("start", "dp_share")


class ThroughputIP:
    """The exact pipeline IP: DP (or baseline) warm start -> MIP -> plan checked by evaluate.

    Options (``SolveOptions.passthrough``, removed before the backend sees the rest): ``start`` —
    ``"dp"`` (default: the DP's contiguous optimum, else the best baseline), ``"baselines"`` or
    ``"none"``; ``dp_share`` — share of the time limit the DP may use (default 0.3)."""

    name = "ip"
    objectives = frozenset({"throughput"})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        if problem.objective != "throughput":
            raise PlanmapError(f"the throughput IP solves objective 'throughput', not {problem.objective!r}")
        if problem.replication:
            raise SolverUnavailableError("the throughput IP does not model replicated stages; use solver 'dp' "
                                         "(contiguous pipelines with replication)")
        t0 = time.perf_counter()
        mip.get_backend(options.backend or "highs")
        own = {k: options.passthrough[k] for k in _OWN_KEYS if k in options.passthrough}
        backend_options = replace(options, passthrough={k: v for k, v in options.passthrough.items()
                                                        if k not in _OWN_KEYS})
        start, start_name, notes = self._start(problem, options, own)
        start_obj = evaluate(problem, start).objective if start is not None else None
        dt = prepare(problem, unit=start_obj / max(problem.num_devices, 1) if start_obj else None)
        tb = time.perf_counter()
        model = build_model(problem, data=dt, horizon=start_obj)
        build_time = time.perf_counter() - tb
        warm = start is not None and load_warm_start(model, problem, start)
        if start is not None and not warm:
            notes.append(f"warm start from {start_name} does not fit the model")
        left = max(1.0, options.time_limit - (time.perf_counter() - t0))
        result = solve(model, replace(backend_options, time_limit=left), warm_start=warm)
        chosen, origin = mip.choose_answer(
            problem, extract(model, problem) if result.has_solution else None, start, start_name, start_obj, notes,
            why="; 1F1B memory was relaxed in non-contiguous mode" if dt.relaxed else "")
        if chosen is None:
            if result.status == Status.INFEASIBLE:
                raise InfeasibleError(f"{problem.name}: no pipeline satisfies memory, pins and colocation "
                                      f"(proven by {result.backend})")
            raise PlanmapError(f"{problem.name}: the throughput IP found no plan within {options.time_limit:g} s "
                               f"({result.backend}: {result.termination}); raise the time limit")
        objective = evaluate(problem, chosen).objective
        bound = None if result.bound is None else min(result.bound, objective)
        gap = relative_gap(objective, bound)
        status = result.status or Status.TIME_LIMIT
        if status in (Status.OPTIMAL, Status.GAP_REACHED):
            status = Status.OPTIMAL if (gap or 0.0) <= mip.OPTIMAL_GAP else Status.GAP_REACHED
        status, bound, gap, notes = mip.unproven_if_infeasible(status, bound, gap, notes)
        parts = [f"{result.backend} {result.termination}: incumbent {_fmt(result.incumbent)}, bound {_fmt(result.bound)}"]
        if start_obj is not None:
            parts.append(f"warm start {start_name} {start_obj:.6g}s ({result.warm_start if warm else 'not used'})")
        if origin != "ip":
            parts.append(f"answer is the warm start ({origin})")
        parts.append(f"{'contiguous' if problem.contiguous else 'non-contiguous'}; model {model.nconstraints()} rows x "
                     f"{model.nvariables()} cols")
        opts = {k: v for k, v in result.options.items() if k != "time_limit"}  # the driver records the user's
        opts.update(contiguous=problem.contiguous, warm_start=start_name or None)
        return chosen.with_certificate(status=status, solver=self.name, objective=objective, bound=bound, gap=gap,
                                       version=VERSION, backend=result.version, message="; ".join(parts + notes),
                                       options=opts, wall_time=time.perf_counter() - t0,
                                       details=f"build {build_time:.2f}s, solve {result.solve_time:.2f}s")

    @staticmethod
    def _start(problem: Problem, options: SolveOptions, own: dict) -> tuple[Solution | None, str, list[str]]:
        from .dp import ThroughputDP, incumbents

        notes: list[str] = []
        how = str(own.get("start", "dp"))
        if options.warm_start is not None:
            return options.warm_start, "given warm start", notes
        if how == "none":
            return None, "", notes
        if how == "dp":
            share = float(own.get("dp_share", 0.3))
            try:
                sol = ThroughputDP().solve(problem, SolveOptions(time_limit=max(1.0, share * options.time_limit)))
                return sol, "dp", notes
            except PlanmapError as e:
                notes.append(f"dp start unavailable ({e})")
        found = incumbents(problem, replace(options, warm_start=None, passthrough={}))
        if found:
            return found[0][2], found[0][1], notes
        return None, "", notes


def _fmt(v: float | None) -> str:
    return "none" if v is None else f"{v:.6g}s"

"""Warm starts for the latency IP: a complete MIP start from any placement, in the model's terms.

A start only helps HiGHS when every variable has a value consistent with every row (else HiGHS
repairs or rejects it), so the placement is first brought into the form the symmetry-breaking rows
accept (:func:`canonical`: interchangeable devices numbered by first node), then every auxiliary
variable — finish times, convexity cover, transfer flags and charges, memory terms — is set to what
the placement implies under :func:`planmap.evaluate.evaluate`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, Stage, Status

from .blocks import block_plan, placement_of
from .data import MEMORY_MARGIN, LatencyData, _own_bytes, prepare

__all__ = ["canonical", "load_warm_start", "block_start"]


def _slots_of(problem: Problem, dt: LatencyData, solution: Solution) -> np.ndarray | None:
    """Unit of each stage of ``solution`` (accelerator stages fill their device's slots in list
    order; CPU stages map to their device's unit), or None when it needs more than q slots."""
    S = dt.num_slots
    unit_of_stage = np.full(solution.num_stages, -1, np.int64)
    used: dict[int, int] = {}
    for k, st in enumerate(solution.stages):
        d = st.device
        if problem.topology.is_cpu[d]:
            unit_of_stage[k] = S + int(np.flatnonzero(dt.unit_dev[S:] == d)[0])
            continue
        pos = used.get(d, 0)
        if pos >= dt.q:
            return None
        used[d] = pos + 1
        unit_of_stage[k] = int(np.flatnonzero((dt.unit_dev[:S] == d) & (dt.slot_pos == pos))[0])
    return unit_of_stage


def canonical(problem: Problem, solution: Solution, classes) -> Solution:
    """The same placement with interchangeable devices renumbered in order of their first node (what
    the symmetry-breaking rows require), and unused stages dropped."""
    sol = solution.compact()
    dev = sol.node_device()
    mapping = np.arange(problem.num_devices)
    for cls in classes:
        first = {d: (int(np.flatnonzero(dev == d)[0]) if (dev == d).any() else problem.num_nodes, d) for d in cls}
        for new, old in zip(cls, sorted(cls, key=first.__getitem__), strict=True):
            mapping[old] = new
    stages = tuple(Stage((int(mapping[s.device]),)) for s in sol.stages)
    return replace(sol, stages=stages)


def load_warm_start(model, problem: Problem, solution: Solution) -> bool:
    """Set every variable of ``model`` to the values ``solution`` implies (a complete MIP start).

    Returns False, leaving the model untouched, when the solution cannot be a start: infeasible,
    more than q subgraphs on a device, or slower than the model's horizon.
    """
    dt: LatencyData = model.data
    if any(s.replicas != 1 for s in solution.stages):
        return False
    sol = canonical(problem, solution, dt.classes)
    ev = evaluate(problem, sol)
    if not ev.feasible or ev.objective / dt.time_scale > dt.horizon or ev.node_finish is None:
        return False
    unit_of_stage = _slots_of(problem, dt, sol)
    if unit_of_stage is None:
        return False
    unit_of = unit_of_stage[sol.assignment]
    n, S, U, u = dt.n, dt.num_slots, dt.num_units, dt.time_scale
    if not dt.allowed[np.arange(n), dt.unit_dev[unit_of]].all():
        return False  # a device presolve ruled out (only a start slower than the horizon uses one)
    X = np.zeros((n, U), bool)
    X[np.arange(n), unit_of] = True
    for (v, w), var in model.x.items():
        var.set_value(float(X[v, w]))
    model.T.set_value(min(max(ev.objective / u, model.T.lb), model.T.ub))  # float noise at the bounds
    for v in range(n):  # within the node's window (float noise at its ends)
        model.lat[v].set_value(min(max(float(ev.node_finish[v]) / u, model.lat[v].lb), model.lat[v].ub))
    stage_of_unit = {int(w): k for k, w in enumerate(unit_of_stage)}
    prev_fin = 0.0
    for s in range(S):
        if dt.slot_pos[s] == 0:
            prev_fin = 0.0
        k = stage_of_unit.get(s)
        st, fi = (ev.stage_start[k] / u, ev.stage_finish[k] / u) if k is not None else (prev_fin, prev_fin)
        model.start[s].set_value(st)
        model.fin[s].set_value(fi)
        prev_fin = fi
    # convexity cover: the subgraph and its ancestors
    sindptr, sids = problem.graph.succ
    Z = X[:, :S].copy()
    for v in range(n - 1, -1, -1):
        w = sids[sindptr[v]: sindptr[v + 1]]
        if len(w):
            Z[v] |= Z[w].any(axis=0)
    for (v, s), var in model.z.items():
        var.set_value(float(Z[v, s]))
    prod_unit = unit_of[dt.val_prod]
    cons_units: list[set[int]] = [set() for _ in range(len(dt.val_prod))]
    for j, c in zip(dt.pair_val.tolist(), dt.pair_cons.tolist(), strict=True):
        cons_units[j].add(int(unit_of[c]))
    for (j, s), var in model.cin.items():
        var.set_value(float(s in cons_units[j] and prod_unit[j] != s))
    for (j, s), var in model.cout.items():
        var.set_value(float(prod_unit[j] == s and bool(cons_units[j] - {s})))
    ud = dt.unit_dev
    for (j, s), var in model.R.items():
        var.set_value(float(dt.recv[j, ud[prod_unit[j]], ud[s]]) if s in cons_units[j] and prod_unit[j] != s else 0.0)
    for (j, s), var in model.O.items():
        outs = [float(dt.send[j, ud[s], ud[w]]) for w in cons_units[j] if w != s]
        var.set_value(max(outs) if prod_unit[j] == s and outs else 0.0)
    delay_lv = model.levels["delay"]
    for i, var in model.delay.items():
        j, c = int(dt.pair_val[i]), int(dt.pair_cons[i])
        w = int(unit_of[c])
        var.set_value(float(dt.recv[j, ud[prod_unit[j]], ud[w]]) if (i, w) in delay_lv else 0.0)
    node_dev = ud[unit_of]
    for (p, d), var in model.pm.items():
        var.set_value(float(np.any(node_dev[dt.param_use[1][dt.param_use[0] == p]] == d)))
    for d in model.M:
        on = node_dev == d
        model.ws[d].set_value(float((dt.working_set[on] / dt.capacity[d]).max()) if on.any() else 0.0)
        model.mem_limit[d] = max(1.0 - MEMORY_MARGIN, float(ev.memory[d] / dt.capacity[d]))
    for (v, d), var in model.used.items():
        var.set_value(float((node_dev[: v + 1] == d).any()))
    for s in range(S):
        model.nonempty[s].set_value(float(X[:, s].any()))
    return True


def block_start(problem) -> Solution | None:
    """The DP's best labelling as a placement (:func:`.blocks.placement_of`), for a solver to start from; None when
    the graph is skipped, the labelling was merged away, or no device takes a call. Check it with
    :func:`planmap.evaluate.evaluate`: the DP relaxes memory sharing and device contention."""
    dt = prepare(problem, bounds=False)
    plan = block_plan(dt.t, dt.allowed, problem.topology.is_cpu, dt.q, dt.edges, dt.val_prod, dt.pair_val,
                      dt.pair_cons, dt.recv, dt.send, _own_bytes(dt.node_mem, dt.param_use, dt.param_bytes),
                      dt.working_set, dt.capacity)
    if plan is None or plan.labels is None or not np.isfinite(plan.bound):
        return None
    return placement_of(problem, plan.labels, Certificate(Status.HEURISTIC, "cut-node block DP"))

"""An exact CP-SAT model of evaluate's latency (OR-Tools), to see whether a constraint solver proves more than the IP.

The question (issue 15): the IP's branch and bound adds nothing to the bound :func:`solvers.latency.data.prepare`
proves, gnmt-layer stays at 65.91 ms against an incumbent near 80 ms. This model states the same problem as the
IP (:mod:`planmap.solvers.latency.ip`) in CP-SAT's terms: placement literals per (node, unit), convex calls by a
predecessor-closed cover, receive and send charges as enforced lower bounds per (value, call), per-node finish
times, calls of one device chained in slot order, memory with the largest working set, colocation, identical
devices ordered by their first node, empty slots last, and ``prepare``'s time windows, per-device bound rows and
lower bound as constraints. Times are integers: every duration and charge is rounded down at ``ticks`` per
horizon, so the model is a relaxation and the bound it proves (converted back) is a valid lower bound; its
placements are judged by :func:`planmap.evaluate.evaluate`. Result: docs/notes/latency-bounds.md ("CP-SAT").

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/latency_cpsat.py gnmt-layer --seconds 60 300 600 --workers 1
    ... --param optimize_with_lb_tree_search=true linearization_level=2 --save best.json   # CP-SAT parameters

Outcome (gnmt-layer, 600 s, 1-2 workers): the bound stays at ``prepare``'s 65.91 ms; the incumbent improves on
the IP's (78.14-79.58 ms against 79.66-80.15), so it is kept as a bench, not a solver.

Needs ``ortools`` (``pip install ortools==9.15.6755``; it wants protobuf < 6.34, which the optional tf extra's
pin does not allow, so it is not a dependency of the project).
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, Stage, Status
from planmap.solvers.latency.data import LatencyData, prepare

TICKS = 200_000  # integer time steps per horizon (durations are rounded down to them)


@dataclass
class CpModel:
    """The CP-SAT model and the variables a placement and a hint are read from and written to."""

    model: object
    data: LatencyData
    scale: float  # ticks per model time unit
    x: dict  # (node, unit) -> literal
    lat: list  # node finish times
    start: list  # slot starts
    end: list  # slot ends
    used: list  # slot holds a node
    z: dict  # (node, slot) -> cover literal
    T: object  # latency


def _floor(a, k: float) -> int:
    return int(math.floor(float(a) * k + 1e-9))


def build(problem: Problem, dt: LatencyData, ticks: int = TICKS, windows: bool = True) -> CpModel:
    """The model of ``problem`` on ``prepare``'s data ``dt`` (with ``windows``: its time bounds as constraints)."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    n, S, U, D = dt.n, dt.num_slots, dt.num_units, problem.num_devices
    ud = dt.unit_dev
    k = ticks / dt.horizon
    H = int(math.ceil(dt.horizon * k)) + 1
    xs = dt.allowed[:, ud]
    src, dst = (a.tolist() for a in dt.edges)
    x = {(v, u): m.NewBoolVar(f"x{v}_{u}") for v in range(n) for u in range(U) if xs[v, u]}
    for v in range(n):
        m.AddExactlyOne(x[v, u] for u in range(U) if xs[v, u])
    units_on = [[u for u in range(U) if ud[u] == d] for d in range(D)]
    y = {}
    for v in range(n):
        for d in range(D):
            lits = [x[v, u] for u in units_on[d] if xs[v, u]]
            if len(lits) == 1:
                y[v, d] = lits[0]
            elif lits:
                y[v, d] = m.NewBoolVar(f"y{v}_{d}")
                m.Add(sum(lits) == y[v, d])
    for a, b in dt.colocated:
        for d in range(D):
            ya, yb = y.get((a, d)), y.get((b, d))
            if ya is None or yb is None:
                for lit in (ya, yb):
                    if lit is not None:
                        m.Add(lit == 0)
            else:
                m.Add(ya == yb)
    # convexity: a predecessor-closed cover z of each slot that no path leaving the slot re-enters
    z = {(v, s): m.NewBoolVar(f"z{v}_{s}") for v in range(n) for s in range(S)}
    for s in range(S):
        for v in range(n):
            if xs[v, s]:
                m.AddImplication(x[v, s], z[v, s])
        for a, b in zip(src, dst, strict=True):
            m.AddImplication(z[b, s], z[a, s])
            if xs[a, s]:
                m.AddBoolOr([z[b, s].Not(), x[a, s].Not()] + ([x[b, s]] if xs[b, s] else []))
    # slots: used, empty last, no value from a later call of a device back to an earlier one
    used = [m.NewBoolVar(f"used{s}") for s in range(S)]
    for s in range(S):
        lits = [x[v, s] for v in range(n) if xs[v, s]]
        m.AddMaxEquality(used[s], lits) if lits else m.Add(used[s] == 0)
        if dt.slot_pos[s] > 0:
            m.AddImplication(used[s], used[s - 1])
    for a, b in zip(src, dst, strict=True):
        for s in range(S):
            for s2 in range(s + 1, s + dt.q - int(dt.slot_pos[s])):
                if xs[b, s] and xs[a, s2]:
                    m.AddBoolOr([x[b, s].Not(), x[a, s2].Not()])
    _memory(m, dt, y, D)
    _symmetry(m, dt, y, n)
    # times
    head = dt.head if windows else np.zeros(n)
    ub = dt.lat_ub if (windows and dt.lat_ub is not None) else np.full(n, dt.horizon)
    lat = [m.NewIntVar(min(_floor(head[v], k), H), H if not math.isfinite(ub[v]) else min(H, int(math.ceil(ub[v] * k))
                       + 1), f"lat{v}") for v in range(n)]
    start = [m.NewIntVar(0, H, f"start{s}") for s in range(S)]
    end = [m.NewIntVar(0, H, f"end{s}") for s in range(S)]
    T = m.NewIntVar(_floor(dt.lower, k) if windows else 0, H, "T")
    _charges_and_durations(m, dt, x, xs, start, end, used, k, H)
    prod_of_pair = dt.val_prod[dt.pair_val]
    for s in range(S):
        if dt.slot_pos[s] > 0:
            m.Add(start[s] >= end[s - 1]).OnlyEnforceIf(used[s])
        for v in range(n):
            if xs[v, s]:
                m.Add(lat[v] == end[s]).OnlyEnforceIf(x[v, s])
        for a, b in zip(src, dst, strict=True):
            if xs[b, s]:
                m.Add(start[s] >= lat[a]).OnlyEnforceIf([x[b, s]] + ([x[a, s].Not()] if xs[a, s] else []))
        m.Add(T >= end[s])
    cpu_units = range(S, U)
    for w in cpu_units:
        c = int(ud[w])
        for v in range(n):
            if xs[v, w]:
                m.Add(lat[v] >= _floor(dt.t[v, c], k)).OnlyEnforceIf(x[v, w])
        for a, b in zip(src, dst, strict=True):
            if xs[b, w]:
                m.Add(lat[b] >= lat[a] + _floor(dt.t[b, c], k)).OnlyEnforceIf(x[b, w])
        for i in range(len(dt.pair_val)):
            j, b, a = int(dt.pair_val[i]), int(dt.pair_cons[i]), int(prod_of_pair[i])
            if not xs[b, w]:
                continue
            for u in range(U):
                if u != w and xs[a, u] and _floor(dt.recv[j, ud[u], c], k) > 0:
                    m.Add(lat[b] >= lat[a] + _floor(dt.recv[j, ud[u], c] + dt.t[b, c], k)).OnlyEnforceIf(
                        [x[b, w], x[a, u]])
    for v in range(n):
        m.Add(T >= lat[v])
    if windows and dt.bounds is not None:
        b = dt.bounds
        for v in range(n):
            for d in range(D):
                if (v, d) in y and math.isfinite(b.through[v, d]):
                    m.Add(T >= _floor(b.through[v, d], k)).OnlyEnforceIf(y[v, d])
                    m.Add(lat[v] >= _floor(b.finish[v, d], k)).OnlyEnforceIf(y[v, d])
                    if b.tail_fin[v, d] > 0:
                        m.Add(T >= lat[v] + _floor(b.tail_fin[v, d], k)).OnlyEnforceIf(y[v, d])
    m.Minimize(T)
    return CpModel(m, dt, k, x, lat, start, end, used, z, T)


def _memory(m, dt: LatencyData, y: dict, D: int) -> None:
    """Per device: state, distinct parameters, the largest working set (bytes rounded down: a relaxation)."""
    pv, pn = dt.param_use
    for d in range(D):
        cap = dt.capacity[d]
        if not math.isfinite(cap):
            continue
        on = [v for v in range(dt.n) if (v, d) in y]
        terms = [int(dt.node_mem[v]) * y[v, d] for v in on if dt.node_mem[v] >= 1]
        for p in np.unique(pv).tolist():
            users = [int(c) for c in pn[pv == p] if (int(c), d) in y]
            if users and dt.param_bytes[p] >= 1:
                held = m.NewBoolVar(f"pm{p}_{d}")
                m.AddMaxEquality(held, [y[c, d] for c in users])
                terms.append(int(dt.param_bytes[p]) * held)
        wss = sorted({int(dt.working_set[v]) for v in on if dt.working_set[v] >= 1})
        if wss:
            ws = m.NewIntVar(0, wss[-1], f"ws{d}")
            for v in on:
                if dt.working_set[v] >= 1:
                    m.Add(ws >= int(dt.working_set[v])).OnlyEnforceIf(y[v, d])
            terms.append(ws)
        m.Add(sum(terms) <= int(math.ceil(cap)))


def _symmetry(m, dt: LatencyData, y: dict, n: int) -> None:
    """Identical devices take nodes in order of their first node (as the IP's ``first_use`` rows)."""
    for cls in dt.classes:
        seen = {}
        for d in cls:
            prev = None
            for v in range(n):
                b = m.NewBoolVar(f"seen{v}_{d}")
                lits = ([prev] if prev is not None else []) + ([y[v, d]] if (v, d) in y else [])
                m.AddMaxEquality(b, lits) if lits else m.Add(b == 0)
                seen[v, d] = b
                prev = b
        for d, e in zip(cls[:-1], cls[1:], strict=True):
            for v in range(n):
                if (v, e) in y:
                    if v == 0:
                        m.Add(y[v, e] == 0)
                    else:
                        m.AddImplication(y[v, e], seen[v - 1, d])


def _charges_and_durations(m, dt: LatencyData, x, xs, start, end, used, k: float, H: int) -> None:
    """A call's duration: its nodes' compute, each value it receives (at the producer's unit's charge)
    and each value it sends (at the dearest consumer unit's charge)."""
    S, U, ud = dt.num_slots, dt.num_units, dt.unit_dev
    prod_of_pair = dt.val_prod[dt.pair_val]
    for s in range(S):
        d = int(ud[s])
        terms = [_floor(dt.t[v, d], k) * x[v, s] for v in range(dt.n) if xs[v, s]]
        recv: dict[int, object] = {}
        send: dict[int, object] = {}
        for i in range(len(dt.pair_val)):
            j, c, p = int(dt.pair_val[i]), int(dt.pair_cons[i]), int(prod_of_pair[i])
            if xs[c, s]:  # received: consumer inside, producer on another unit
                for u in range(U):
                    lv = _floor(dt.recv[j, ud[u], d], k)
                    if u != s and xs[p, u] and lv > 0:
                        r = recv.setdefault(j, m.NewIntVar(0, H, f"r{j}_{s}"))
                        m.Add(r >= lv).OnlyEnforceIf([x[c, s], x[p, u]])
            if xs[p, s]:  # sent: producer inside, consumer on another unit
                for u in range(U):
                    lv = _floor(dt.send[j, d, ud[u]], k)
                    if u != s and xs[c, u] and lv > 0:
                        o = send.setdefault(j, m.NewIntVar(0, H, f"o{j}_{s}"))
                        m.Add(o >= lv).OnlyEnforceIf([x[p, s], x[c, u]])
        dur = sum(terms) + sum(recv.values()) + sum(send.values())
        m.Add(end[s] == start[s] + dur)
        m.Add(end[s] == start[s]).OnlyEnforceIf(used[s].Not())


# ------------------------------------------------------------------------------- placements
def units_of(problem: Problem, dt: LatencyData, sol: Solution) -> np.ndarray:
    """The unit of each node in ``sol`` (a device's calls in stage order fill its slots)."""
    S, ud = dt.num_slots, dt.unit_dev
    unit_of_stage = {}
    taken: dict[int, int] = {}
    for k, st in enumerate(sol.stages):
        d = st.device
        if problem.topology.is_cpu[d]:
            unit_of_stage[k] = S + int(np.flatnonzero(ud[S:] == d)[0])
        else:
            pos = taken.get(d, 0)
            taken[d] = pos + 1
            unit_of_stage[k] = int(np.flatnonzero((ud[:S] == d) & (dt.slot_pos == pos))[0])
    return np.array([unit_of_stage[int(a)] for a in sol.assignment])


def canonical_units(problem: Problem, dt: LatencyData, units: np.ndarray) -> np.ndarray:
    """``units`` with identical devices relabelled in order of their first node (the model's symmetry rows)."""
    S, ud = dt.num_slots, dt.unit_dev
    out = units.copy()
    for cls in dt.classes:
        first = {d: next((v for v in range(dt.n) if units[v] < S and ud[units[v]] == d), dt.n) for d in cls}
        order = sorted(cls, key=lambda d: (first[d], d))
        for old, new in zip(order, cls, strict=True):
            for pos in range(dt.q):
                uo = int(np.flatnonzero((ud[:S] == old) & (dt.slot_pos == pos))[0])
                un = int(np.flatnonzero((ud[:S] == new) & (dt.slot_pos == pos))[0])
                out[units == uo] = un
    return out


def solution_of(dt: LatencyData, units: np.ndarray) -> Solution:
    """The placement of node units ``units`` as a :class:`Solution` (used units only, slot order kept)."""
    from planmap.problem import Certificate

    used = sorted(set(units.tolist()))
    idx = {u: i for i, u in enumerate(used)}
    stages = tuple(Stage((int(dt.unit_dev[u]),)) for u in used)
    return Solution(np.array([idx[int(u)] for u in units]), stages, Certificate(Status.HEURISTIC, "cp-sat"))


def hint(cm: CpModel, problem: Problem, units: np.ndarray) -> None:
    """Hint the placement ``units`` (placement and cover literals, times from evaluate)."""
    dt, m = cm.data, cm.model
    S = dt.num_slots
    for (v, u), lit in cm.x.items():
        m.AddHint(lit, int(units[v] == u))
    anc = _ancestors(dt)
    for (v, s), lit in cm.z.items():
        m.AddHint(lit, int(any(units[w] == s and (w == v or anc[w] >> v & 1) for w in range(dt.n))))
    for s in range(S):
        m.AddHint(cm.used[s], int((units == s).any()))
    ev = evaluate(problem, solution_of(dt, units))
    if ev.node_finish is not None and ev.feasible:
        k = cm.scale / dt.time_scale
        for v in range(dt.n):
            m.AddHint(cm.lat[v], _floor(ev.node_finish[v], k))


def _ancestors(dt: LatencyData) -> list[int]:
    anc = [0] * dt.n
    src, dst = dt.edges
    for a, b in sorted(zip(src.tolist(), dst.tolist(), strict=True), key=lambda e: e[1]):
        anc[b] |= anc[a] | (1 << a)
    return anc


# ------------------------------------------------------------------------------------ solve
def solve(problem: Problem, dt: LatencyData, seconds: float, workers: int = 1, start: Solution | None = None,
          marks: tuple[float, ...] = (), windows: bool = True, log=print, params: dict | None = None):
    """Solve for ``seconds``; returns (best placement or None, its latency under evaluate, bound in s, trace of
    (wall s, CPU s, incumbent s, bound s) at each of ``marks`` and at the end)."""
    from ortools.sat.python import cp_model

    cm = build(problem, dt, windows=windows)
    if start is not None:
        hint(cm, problem, canonical_units(problem, dt, units_of(problem, dt, start)))
    to_s = dt.time_scale / cm.scale
    trace: list[tuple[float, float, float, float]] = []

    t0, c0 = time.perf_counter(), time.process_time()
    state = {"inc": math.inf, "bound": 0.0}
    pending = sorted(marks)

    lock = threading.Lock()

    def note(inc=None, bound=None):
        with lock:
            _note(inc, bound)

    def _note(inc, bound):
        wall = time.perf_counter() - t0
        while pending and wall >= pending[0]:  # the state up to now (updates come after)
            trace.append((pending.pop(0), time.process_time() - c0, state["inc"], state["bound"]))
            log(f"  by {trace[-1][0]:g} s: cpu {trace[-1][1]:.1f} s incumbent {state['inc'] * 1e3:.3f} ms "
                f"(model time) bound {state['bound'] * 1e3:.3f} ms")
        if inc is not None:
            state["inc"] = min(state["inc"], inc * to_s)
        if bound is not None:
            state["bound"] = max(state["bound"], bound * to_s)

    class Marks(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            note(inc=self.ObjectiveValue())

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = seconds
    for key, value in (params or {}).items():  # e.g. linearization_level=2, optimize_with_lb_tree_search=true
        cur = getattr(solver.parameters, key)
        setattr(solver.parameters, key, value.lower() == "true" if isinstance(cur, bool) else type(cur)(value))
    solver.best_bound_callback = lambda b: note(bound=b)
    timers = [threading.Timer(mark, note) for mark in pending]  # the marks' CPU time, also when nothing happens
    for timer in timers:
        timer.start()
    status = solver.Solve(cm.model, Marks())
    for timer in timers:
        timer.cancel()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    bound = solver.BestObjectiveBound() * to_s
    best, lat_s = None, math.inf
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        units = np.zeros(dt.n, np.int64)
        for (v, u), lit in cm.x.items():
            if solver.Value(lit):
                units[v] = u
        best = solution_of(dt, units)
        ev = evaluate(problem, best)
        lat_s = ev.objective if ev.feasible else math.inf
    trace.append((wall, cpu, lat_s, bound))
    log(f"  status {solver.StatusName(status)} wall {wall:.1f} s cpu {cpu:.1f} s "
        f"incumbent {lat_s * 1e3:.3f} ms bound {bound * 1e3:.3f} ms")
    return best, lat_s, bound, trace


def _instance(name: str) -> Problem:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    from latency import synthetic_instances

    return dict(synthetic_instances(False))[name]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance")
    ap.add_argument("--seconds", type=float, nargs="+", default=[60.0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--param", nargs="*", default=[], help="CP-SAT parameters as name=value")
    ap.add_argument("--save", help="write the best placement's units (JSON) here")
    ap.add_argument("--start-seconds", type=float, default=60.0, help="time for the IP's start (baselines + moves)")
    args = ap.parse_args(argv)
    from _stamp import header  # bench/, the script's folder, is on the path

    from planmap.problem import SolveOptions
    from planmap.solvers.latency.baselines import best_baseline
    from planmap.solvers.latency.moves import improve, moves_budget

    p = _instance(args.instance)
    import ortools

    print(header() + f"; ortools {ortools.__version__}\n", flush=True)
    c0 = time.process_time()
    if args.instance == "gnmt-layer":  # the call moves' 80.62-ms placement (latency-bounds.md, "call moves")
        start, name = _gnmt_start(p), "the call moves' placement"
    else:
        start, name, _ = best_baseline(p, SolveOptions(time_limit=args.start_seconds), args.start_seconds,
                                       seconds=0.5 * args.start_seconds)
        start, _ = improve(p, start, budget=moves_budget(p, 5 * args.start_seconds))
        name += " + call moves"
    h = evaluate(p, start).objective
    dt = prepare(p, h, probe_seconds=0.1 * args.start_seconds)
    print(f"{args.instance}: start {h * 1e3:.3f} ms ({name}), prepare bound {dt.lower * dt.time_scale * 1e3:.3f}"
          f" ms, {time.process_time() - c0:.1f} CPU s")
    sec = max(args.seconds)
    print(f"CP-SAT {sec:g} s, {args.workers} worker(s):", flush=True)
    params = dict(kv.split("=", 1) for kv in args.param)
    best, latency, _, _ = solve(p, dt, sec, args.workers, start, marks=tuple(s for s in args.seconds if s < sec),
                                log=lambda *a: print(*a, flush=True), params=params)
    if args.save and best is not None:
        import json

        calls = [[int(st.device), np.flatnonzero(best.assignment == k).tolist()] for k, st in enumerate(best.stages)]
        with open(args.save, "w") as f:
            json.dump({"instance": args.instance, "latency_s": latency, "calls": calls}, f)
    return 0


def _gnmt_start(p: Problem) -> Solution:
    """The 80.62-ms placement: CPU {18-22, 50}; acc0 {9-16} then {25-49, 51}; acc1 {1-8} then {24};
    acc2 {23} then {52-98}; acc3 {0} then {17}."""
    from planmap.problem import Certificate

    calls = [(0, [*range(18, 23), 50]), (1, range(9, 17)), (1, [*range(25, 50), 51]), (2, range(1, 9)), (2, [24]),
             (3, [23]), (3, range(52, 99)), (4, [0]), (4, [17])]
    a = np.zeros(p.num_nodes, np.int64)
    for k, (_, nodes) in enumerate(calls):
        a[list(nodes)] = k
    return Solution(a, tuple(Stage((d,)) for d, _ in calls), Certificate(Status.HEURISTIC, "moves"))


if __name__ == "__main__":
    raise SystemExit(main())

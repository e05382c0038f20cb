"""The numbers a latency IP is built from, and the placements it starts from.

:func:`prepare` turns a :class:`~planmap.problem.Problem` into numpy arrays in well-conditioned
model time units (transfer charges per value and pair of devices exactly as
:func:`planmap.evaluate.evaluate` charges them, min-time longest paths, memory terms, colocation
pairs, interchangeable devices); :func:`best_baseline` asks the registry's baselines, the packed
splits and the contiguous split DP (:mod:`.splits`) for the best feasible placement, the
MIP's warm start and horizon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Problem, Solution, SolveOptions

from .cuts import BUCKETS, TimeBounds, fits_alone, memory_buckets, reduce_allowed, time_bounds
from .splits import best_splits

__all__ = ["LatencyData", "prepare", "interchangeable_devices", "charge_levels", "best_baseline", "BASELINES",
           "MEMORY_MARGIN"]

BASELINES = ("greedy", "local-search", "metis", "dp", "even", "single")
MEMORY_MARGIN = 1e-6  # share of each device's memory kept free of backend tolerances


# --------------------------------------------------------------------------------------- data
@dataclass(frozen=True, eq=False)
class LatencyData:
    """The numbers of one latency problem, as numpy arrays in model units (``unit`` seconds each).

    Units are where nodes run: accelerator subgraph slots ``0..S-1`` (``q`` per accelerator, run in
    slot order) followed by one unit per CPU device. Values are the node outputs some other node
    consumes; ``pairs`` are the distinct (value, consumer) uses.
    """

    n: int
    q: int
    unit: float  # seconds per model time unit
    horizon: float  # upper bound on the latency, model units
    unit_dev: np.ndarray  # (U,) device of each unit
    num_slots: int
    slot_pos: np.ndarray  # (S,) position of each slot on its device
    t: np.ndarray  # (n, D) compute, model units (inf where not allowed)
    allowed: np.ndarray  # (n, D)
    val_prod: np.ndarray  # (V,) producer node of each value
    pair_val: np.ndarray  # (P,) value index (into val_prod) of each use
    pair_cons: np.ndarray  # (P,) consumer node of each use
    recv: np.ndarray  # (V, D, D) [j, a, b]: receiver on b pays for a producer on a (a == b: other unit)
    send: np.ndarray  # (V, D, D) [j, a, b]: sender on a pays for a consumer on b
    edges: tuple[np.ndarray, np.ndarray]  # unique node edges (src, dst)
    head: np.ndarray  # (n,) lower bound on each node's finish time, model units
    node_mem: np.ndarray  # (n,) bytes resident wherever the node runs (state, stash)
    working_set: np.ndarray  # (n,) bytes
    param_use: tuple[np.ndarray, np.ndarray]  # distinct (param value, consumer node)
    param_bytes: np.ndarray  # (m,) bytes per value (x param factor)
    capacity: np.ndarray  # (D,) bytes
    colocated: tuple[tuple[int, int], ...]  # consecutive members of each colocation class
    classes: tuple[tuple[int, ...], ...]  # interchangeable devices (symmetry breaking)
    bounds: TimeBounds | None = None  # placement-aware time bounds (see .cuts)
    lat_ub: np.ndarray | None = None  # (n,) upper bound on each node's finish time, model units

    @property
    def num_units(self) -> int:
        return len(self.unit_dev)


def interchangeable_devices(problem: Problem) -> list[tuple[int, ...]]:
    """Groups of devices that any placement may permute without changing anything evaluate sees:
    same type and memory, same allowed nodes, and transfer charges invariant under the swap."""
    topo = problem.topology
    mats = (topo.send_lat, topo.send_ibw, topo.recv_lat, topo.recv_ibw, topo.send_paid, topo.recv_paid)
    D = topo.num_devices
    classes: list[list[int]] = []
    for d in range(D):
        for cls in classes:
            r = cls[0]
            if (topo.signature(r) != topo.signature(d) or topo.memory[r] != topo.memory[d]
                    or topo.host_io[r] != topo.host_io[d]
                    or not np.array_equal(problem.allowed[:, r], problem.allowed[:, d])):
                continue
            perm = np.arange(D)
            perm[r], perm[d] = d, r
            if all(np.array_equal(M[np.ix_(perm, perm)], M) for M in mats):
                cls.append(d)
                break
        else:
            classes.append([d])
    return [tuple(c) for c in classes if len(c) > 1]


def _head(n: int, pred: tuple[np.ndarray, np.ndarray], tmin: np.ndarray) -> np.ndarray:
    indptr, ids = pred
    head = np.zeros(n)
    for v in range(n):
        p = ids[indptr[v]: indptr[v + 1]]
        head[v] = tmin[v] + (head[p].max() if len(p) else 0.0)
    return head


def _trivial_horizon(problem: Problem) -> float:
    """A latency no placement exceeds: every compute and every charge paid one after another."""
    cost, g = problem.cost, problem.graph
    t = np.where(problem.allowed, cost.device_compute, 0.0)
    total = float(t.max(axis=1).sum()) if g.num_nodes else 0.0
    src = g.edge_src
    vals = g.edge_value[src >= 0]
    if len(vals):
        D = problem.num_devices
        a, b = np.meshgrid(np.arange(D), np.arange(D), indexing="ij")
        worst = max(float(cost.recv_cost(vals[:, None, None], a[None], b[None]).max()),
                    float(cost.host_io_cost(vals).max()))
        worst += max(float(cost.send_cost(vals[:, None, None], a[None], b[None]).max()),
                     float(cost.host_io_cost(vals).max()))
        total += worst * len(vals)
    return total


def _own_bytes(node_mem: np.ndarray, param_use, param_bytes: np.ndarray) -> np.ndarray:
    """Bytes a node brings to any device it runs on, whatever else runs there: its state and the
    parameters no other node uses (shared ones are held once, so they are left out)."""
    pv, pn = param_use
    own = node_mem.astype(float).copy()
    if len(pv):
        users = np.bincount(pv, minlength=len(param_bytes))
        solo = users[pv] == 1
        own += np.bincount(pn[solo], weights=param_bytes[pv[solo]], minlength=len(own))
    return own


def _colocated_allowed(allowed: np.ndarray, colocation: np.ndarray) -> np.ndarray:
    """A colocation class runs on one device: only where every member may run."""
    out = allowed.copy()
    for c in np.unique(colocation[colocation >= 0]).tolist():
        members = np.flatnonzero(colocation == c)
        out[members] = out[members].all(axis=0)
    return out


def prepare(problem: Problem, horizon: float | None = None, *, bounds: bool = True) -> LatencyData:
    """The model's data; ``horizon`` (seconds) bounds the latency of solutions worth finding.

    With ``bounds`` (the default), placement-aware time bounds (:mod:`.cuts`) tighten the
    node time windows and rule out devices no placement under the horizon can use, so the model
    never creates their columns; without, the model is the plain formulation (tests compare both).
    """
    g, topo, cost = problem.graph, problem.topology, problem.cost
    n, D = g.num_nodes, topo.num_devices
    q = max(1, int(problem.max_subgraphs))
    acc = np.flatnonzero(~topo.is_cpu)
    cpus = np.flatnonzero(topo.is_cpu)
    slot_dev = np.repeat(acc, q)
    slot_pos = np.tile(np.arange(q), len(acc))
    unit_dev = np.concatenate([slot_dev, cpus]).astype(np.int64)
    h = _trivial_horizon(problem) if horizon is None else float(horizon)
    unit = 10.0 ** (math.floor(math.log10(h)) - 2) if h > 0 and math.isfinite(h) else 1.0
    allowed = problem.allowed.copy()
    t = np.where(allowed, cost.device_compute, np.inf) / unit
    # values that cross: (value, consumer) uses of node outputs
    keep = g.edge_src >= 0
    pairs = np.unique(np.stack([g.edge_value[keep], g.edge_dst[keep]], 1), axis=0) if keep.any() \
        else np.zeros((0, 2), np.int64)
    vals, pair_val = np.unique(pairs[:, 0], return_inverse=True)
    a, b = np.meshgrid(np.arange(D), np.arange(D), indexing="ij")
    recv = cost.recv_cost(vals[:, None, None], a[None], b[None]).astype(float)
    send = cost.send_cost(vals[:, None, None], a[None], b[None]).astype(float)
    io = cost.host_io_cost(vals) if len(vals) else np.zeros(0)
    for d in np.flatnonzero(topo.host_io):
        recv[:, d, d] = io
        send[:, d, d] = io
    tmin = np.where(allowed, cost.device_compute, np.inf).min(axis=1) / unit if n else np.zeros(0)
    node_mem = g.state_bytes.astype(float)
    if problem.mode == "training":
        node_mem = node_mem + cost.stash_bytes
    pv, pn = cost.param_use
    puse = np.unique(np.stack([pv, pn], 1), axis=0) if len(pv) else np.zeros((0, 2), np.int64)
    cls = g.colocation
    order = np.lexsort((np.arange(n), cls))
    c_sorted = cls[order]
    same = (c_sorted[1:] == c_sorted[:-1]) & (c_sorted[1:] >= 0)
    colocated = tuple((int(order[i]), int(order[i + 1])) for i in np.flatnonzero(same))
    H = h / unit * (1 + 1e-9) + 1e-9
    head = _head(n, g.pred, np.where(np.isfinite(tmin), tmin, 0.0))
    val_prod = g.value_node[vals].astype(np.int64)
    pair_val, pair_cons = pair_val.ravel().astype(np.int64), pairs[:, 1].astype(np.int64)
    recv, send = recv / unit, send / unit
    working_set = cost.working_set.astype(float)
    param_use, param_bytes = (puse[:, 0], puse[:, 1]), g.value_bytes.astype(float) * cost.param_factor
    capacity = problem.capacity.astype(float)
    tb, lat_ub = None, None
    if bounds and n:
        ok = _colocated_allowed(allowed & fits_alone(node_mem, working_set, param_use, param_bytes, capacity, -1e-12),
                                cls)
        if ok.any(axis=1).all():  # else the memory precheck or the MIP says why
            allowed = ok

        size = memory_buckets(_own_bytes(node_mem, param_use, param_bytes), capacity, BUCKETS)

        def bounds_of(a):
            return time_bounds(t, a, topo.is_cpu, q, val_prod, pair_val, pair_cons, recv, send, size, BUCKETS)

        if horizon is not None:
            reduced = _colocated_allowed(reduce_allowed(allowed, H, bounds_of)[0], cls)
            if reduced.any(axis=1).all():  # else nothing beats the horizon: the MIP proves it
                allowed = reduced
        tb = bounds_of(allowed)
        fin = np.where(allowed, tb.finish, np.inf).min(axis=1)
        head = np.maximum(head, np.where(np.isfinite(fin), fin, head))
        after = np.where(allowed, tb.tail_fin, np.inf).min(axis=1)
        lat_ub = np.maximum(H * (1 + 1e-9) - np.where(np.isfinite(after), after, 0.0), head)
    return LatencyData(
        n=n, q=q, unit=unit, horizon=H, unit_dev=unit_dev, num_slots=len(slot_dev),
        slot_pos=slot_pos, t=t, allowed=allowed, val_prod=val_prod, pair_val=pair_val, pair_cons=pair_cons,
        recv=recv, send=send, edges=tuple(np.asarray(x, np.int64) for x in g.node_edges),
        head=head, node_mem=node_mem, working_set=working_set, param_use=param_use, param_bytes=param_bytes,
        capacity=capacity, colocated=colocated, classes=tuple(interchangeable_devices(problem)),
        bounds=tb, lat_ub=lat_ub,
    )


def charge_levels(charges: np.ndarray, where: np.ndarray) -> tuple[float | None, list[tuple[float, np.ndarray]]]:
    """Charges over the possible positions of the other end: (the one charge, []) when uniform,
    else (None, [(level, positions paying at least that level)]) for each positive level."""
    c = charges[where]
    if len(c) == 0:
        return 0.0, []
    if np.all(c == c[0]):
        return float(c[0]), []
    return None, [(float(lv), where & (charges >= lv)) for lv in np.unique(c[c > 0])]


# -------------------------------------------------------------------------------- baselines
def _pack(problem: Problem, devices: np.ndarray, target: float) -> np.ndarray:
    """Device of each node: topological order cut into consecutive pieces (convex by construction),
    a new accelerator taking over when the current one is full or has ``target`` seconds of work;
    what fits nowhere (or cannot run on accelerators) goes to the fastest allowed CPU."""
    g, cost, topo = problem.graph, problem.cost, problem.topology
    cap = problem.capacity
    node_mem = g.state_bytes.astype(float) + (cost.stash_bytes if problem.mode == "training" else 0.0)
    ws = cost.working_set.astype(float)
    pv, pn = cost.param_use
    params_of = [[] for _ in range(g.num_nodes)]
    for p_, v in zip(pv.tolist(), pn.tolist(), strict=True):
        params_of[v].append(p_)
    pbytes = g.value_bytes.astype(float) * cost.param_factor
    t = np.where(problem.allowed, cost.device_compute, np.inf)
    cpus = topo.cpus
    dev = np.full(g.num_nodes, -1, np.int64)
    k, mem, wmax, load, held = 0, 0.0, 0.0, 0.0, set()
    for v in range(g.num_nodes):
        placed = False
        while k < len(devices):
            d = devices[k]
            if problem.allowed[v, d]:
                need = node_mem[v] + sum(pbytes[p_] for p_ in set(params_of[v]) - held) + max(0.0, ws[v] - wmax)
                if mem + need <= cap[d] * (1 - 1e-6) and (load + t[v, d] <= target or load == 0.0):
                    dev[v] = d
                    mem, wmax, load = mem + need, max(wmax, ws[v]), load + t[v, d]
                    held |= set(params_of[v])
                    placed = True
                    break
                if load == 0.0 and mem == 0.0:
                    break  # does not fit even an empty device: CPU
                k, mem, wmax, load, held = k + 1, 0.0, 0.0, 0.0, set()
                continue
            break
        if not placed:
            ok = cpus[problem.allowed[v, cpus]] if len(cpus) else cpus
            if len(ok) == 0:
                return np.full(g.num_nodes, -1, np.int64)
            dev[v] = int(ok[np.argmin(t[v, ok])])
    cls = g.colocation
    for c in np.unique(cls[cls >= 0]).tolist():  # a class goes where its heaviest member went
        members = np.flatnonzero(cls == c)
        dev[members] = dev[members[np.argmax(np.nan_to_num(cost.device_compute[members, dev[members]], posinf=0))]]
    return dev


def packed_splits(problem: Problem) -> list[Solution]:
    """Memory-aware contiguous splits (what a person does for a model that barely fits): pack the
    topological order onto as few accelerators as memory allows, and onto more with balanced work."""
    from planmap.problem import Certificate, Status

    topo = problem.topology
    acc = topo.accelerators
    if len(acc) == 0 or problem.num_nodes == 0:
        return []
    t = np.where(problem.allowed[:, acc], problem.cost.device_compute[:, acc], np.inf).min(axis=1)
    total = float(t[np.isfinite(t)].sum())  # work of the nodes an accelerator can run
    out = []
    for k in [None, *range(1, len(acc) + 1)]:
        target = math.inf if k is None else total / k * 1.02
        dev = _pack(problem, acc, target)
        if (dev < 0).any():
            continue
        out.append(Solution.from_devices(problem, dev, Certificate(Status.HEURISTIC, "packed split")))
    return out


def best_baseline(problem: Problem, options: SolveOptions, time_budget: float) -> tuple[Solution | None, str, list[str]]:
    """The fastest feasible placement among ``options.warm_start`` and the registry's baselines
    (those installed; the throughput DP's max-load split counts as a latency placement too)."""
    from planmap import solvers

    notes: list[str] = []
    best: tuple[float, Solution, str] | None = None

    def consider(sol: Solution | None, name: str) -> None:
        nonlocal best
        if sol is None:
            return
        ev = evaluate(problem, sol)
        if not ev.feasible:
            notes.append(f"{name}: infeasible ({ev.violations[0]})")
            return
        if best is None or ev.objective < best[0]:
            best = (ev.objective, sol, name)

    if options.warm_start is not None:
        consider(options.warm_start, "given warm start")
    for sol in packed_splits(problem):
        consider(sol, "packed split")
    for sol in best_splits(problem):
        consider(sol, "contiguous split DP")
    base_opts = replace(options, time_limit=max(1.0, min(30.0, 0.1 * time_budget)), warm_start=None, progress=None)
    for name in BASELINES:
        try:
            solver = solvers.get(name)
        except SolverUnavailableError:
            notes.append(f"{name}: not available")
            continue
        target = problem if problem.objective in solver.objectives else None
        if target is None and name == "dp" and "throughput" in solver.objectives:
            target = replace(problem, objective="throughput", contiguous=True, replication=False)
        if target is None:
            continue
        try:
            sol = solver.solve(target, base_opts)
        except KeyboardInterrupt:  # Ctrl-C: keep what the baselines found so far
            notes.append(f"interrupted during {name}")
            break
        except PlanmapError as e:
            notes.append(f"{name}: {e}")
            continue
        except Exception as e:  # a baseline's bug must not take the exact solver down with it
            notes.append(f"{name}: failed ({type(e).__name__}: {e})")
            continue
        if any(s.replicas != 1 for s in sol.stages):
            continue
        consider(Solution(sol.assignment, sol.stages, sol.certificate), name)
    if best is None:
        return None, "", notes
    return best[1], best[2], notes

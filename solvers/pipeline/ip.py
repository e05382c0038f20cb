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

``prepare`` (:mod:`.ip_data`) → ``build_model`` (:mod:`.ip_model`) → ``load_warm_start`` → ``solve`` →
``extract``; :class:`ThroughputIP` runs them with a warm start from the DP (or the best baseline) and
returns the better of the MIP's answer and the start, with the backend's bound.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import cast

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError, SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Stage, Status, relative_gap
from planmap.vocabulary import ObjectiveKind

from .. import mip, mip_backends
from ..timebox import TimeBoxExpired, time_box
from .ip_data import IPData, prepare
from .ip_model import MEMORY_MARGIN, build_model

__all__ = ["ThroughputIP", "IPData", "prepare", "build_model", "load_warm_start", "solve", "extract"]

VERSION = "1"


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
        order = sorted(first, key=first.__getitem__)
    pos = {d: i for i, d in enumerate(order)}
    mapping = np.arange(dt.D)
    for cls in dt.classes:
        used = sorted((d for d in cls if d in pos), key=pos.__getitem__)
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
    D, u = dt.D, dt.time_scale
    X = np.zeros((dt.U, D), bool)
    X[np.arange(dt.U), dev] = True
    for (a, d), var in model.x.items():
        var.set_value(float(X[a, d]))
    used = np.asarray(X.any(axis=0))
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
    pair_recv, pair_send = cast(np.ndarray, dt.pair_recv), cast(np.ndarray, dt.pair_send)  # R, O: general only
    for (j, d), var in model.R.items():
        rate = float(pair_recv[j, prod_dev[j], d]) if d in cons_devs[j] and prod_dev[j] != d else 0.0
        var.set_value(rate / u)
        (bw if dt.val_back[j] else fw)[d] += rate
    for (j, d), var in model.O.items():
        rates = [float(pair_send[j, d, b]) for b in cons_devs[j] if b != d]
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
    mb = max(problem.microbatches, 1)
    if not dt.ordered:
        return Solution.from_devices(problem, dev, cert, schedule=problem.schedule, microbatches=mb)
    used = sorted(set(dev.tolist()))
    before = {d: sum(round(model.o[e, d].value or 0.0) for e in used if e != d) for d in used}
    order = sorted(used, key=lambda d: (before[d], d))
    stage_of = {d: k for k, d in enumerate(order)}
    return Solution(np.array([stage_of[d] for d in dev.tolist()]), tuple(Stage((d,)) for d in order), cert,
                    schedule=problem.schedule, microbatches=mb)


# ----------------------------------------------------------------------------------- solver
_OWN_KEYS = ("start", "dp_share")
_BUILD_FLOOR_S = 2.0  # the model build may always take this long (a fixed start-up)
_BOX_SLACK = 0.05  # the backend stops itself at the limit; the box only catches the Python phases around it


class ThroughputIP:
    """The exact pipeline IP: DP (or baseline) warm start -> MIP -> plan checked by evaluate.

    Options (``SolveOptions.passthrough``, removed before the backend sees the rest): ``start`` —
    ``"dp"`` (default: the DP's contiguous optimum, else the best baseline), ``"baselines"`` or
    ``"none"``; ``dp_share`` — share of the time limit the DP may use (default 0.3)."""

    name = "ip"
    objectives = frozenset({ObjectiveKind.THROUGHPUT})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        if problem.replication:
            raise SolverUnavailableError("the throughput IP does not model replicated stages; use solver 'dp' "
                                         "(contiguous pipelines with replication)")
        t0 = time.perf_counter()
        mip_backends.get_backend(options.backend or "highs")
        own = {k: options.passthrough[k] for k in _OWN_KEYS if k in options.passthrough}
        backend_options = replace(options, passthrough={k: v for k, v in options.passthrough.items()
                                                        if k not in _OWN_KEYS})
        start, start_name, notes = self._start(problem, options, own)
        start_obj = evaluate(problem, start).objective if start is not None else None
        tb = time.perf_counter()
        try:  # building and translating the model is pure Python (U x D x D rows): boxed by the time limit
            with time_box(max(options.time_limit * (1 + _BOX_SLACK) - (tb - t0), _BUILD_FLOOR_S)):
                dt = prepare(problem, time_scale=start_obj / max(problem.num_devices, 1) if start_obj else None)
                model = build_model(problem, data=dt, horizon=start_obj)
                build_time = time.perf_counter() - tb
                warm = start is not None and load_warm_start(model, problem, start)
                left = max(0.1, options.time_limit - (time.perf_counter() - t0))
                result = solve(model, replace(backend_options, time_limit=left), warm_start=warm)
        except TimeBoxExpired:
            if start is None or start_obj is None:
                raise PlanmapError(f"{problem.name}: the throughput IP found no plan within {options.time_limit:g} s "
                                   "(building the model); raise the time limit") from None
            return start.with_certificate(
                status=Status.TIME_LIMIT, solver=self.name, objective=start_obj, bound=None, gap=None,
                version=VERSION, backend=None, options={"contiguous": problem.contiguous, "warm_start": start_name},
                wall_time=time.perf_counter() - t0,
                message="; ".join([f"time limit reached while building the model; answer is {start_name}", *notes]))
        if start is not None and not warm:
            notes.append(f"warm start from {start_name} does not fit the model")
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
        parts = [f"{result.backend} {result.termination}: incumbent {_fmt(result.incumbent)}, "
                 f"bound {_fmt(result.bound)}"]
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

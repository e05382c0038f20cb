"""The ``sharding`` solver: the SPMD baselines, then the sharding IP over every logical mesh; the best
answer under :func:`planmap.evaluate.evaluate` wins.

ZeRO stages are enumerated like meshes: each answer takes the lowest stage (0, 1, 2) under which it
fits memory (:func:`~planmap.solvers.sharding.baselines.with_zero`), and the IP runs once per stage a
baseline needed (its memory rows then hold that stage's parameter state,
:func:`~planmap.sharding.spmd.zero_tables`), so a layout whose replicated optimizer state does not fit
is still found with that state sharded.
The baselines (data parallel, FSDP, Megatron, and the replicated layout: one device's program on every
device, which a launch-bound model cannot beat by splitting) give a feasible answer fast and warm-start the IP
(:func:`planmap.solvers.sharding.ip.solve_all`, one IP per mesh of
:func:`planmap.sharding.logical_meshes`). The certificate is the IP's ("optimal over <meshes> ×
per-op strategies") when the IP answer wins or ties, else heuristic with the baseline's name.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from dataclasses import replace

from planmap.errors import SolverUnavailableError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.sharding.solution import layout_of as solution_layout
from planmap.sharding.solution import solution_mesh, spmd_solution
from planmap.solvers.sharding.baselines import BASELINES, VERSION, meshes_or_raise, replicated_everywhere, with_zero

__all__ = ["Sharding"]

IP_MODULE = "planmap.solvers.sharding.ip"
MIN_IP_TIME = 1.0  # seconds left after the baselines for the IP to be started
FINISH_SHARE = 0.05  # of the time limit, kept after the IP for evaluating and writing its answer


def _ip_module() -> tuple[object | None, str]:
    """(the sharding IP module, "") or (None, why) where this installation cannot run it."""
    if importlib.util.find_spec(IP_MODULE) is None:
        return None, "the sharding IP is not part of this installation"
    try:
        return importlib.import_module(IP_MODULE), ""
    except ModuleNotFoundError as e:
        return None, f"the sharding IP needs the package {e.name!r}: pip install 'planmap[ip]'"


class Sharding:
    """SPMD sharding over a logical mesh of the cluster (throughput: time per microbatch)."""

    name = "sharding"
    objectives = frozenset({"throughput"})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        deadline = time.monotonic() + float(options.time_limit)
        meshes_or_raise(problem, "sharding")
        # first (it is cheap, and the floor of every answer), but it loses ties to the baselines and the IP
        rep_sol, rep_ev = replicated_everywhere(problem)
        replicated = ((not rep_ev.feasible, rep_ev.objective), len(BASELINES), rep_sol)
        found: list[tuple[tuple, int, Solution]] = []
        skipped: list[str] = []
        slowest = 0.0  # the longest baseline so far: the next one starts only if that much time is left
        for name, build in BASELINES:  # fast (one propagation per mesh): the anytime answer
            if found and time.monotonic() + slowest >= deadline:
                skipped.append(f"{name}: no time left")
                continue
            t_b = time.monotonic()
            try:
                sol, ev = build(problem, deadline=deadline) if name == "megatron" else build(problem)
            except SolverUnavailableError as e:
                skipped.append(f"{name}: {e}")
                continue
            finally:
                slowest = max(slowest, time.monotonic() - t_b)
            found.append(((not ev.feasible, ev.objective), len(found), sol))
        found.append(replicated)
        ip, why_not = _ip_module()
        if ip is not None and (not found or deadline - time.monotonic() > MIN_IP_TIME):
            # the answer's evaluation and plan assembly come after the IP: keep 5 % for them
            ip_end = deadline - FINISH_SHARE * float(options.time_limit)
            # ZeRO stages as the baselines needed them (their replicated state did not fit): the IP once per stage
            levels = sorted({0} | {f[2].shardings.zero for f in found if f[2].shardings is not None})
            for k, zero in enumerate(levels):
                end = time.monotonic() + (ip_end - time.monotonic()) / (len(levels) - k)
                ip_sol = _ip_answer(ip, problem, options, end, [f[2] for f in sorted(found)], zero)
                if ip_sol is None:
                    continue
                ip_sol, ev = with_zero(problem, ip_sol, evaluate(problem, ip_sol))
                proven = ip_sol.certificate.status in (Status.OPTIMAL, Status.GAP_REACHED)
                # the IP's proof covers the baselines, so on a tie its answer (and certificate) wins; a lower
                # ZeRO stage wins a tie with a higher one
                found.append(((not ev.feasible, ev.objective * (1 - 1e-9 if proven else 1)), k - len(levels), ip_sol))
        elif ip is not None:
            why_not = "no time left for the sharding IP"
        if not found:
            raise SolverUnavailableError(f"sharding found no SPMD layout for {problem.name}: " + "; ".join(skipped))
        best = min(found, key=lambda f: f[:2])[2]
        note = best.certificate.message
        if why_not:
            note = (note + "; " if note else "") + f"baselines only ({why_not})"
        return best.with_certificate(wall_time=time.perf_counter() - t0, message=note)


def _ip_answer(ip, problem: Problem, options: SolveOptions, deadline: float, starts: list[Solution],
               zero: int = 0) -> Solution | None:
    """The sharding IP over every logical mesh by ``deadline`` (``time.monotonic()``), warm-started per mesh
    from the best baseline on it, as a Solution whose certificate covers every mesh (a mesh skipped by
    its lower bound already loses; one the deadline left out leaves the answer unproven)."""
    warm: dict[tuple, dict] = {}
    for sol in starts:  # best first: the first layout per mesh wins (and only it is expanded)
        if solution_mesh(problem, sol).key not in warm:
            tables, layout = solution_layout(problem, sol)
            warm[tables.mesh.key] = layout
    found = ip.solve_all(problem, options, warm_starts=warm, deadline=deadline, zero=zero)
    best = found.best
    if best is None or best.specs is None:
        return None
    mb = best.tables.microbatches
    statuses = {a.status for a in found.meshes}
    if any(lb < best.objective * (1 - options.rel_gap) for _, lb in found.skipped):
        status = Status.TIME_LIMIT  # a mesh the deadline left out might still win
    elif statuses <= {Status.OPTIMAL}:
        status = Status.OPTIMAL
    elif statuses <= {Status.OPTIMAL, Status.GAP_REACHED}:
        status = Status.GAP_REACHED
    else:
        status = Status.TIME_LIMIT
    before = found.lower_bounds  # a mesh whose MIP proved no bound keeps the one it was ordered by
    bounds = [max(a.bound or 0.0, before.get(a.mesh.shape, 0.0)) for a in found.meshes] + [
        lb for _, lb in found.skipped]
    bound = min(bounds) / mb if bounds else None
    solved = ", ".join(f"{a.mesh.shape} {a.status or 'no answer'}" for a in found.meshes)
    skipped = ", ".join(f"{shape} (bound {lb * 1e3:.4g} ms)" for shape, lb in found.skipped)
    message = (f"{best.certificate_text()}; meshes solved: {solved}"
               + (f"; not solved (lower bound no better, or no time left): {skipped}" if skipped else ""))
    cert = Certificate(status=status, solver="sharding", objective=best.objective / mb, bound=bound,
                       version=VERSION, backend=options.backend, message=message,
                       options={"time_limit": options.time_limit, "rel_gap": options.rel_gap})
    sol = spmd_solution(problem, best.tables, best.specs, cert)
    return replace(sol, shardings=replace(sol.shardings, zero=zero)) if zero else sol

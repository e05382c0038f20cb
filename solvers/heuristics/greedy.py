"""``greedy``: list scheduling for latency (Baechi's m-ETF on subgraph calls), bottleneck fill for throughput.

Latency: the m-ETF call schedule (:mod:`.greedy_latency`), whose simulation predicts exactly the
latency :func:`planmap.evaluate.evaluate` reports; the same device choices re-split into the fewest
calls per device, and the greedy of Tarnawski et al.'s code (:func:`memory_fill`: accelerators
filled in topological order up to their memory) compete with it, and the best feasible plan wins.

Throughput: a bottleneck fill of the devices in topological order, the smallest bottleneck found by
bisection (:mod:`.greedy_throughput`); its stages are topological intervals, so contiguous.
"""

from __future__ import annotations

import time

import numpy as np

from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status

from ..node_memory import node_memory
from ..repair import best_effort, repair
from ..segments import segments_from_devices, solution_from_devices
from .greedy_latency import schedule_calls
from .greedy_throughput import greedy_throughput

__all__ = ["Greedy", "greedy_latency", "greedy_throughput", "memory_fill"]

VERSION = "1"


def greedy_latency(problem: Problem) -> tuple[Solution, float]:
    """The m-ETF call schedule as greedy's plan: its Solution and the latency it predicts (= evaluate's)."""
    return schedule_calls(problem, Certificate(Status.HEURISTIC, "greedy", version=VERSION))


def memory_fill(problem: Problem) -> np.ndarray:
    """The greedy of Tarnawski et al.'s code (latency-greedy/greedy.cpp): walk the operators in
    topological order and fill one accelerator after another up to its memory; operators no
    accelerator can take (unsupported, or all accelerators full) run on the CPU."""
    topo = problem.topology
    n = problem.graph.num_nodes
    accs = [int(d) for d in topo.accelerators]
    mem, ws = node_memory(problem)
    cap = problem.capacity
    t = np.where(problem.allowed, problem.cost.device_compute, np.inf)
    fallback_dev = np.argmin(np.where(topo.is_cpu[None, :], t, t + 1e300), axis=1)  # a CPU when allowed
    dev = np.empty(n, np.int32)
    j, used = 0, 0.0
    allowed = problem.allowed
    for v in range(n):
        if j < len(accs) and allowed[v, accs[j]] and used > 0 and used + mem[v] + ws > cap[accs[j]]:
            j, used = j + 1, 0.0
        if j < len(accs) and allowed[v, accs[j]] and used + mem[v] + ws <= cap[accs[j]]:
            dev[v] = accs[j]
            used += mem[v]
        else:
            dev[v] = fallback_dev[v]
    return dev


class Greedy:
    """m-ETF list scheduling of subgraph calls (latency); bottleneck fill in topological order (throughput)."""

    name = "greedy"
    objectives = frozenset({"latency", "throughput"})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        cert = Certificate(Status.HEURISTIC, self.name, version=VERSION)
        if problem.objective != "latency":
            sol = solution_from_devices(problem, greedy_throughput(problem), cert)
            ev = evaluate(problem, sol)
            return sol.with_certificate(objective=ev.objective, wall_time=time.perf_counter() - t0)
        sol, _ = greedy_latency(problem)
        ev = evaluate(problem, sol)
        # rivals, kept when feasible and better: the same device choices with the fewest calls per
        # device; the paper's greedy (fill accelerators in topological order)
        for device_of in (sol.node_device(), repair(problem, memory_fill(problem))):
            alt = segments_from_devices(problem, device_of, certificate=cert)
            ev_alt = evaluate(problem, alt)
            if ev_alt.feasible and (not ev.feasible or ev_alt.objective < ev.objective):
                sol, ev = alt, ev_alt
        # still infeasible (e.g. colocation forced more calls than q): the closest valid placement
        return best_effort(problem, sol, ev, cert, options, t0)

"""The evaluator's SPMD branch: what a solution with ``shardings`` (one stage over a mesh) costs.

The recorded shardings are expanded to a complete layout by the default propagation
(:func:`planmap.sharding.propagate`) on the sharding tables of the problem's un-coarsened graph on
the solution's mesh, and the layout is costed by :func:`planmap.sharding.evaluate_spmd`. So that SPMD
plans compare with pipelines, the objective is the time per microbatch (a pipeline's bottleneck is
also per microbatch), the step is microbatches × that (gradient accumulation: no fill/drain), every
mesh device is busy for that time, and the bytes moved are the bytes of the collectives per device.
Invalid shardings (unknown axes, indivisible dims, indices out of range) are violations, not errors.
"""

from __future__ import annotations

import math

import numpy as np

from planmap.evaluation import Evaluation, memory_violations
from planmap.problem import Problem, Solution

__all__ = ["evaluate_spmd_solution"]


def _invalid(problem: Problem, solution: Solution, why: str) -> Evaluation:
    D, S = problem.topology.num_devices, solution.num_stages
    nan = np.full(S, np.nan)
    return Evaluation(objective=math.inf, feasible=False, violations=(f"invalid SPMD plan: {why}",),
                      memory=np.zeros(D), capacity=problem.capacity, load=np.zeros(D), fw_load=np.zeros(D),
                      bw_load=np.zeros(D), stage_start=nan, stage_finish=nan.copy(), node_finish=None,
                      bytes_moved=0, step_time=math.inf, stage_order=tuple(range(S)))


def evaluate_spmd_solution(problem: Problem, solution: Solution) -> Evaluation:
    """The Evaluation of an SPMD solution (see the module doc); ``spmd`` holds the detailed model."""
    from planmap.sharding import evaluate_spmd
    from planmap.sharding.solution import layout_of

    try:
        tables, specs = layout_of(problem, solution)
    except ValueError as e:
        return _invalid(problem, solution, str(e))
    ev = evaluate_spmd(tables, specs, zero=solution.shardings.zero if solution.shardings is not None else 0)
    D = problem.topology.num_devices
    devs = list(tables.mesh.devices)
    violations: list[str] = []
    mem, load, fw, bw = np.zeros(D), np.zeros(D), np.zeros(D), np.zeros(D)
    mem[devs] = ev.memory
    load[devs] = ev.microbatch_time
    backward = np.asarray(tables.graph.backward, bool) if tables.graph.backward is not None else None
    bw_time = float(ev.op_time[backward].sum()) if backward is not None and backward.any() else 0.0
    fw[devs] = ev.microbatch_time - bw_time
    bw[devs] = bw_time
    memory_violations(problem, mem, violations)
    moved = int(sum(b * c for _, _, b, c in ev.collectives))
    nan = np.full(1, np.nan)
    return Evaluation(objective=ev.microbatch_time, feasible=not violations, violations=tuple(violations), memory=mem,
                      capacity=problem.capacity, load=load, fw_load=fw, bw_load=bw, stage_start=nan,
                      stage_finish=nan.copy(), node_finish=None, bytes_moved=moved,
                      step_time=ev.step_time, stage_order=(0,), spmd=ev)

"""``evaluate(problem, solution)``: the objective, memory and feasibility of a solution — from its decisions only.

This is the one definition of "how good is this plan" that every solver is judged by: the IP's
claimed optimum, the DP's, the baselines', and a plan file's recorded prediction are all re-derived
here, so a solver that models something differently is caught by the tests, not by users.

Latency (single stream, Tarnawski et al. §4 generalised to the cluster's links): each accelerator
stage is a call — it starts when its device is free and all its inputs exist, then receives its
inputs, computes its nodes, and sends its outputs; all its nodes finish when it does. A CPU stage
runs each node as soon as its inputs exist, independent paths in parallel. Latency is the last
finish time.

SPMD (a solution with ``shardings``: one stage over a mesh): see :mod:`planmap.evaluate_spmd`; several
sharded stages (a whole-cluster plan): :mod:`planmap.evaluate_stages` (single-device stages without specs
are the plain pipeline below).

Throughput (pipelined): the load of a device group (the devices of a stage; several = replicated)
is its nodes' compute plus, once per value, what it receives and sends; divided by the number of
replicas — except kernel launches, which every replica pays in full (a replicated stage never
beats its per-replica launch floor) — plus the gradient all-reduce among them in training, assumed
not overlapped with the backward pass (added to the backward load). The objective is the largest
load (or max forward load + max backward load).

Activation checkpointing: a stage that states its choice (``Stage.remat``, ``remat: auto``) is charged
with it (:func:`planmap.remat_stages.for_solution`), any other as the problem's cost model says.
"""

from __future__ import annotations

import math

import numpy as np

from planmap.crossings import crossings
from planmap.evaluation import Evaluation, memory_violations
from planmap.problem import Problem, Solution
from planmap.remat_stages import for_solution
from planmap.structure import flatten_groups as _flatten
from planmap.structure import nonconvex_units, quotient_order
from planmap.structure import placement_checks as _common_checks
from planmap.vocabulary import Mode, ObjectiveKind, ThroughputVariant

__all__ = ["Evaluation", "evaluate", "nonconvex_units", "quotient_order"]


def _charges(problem: Problem, val, pu, cu, unit_device: np.ndarray, by_device_io: bool):
    """Receive charge per crossing pair, and send charge per (value, producer unit) as the max over
    destinations. With ``by_device_io``, a crossing between units on one host-memory device is paid at
    both ends at the host link (subgraph calls of Tarnawski et al.)."""
    cost = problem.cost
    a, b = unit_device[pu], unit_device[cu]
    recv = cost.recv_cost(val, a, b)
    send = cost.send_cost(val, a, b)
    if by_device_io:
        same = (a == b) & problem.topology.host_io[a]
        if same.any():
            io = cost.host_io_cost(val[same])
            recv[same] = io
            send[same] = io
    # sender pays once per (value, producer unit): the max over its destinations
    okey = np.stack([val, pu], 1)
    uniq, inv = np.unique(okey, axis=0, return_inverse=True)
    send_once = np.zeros(len(uniq))
    np.maximum.at(send_once, inv.ravel(), send)
    return recv, uniq[:, 0], uniq[:, 1], send_once


def _memory(problem: Problem, group_of: np.ndarray, members: tuple[np.ndarray, np.ndarray],
            in_flight: np.ndarray) -> np.ndarray:
    """Bytes per device: parameters used (x training factor), node state, activations.

    ``members``: ``(devices, group index)`` of the groups, as :func:`_flatten` gives them.
    """
    cost, g, topo = problem.cost, problem.graph, problem.topology
    G = len(in_flight)
    mem_g = np.zeros(G)
    pv, pn = cost.param_use
    if len(pv):
        pairs = np.unique(np.stack([pv, group_of[pn]], 1), axis=0)
        np.add.at(mem_g, pairs[:, 1], g.value_bytes[pairs[:, 0]] * cost.param_factor)
    np.add.at(mem_g, group_of, g.state_bytes)
    if problem.mode is Mode.TRAINING:
        stash = np.zeros(G)
        np.add.at(stash, group_of, cost.stash_bytes)
        mem_g += stash * in_flight
    ws = np.zeros(G)
    np.maximum.at(ws, group_of, cost.working_set)
    mem_g += ws
    mem = np.zeros(topo.num_devices)
    flat, owner = members
    np.add.at(mem, flat, mem_g[owner])  # group by group, as a loop over the groups would add
    return mem


def evaluate(problem: Problem, solution: Solution) -> Evaluation:
    """Objective, per-device memory and load, and every violated constraint of ``solution``."""
    if len(solution.assignment) != problem.graph.num_nodes:
        raise ValueError(f"evaluate requires an assignment of {problem.graph.num_nodes} nodes, "
                         f"but got {len(solution.assignment)}")
    problem = for_solution(problem, solution)  # the stages' own activation-checkpointing choices
    if solution.shardings is not None and solution.num_stages > 1:
        from planmap.evaluate_stages import evaluate_stages, is_plain_pipeline

        if not is_plain_pipeline(solution):
            return evaluate_stages(problem, solution)
    elif solution.shardings is not None:
        from planmap.evaluate_spmd import evaluate_spmd_solution

        return evaluate_spmd_solution(problem, solution)
    if problem.objective is ObjectiveKind.LATENCY:
        return _latency(problem, solution)
    return _throughput(problem, solution)


# ------------------------------------------------------------------------------------ latency
def _latency(problem: Problem, sol: Solution) -> Evaluation:
    g, topo, cost = problem.graph, problem.topology, problem.cost
    n, S, D = g.num_nodes, sol.num_stages, topo.num_devices
    violations: list[str] = []
    stage_dev = np.array([s.device for s in sol.stages], np.int32)
    if any(s.replicas > 1 for s in sol.stages):
        violations.append("latency plans run each stage on exactly one device")
    node_dev = stage_dev[sol.assignment]
    t = cost.device_compute[np.arange(n), node_dev]
    cpu_stage = topo.is_cpu[stage_dev]
    # units: accelerator stages keep their id; every CPU node is its own unit S + i
    unit = np.where(cpu_stage[sol.assignment], S + np.arange(n), sol.assignment).astype(np.int64)
    unit_dev = np.concatenate([stage_dev, node_dev]).astype(np.int32)
    c = crossings(g, unit)
    val, pu, cu = c.value, c.producer_group, c.consumer_group
    recv, sval, spu, send = _charges(problem, val, pu, cu, unit_dev, by_device_io=True)
    dur = np.zeros(S + n)
    np.add.at(dur, sol.assignment[~cpu_stage[sol.assignment]], t[~cpu_stage[sol.assignment]])
    dur[S:][cpu_stage[sol.assignment]] = t[cpu_stage[sol.assignment]]
    # accelerator units pay transfers in their duration; CPU units receive as a delay on the edge
    acc_c = cu < S
    np.add.at(dur, cu[acc_c], recv[acc_c])
    acc_p = spu < S
    np.add.at(dur, spu[acc_p], send[acc_p])
    # ready time of a unit: all producers of its inputs finished (+ CPU receive delay)
    device_chain = []
    stages_on: dict[int, list[int]] = {}
    for k in np.flatnonzero(~cpu_stage).tolist():
        stages_on.setdefault(int(stage_dev[k]), []).append(k)
    for d, on in sorted(stages_on.items()):
        device_chain += list(zip(on[:-1], on[1:], strict=True))
        if not topo.is_cpu[d] and len(on) > problem.max_subgraphs and problem.objective is ObjectiveKind.LATENCY:
            violations.append(f"{topo.names[d]} runs {len(on)} subgraphs, more than the allowed "
                              f"{problem.max_subgraphs}")
    stage_unit = sol.assignment
    nonconvex = [u for u in nonconvex_units(g, stage_unit) if not cpu_stage[u]]
    if nonconvex:
        violations.append(f"{len(nonconvex)} stage(s) are not contiguous subgraphs (a path leaves and re-enters), "
                          f"e.g. stage {nonconvex[0]} on {topo.names[stage_dev[nonconvex[0]]]}")
    used = np.unique(unit)
    dense = np.full(S + n, -1, np.int64)
    dense[used] = np.arange(len(used))
    order = quotient_order(g, dense[unit], len(used),
                           [(int(dense[a]), int(dense[b])) for a, b in device_chain if dense[a] >= 0 and dense[b] >= 0])
    finish = np.full(S + n, np.nan)
    start = np.full(S + n, np.nan)
    if order is None:
        violations.append("the stages depend on each other in a cycle (the placement cannot be scheduled)")
        objective = math.inf
    else:
        ready = np.zeros(S + n)
        # predecessors per unit: from crossing pairs (value producer unit -> consumer unit)
        delay = np.where(acc_c, 0.0, recv)
        preds: dict[int, list[tuple[int, float]]] = {}
        for a, b, w in zip(pu.tolist(), cu.tolist(), delay.tolist(), strict=True):
            preds.setdefault(b, []).append((a, w))
        # node edges without a value crossing (same value consumed twice) are covered; add argument-free edges
        s_, d_ = g.node_edges
        ua, ub = unit[s_], unit[d_]
        for a, b in set(zip(ua[ua != ub].tolist(), ub[ua != ub].tolist(), strict=True)):
            preds.setdefault(b, []).append((a, 0.0))
        for a, b in device_chain:
            preds.setdefault(b, []).append((a, 0.0))
        for k in order:
            u = int(used[k])
            r = 0.0
            for a, w in preds.get(u, ()):
                r = max(r, finish[a] + w)
            ready[u] = r
            start[u] = r
            finish[u] = r + dur[u]
        objective = float(np.nanmax(finish)) if n else 0.0
    node_finish = finish[unit] if order is not None else None
    load = np.zeros(D)
    np.add.at(load, unit_dev[:S][~cpu_stage], dur[:S][~cpu_stage])
    np.add.at(load, node_dev[cpu_stage[sol.assignment]], t[cpu_stage[sol.assignment]])
    members = (np.arange(D), np.arange(D))  # one group per device
    mem = _memory(problem, node_dev, members, np.ones(D))
    _common_checks(problem, sol, node_dev, members, violations)
    memory_violations(problem, mem, violations)
    moved = int(problem.graph.value_bytes[val].sum()) if len(val) else 0
    stage_start = start[:S].copy()
    stage_finish = finish[:S].copy()
    for k in range(S):  # CPU stages: first start and last finish of their nodes
        if cpu_stage[k]:
            in_stage = np.flatnonzero(sol.assignment == k)
            if len(in_stage) and order is not None:
                stage_start[k] = np.nanmin(start[S + in_stage])
                stage_finish[k] = np.nanmax(finish[S + in_stage])
    return Evaluation(objective=objective, feasible=not violations, violations=tuple(violations), memory=mem,
                      capacity=problem.capacity, load=load, fw_load=load, bw_load=np.zeros(D),
                      stage_start=stage_start, stage_finish=stage_finish, node_finish=node_finish,
                      bytes_moved=moved, step_time=objective, stage_order=tuple(range(S)))


# --------------------------------------------------------------------------------- throughput
def _throughput(problem: Problem, sol: Solution) -> Evaluation:
    g, topo, cost = problem.graph, problem.topology, problem.cost
    S, D = sol.num_stages, topo.num_devices
    violations: list[str] = []
    # device groups: distinct device tuples of the stages
    group_ids: dict[tuple[int, ...], int] = {}
    stage_group = np.array([group_ids.setdefault(tuple(sorted(s.devices)), len(group_ids)) for s in sol.stages],
                           np.int32)
    groups = list(group_ids)
    G = len(groups)
    seen: dict[int, int] = {}
    for k, devs in enumerate(groups):
        for d in devs:
            if d in seen:
                violations.append(f"{topo.names[d]} belongs to two different device groups")
            seen[d] = k
    group_of = stage_group[sol.assignment]
    rep = np.array([len(x) for x in groups], float)
    first = np.array([x[0] for x in groups], np.int32)
    if problem.max_stages is not None and G > problem.max_stages:
        violations.append(f"{G} stages, more than maxStages {problem.max_stages}")
    if (rep > 1).any() and not problem.replication:
        violations.append("a stage is replicated over several devices, but replication is forbidden")
    b = problem.batch_size
    uneven = [int(r) for r in rep if r > 1 and b and b % int(r)]
    if uneven:
        violations.append(f"a stage is replicated over {uneven[0]} devices, but a microbatch of {b} samples "
                          "does not split evenly over them")
    # compute (the slowest replica sets the pace); kernel launches kept apart: replicas do not share them
    fw, bw, launch_fw, launch_bw = (np.zeros(G) for _ in range(4))
    for k, devs in enumerate(groups):
        members = group_of == k
        tk = cost.device_compute[np.ix_(members, list(devs))].sum(axis=0)
        j = int(np.argmax(tk)) if len(tk) else 0
        d = devs[j]
        bw[k] = cost.device_compute[members & g.backward, d].sum()
        fw[k] = (tk[j] if len(tk) else 0.0) - bw[k]
        launch_bw[k] = cost.device_launch[members & g.backward, d].sum()
        launch_fw[k] = cost.device_launch[members & ~g.backward, d].sum()
    c = crossings(g, group_of)
    val, pu, cu, pnode = c.value, c.producer_group, c.consumer_group, c.producer
    recv, sval, spu, send = _charges(problem, val, pu, cu, first, by_device_io=False)
    back_r = g.backward[pnode]
    back_s = g.backward[g.value_node[sval]]
    np.add.at(fw, cu[~back_r], recv[~back_r])
    np.add.at(bw, cu[back_r], recv[back_r])
    np.add.at(fw, spu[~back_s], send[~back_s])
    np.add.at(bw, spu[back_s], send[back_s])
    fw = cost.replicated(fw, launch_fw, rep)
    bw = cost.replicated(bw, launch_bw, rep)
    if problem.mode is Mode.TRAINING and (rep > 1).any():
        pv, pn = cost.param_use
        pairs = np.unique(np.stack([pv, group_of[pn]], 1), axis=0) if len(pv) else np.zeros((0, 2), int)
        grad = np.zeros(G)
        np.add.at(grad, pairs[:, 1], g.value_bytes[pairs[:, 0]])
        for k, devs in enumerate(groups):
            bw[k] += cost.allreduce(grad[k], devs)
    # pipeline order (needed for 1F1B memory and for executing contiguous stages)
    fwd = ~g.backward if (problem.mode is Mode.TRAINING and g.backward.any()) else None
    order = quotient_order(g, group_of, G, mask=fwd)
    if order is None and fwd is not None:  # a non-contiguous training plan: order groups by first node
        order = [int(k) for k in np.argsort([np.flatnonzero(group_of == k).min() for k in range(G)])]
    if problem.contiguous:
        nonconvex = nonconvex_units(g, group_of, mask=fwd)
        if nonconvex:
            violations.append(f"{len(nonconvex)} stage(s) are not contiguous (a path leaves and re-enters), "
                              f"e.g. the stage on {topo.names[groups[nonconvex[0]][0]]}")
        if order is None:
            violations.append("the stages depend on each other in a cycle, so they cannot form a pipeline")
    position = np.zeros(G)
    if order is not None:
        position[order] = np.arange(G)
    in_flight = np.array([problem.in_flight(int(p), G) for p in position], float)
    members = _flatten(groups)
    mem = _memory(problem, group_of, members, in_flight)
    _common_checks(problem, sol, group_of, members, violations)
    memory_violations(problem, mem, violations)
    total = fw + bw
    if problem.variant is ThroughputVariant.MAX_FW_PLUS_MAX_BW:
        objective = float(fw.max() + bw.max()) if G else 0.0
    else:
        objective = float(total.max()) if G else 0.0
    load = np.zeros(D)
    fwd = np.zeros(D)
    bwd = np.zeros(D)
    for k, devs in enumerate(groups):
        load[list(devs)] += total[k]
        fwd[list(devs)] += fw[k]
        bwd[list(devs)] += bw[k]
    m = max(problem.microbatches, 1)
    step = (m + G - 1) * objective
    stage_order = tuple(int(i) for i in np.argsort(position[stage_group], kind="stable"))
    nan = np.full(S, np.nan)
    moved = int(g.value_bytes[val].sum()) if len(val) else 0
    return Evaluation(objective=objective, feasible=not violations, violations=tuple(violations), memory=mem,
                      capacity=problem.capacity, load=load, fw_load=fwd, bw_load=bwd, stage_start=nan,
                      stage_finish=nan.copy(), node_finish=None, bytes_moved=moved, step_time=step,
                      stage_order=stage_order)

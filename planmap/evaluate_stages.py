"""The evaluator's whole-cluster branch: a pipeline of sharded stages, each on its own submesh (issue 13).

Each stage is judged by the SPMD model on its stage tables (:func:`planmap.sharding.stage.stage_tables`)
with the layout the plan gives it (:func:`planmap.sharding.stage_layout.stage_layouts`):

* time per microbatch of stage k = its ops' compute + collectives + reshards
  (:func:`~planmap.sharding.spmd.evaluate_spmd`) + what it receives and sends between stages;
* a value received from stage j: every receiving device gets its piece, ``B / shards(receiver spec)``
  bytes, over the slowest link between the two submeshes (the cluster's receive charge); the sender's
  devices send ``B × receivers / (shards(receiver spec) × senders)`` bytes each (the send charge, the
  largest over the destinations of one value, as the pipeline evaluator charges a value once per
  sender) — a reshard between the meshes approximated as that point-to-point send;
* memory per device of stage k = parameters (with gradients and optimizer state in training) + data +
  the largest working set + the stash × the microbatches in flight under the schedule
  (:meth:`~planmap.problem.Problem.in_flight`, as the pipeline evaluator counts them; one stage: one,
  gradient accumulation); received forward values that the stage's backward ops read are stashed too;
* the objective is the bottleneck stage's time per microbatch (or the largest forward plus the largest
  backward, by the objective's variant) and the step is ``(microbatches + stages − 1) ×`` it — the
  pipeline formula used for every throughput plan.

Invalid plans (a stage mixing device types, axes that do not match its devices, unknown axis names,
indivisible specs, a stage without nodes, devices in two stages, non-contiguous stages, a layer's
forward and backward in different stages) are violations, not errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planmap.evaluation import Evaluation, memory_violations
from planmap.problem import Problem, Solution
from planmap.sharding.specs import shards
from planmap.sharding.spmd import SpmdEvaluation, evaluate_spmd
from planmap.sharding.stage_layout import StageLayout, stage_layouts
from planmap.structure import flatten_groups, nonconvex_units, placement_checks, quotient_order
from planmap.vocabulary import Mode, ThroughputVariant

__all__ = ["StageEvaluation", "evaluate_stages", "is_plain_pipeline"]


@dataclass(frozen=True, eq=False)
class StageEvaluation:
    """One stage of a whole-cluster plan. Seconds per microbatch; bytes per device of the stage.

    ``fw``/``bw``: forward / backward time incl. the transfers of forward / backward values;
    ``recv``/``send``: the transfer parts; ``memory_parts``: params, data, stash (× ``in_flight``), working."""

    layout: StageLayout
    spmd: SpmdEvaluation
    position: int
    in_flight: int
    fw: float
    bw: float
    recv: float
    send: float
    received_bytes: float
    memory: float
    memory_parts: dict[str, float]
    capacity: float

    @property
    def time(self) -> float:
        return self.fw + self.bw

    @property
    def compute(self) -> float:
        return self.spmd.compute

    @property
    def communication(self) -> float:
        """Collectives and reshards inside the stage plus its transfers to and from other stages."""
        return self.spmd.comm + self.spmd.reshard + self.recv + self.send


def is_plain_pipeline(solution: Solution) -> bool:
    """A plan of single-device stages without axes or specs: the pipeline it always was (no sharding)."""
    sh = solution.shardings
    return sh is None or (not sh.mesh_axes and not sh.args and not sh.values
                          and all(s.replicas == 1 and not s.mesh_axes for s in solution.stages))


def _invalid(problem: Problem, solution: Solution, violations: list[str]) -> Evaluation:
    D, S = problem.topology.num_devices, solution.num_stages
    nan = np.full(S, np.nan)
    return Evaluation(objective=math.inf, feasible=False, violations=tuple(violations), memory=np.zeros(D),
                      capacity=problem.capacity, load=np.zeros(D), fw_load=np.zeros(D), bw_load=np.zeros(D),
                      stage_start=nan, stage_finish=nan.copy(), node_finish=None, bytes_moved=0,
                      step_time=math.inf, stage_order=tuple(range(S)))


def _structure(problem: Problem, solution: Solution) -> tuple[list[str], np.ndarray]:
    """Violations of the plan's shape (before any stage is costed) and each stage's pipeline position."""
    g, topo, S = problem.graph, problem.topology, solution.num_stages
    out: list[str] = []
    if solution.shardings is not None and solution.shardings.mesh_axes:
        out.append("a plan of several stages names its mesh axes per stage (stages[k].mesh), not in "
                   "shardings.mesh_axes")
    seen: dict[int, int] = {}
    for k, st in enumerate(solution.stages):
        for d in st.devices:
            if d in seen:
                out.append(f"{topo.names[d]} is in stage {seen[d]} and stage {k}; sharded stages run on "
                           "disjoint submeshes")
            seen.setdefault(d, k)
    if problem.max_stages is not None and S > problem.max_stages:
        out.append(f"{S} stages, more than maxStages {problem.max_stages}")
    training = problem.mode is Mode.TRAINING and g.backward.any()
    fwd = ~g.backward if training else None
    order = quotient_order(g, solution.assignment, S, mask=fwd)
    if problem.contiguous:
        bad = nonconvex_units(g, solution.assignment, mask=fwd)
        if bad:
            out.append(f"{len(bad)} stage(s) are not contiguous (a path leaves and re-enters), e.g. stage {bad[0]}")
        if order is None:
            out.append("the stages depend on each other in a cycle, so they cannot form a pipeline")
    if training:
        for layer in np.unique(g.layer[g.layer >= 0]).tolist():
            on = g.layer == layer
            f = set(solution.assignment[on & ~g.backward].tolist())
            b = set(solution.assignment[on & g.backward].tolist())
            if f and b and f != b:
                out.append(f"layer {layer} runs its forward on stage(s) {sorted(f)} but its backward on "
                           f"{sorted(b)}; a layer's forward and backward share a stage")
                break
    placement_checks(problem, solution, solution.assignment, flatten_groups([s.devices for s in solution.stages]), out)
    position = np.arange(S)
    if order is not None:
        position[np.asarray(order)] = np.arange(S)
    return out, position


def _links(topo, src: np.ndarray, dst: np.ndarray) -> tuple[float, float, float, float]:
    """(send latency, send s/byte, receive latency, receive s/byte): the slowest pair between two submeshes."""
    ix = np.ix_(src, dst)
    sp, rp = topo.send_paid[ix], topo.recv_paid[ix]
    return (float(np.where(sp, topo.send_lat[ix], 0.0).max()), float(np.where(sp, topo.send_ibw[ix], 0.0).max()),
            float(np.where(rp, topo.recv_lat[ix], 0.0).max()), float(np.where(rp, topo.recv_ibw[ix], 0.0).max()))


def _transfers(problem: Problem, stages: list[StageLayout]) -> tuple[np.ndarray, ...]:
    """Per stage: (forward recv, backward recv, forward send, backward send) seconds per microbatch,
    received bytes per device, and the bytes moved between stages (module doc)."""
    original, topo = problem.original, problem.topology
    S = len(stages)
    owner = np.full(original.num_nodes, -1, np.int64)
    for st in stages:
        owner[st.ops] = st.index
    recv, send, got = np.zeros((S, 2)), np.zeros((S, 2)), np.zeros(S)
    sent: dict[tuple[int, int], float] = {}  # (value, sender) -> the largest send charge over destinations
    moved = 0.0
    for st in stages:
        m = st.map
        for w in m.received.tolist():
            v = int(m.values[w])
            op = int(original.value_node[v])
            src = stages[int(owner[op])]
            nbytes = float(original.value_bytes[v])
            pieces = shards(st.layout[w], st.mesh.axis_sizes)
            s_lat, s_ibw, r_lat, r_ibw = _links(topo, src.mesh.devices, st.mesh.devices)
            part = int(bool(original.backward[op]))
            per_dev = nbytes / pieces
            recv[st.index, part] += r_lat + per_dev * r_ibw
            got[st.index] += per_dev
            out = nbytes * st.mesh.num_devices / (pieces * src.mesh.num_devices)
            key = (v, src.index)
            sent[key] = max(sent.get(key, 0.0), s_lat + out * s_ibw)
            moved += per_dev * st.mesh.num_devices
    for (v, k), t in sent.items():
        send[k, int(bool(original.backward[int(original.value_node[v])]))] += t
    return recv, send, got, np.asarray(moved)


def _memory(problem: Problem, st: StageLayout, ev: SpmdEvaluation, in_flight: int) -> dict[str, float]:
    """The stage's memory parts per device, the stash held for ``in_flight`` microbatches; received forward
    values its backward ops read are stashed (they are activations of earlier stages)."""
    g, original = st.tables.graph, problem.original
    parts = dict(ev.memory_parts)
    if problem.mode is Mode.TRAINING and g.backward.any():
        read_back = np.zeros(g.num_values, bool)
        read_back[g.edge_value[g.backward[g.edge_dst]]] = True
        held = 0.0
        for w in st.map.received.tolist():
            op = int(original.value_node[int(st.map.values[w])])
            if read_back[w] and not original.backward[op]:
                held += float(g.value_bytes[w]) / shards(st.layout[w], st.mesh.axis_sizes)
        parts["data"] -= held
        parts["stash"] = (parts["stash"] + held) * in_flight
    return parts


def evaluate_stages(problem: Problem, solution: Solution) -> Evaluation:
    """The Evaluation of a whole-cluster plan (module doc); ``stages`` holds the per-stage detail."""
    violations, position = _structure(problem, solution)
    if violations and any("disjoint" in v or "no nodes" in v for v in violations):
        return _invalid(problem, solution, violations)
    try:
        stages = stage_layouts(problem, solution)
    except ValueError as e:
        return _invalid(problem, solution, [*violations, f"invalid whole-cluster plan: {e}"])
    S, D = len(stages), problem.topology.num_devices
    recv, send, got, moved = _transfers(problem, stages)
    out: list[StageEvaluation] = []
    for st in stages:
        ev = evaluate_spmd(st.tables, st.layout)
        back = st.tables.graph.backward
        bw_ops = float(ev.op_time[back].sum()) if back.any() else 0.0
        k = st.index
        in_flight = 1 if S == 1 else problem.in_flight(int(position[k]), S)
        parts = _memory(problem, st, ev, in_flight)
        total = float(sum(parts.values()))
        out.append(StageEvaluation(
            layout=st, spmd=ev, position=int(position[k]), in_flight=in_flight,
            fw=ev.microbatch_time - bw_ops + recv[k, 0] + send[k, 0], bw=bw_ops + recv[k, 1] + send[k, 1],
            recv=float(recv[k].sum()), send=float(send[k].sum()), received_bytes=float(got[k]), memory=total,
            memory_parts=parts, capacity=ev.capacity))
    mem, load, fw, bw = np.zeros(D), np.zeros(D), np.zeros(D), np.zeros(D)
    for se in out:
        devs = se.layout.mesh.devices
        mem[devs] += se.memory
        load[devs] += se.time
        fw[devs] += se.fw
        bw[devs] += se.bw
    memory_violations(problem, mem, violations)
    if problem.variant is ThroughputVariant.MAX_FW_PLUS_MAX_BW:
        objective = max(se.fw for se in out) + max(se.bw for se in out)
    else:
        objective = max(se.time for se in out)
    step = (max(problem.microbatches, 1) + S - 1) * objective
    coll = sum(b * c * se.layout.mesh.num_devices for se in out for _, _, b, c in se.spmd.collectives)
    nan = np.full(S, np.nan)
    return Evaluation(objective=float(objective), feasible=not violations, violations=tuple(violations), memory=mem,
                      capacity=problem.capacity, load=load, fw_load=fw, bw_load=bw, stage_start=nan,
                      stage_finish=nan.copy(), node_finish=None, bytes_moved=int(coll + float(moved)),
                      step_time=float(step), stage_order=tuple(int(k) for k in np.argsort(position, kind="stable")),
                      stages=tuple(out))

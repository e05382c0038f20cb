"""Spec -> :class:`~planmap.problem.Problem`: load the model, coarsen it, cost it, apply the constraints.

:func:`build_problem` is the one place a :class:`~planmap.spec.LoadedSpec` becomes a problem; the
CLI, ``plan check`` and the benchmarks call it. The contracts it fills in live in
:mod:`planmap.problem`.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import numpy as np

from planmap.cluster import Topology
from planmap.cost import CostModel
from planmap.errors import InfeasibleError, InputError, PlanmapError
from planmap.graph import OpGraph
from planmap.kernels import kernel_counts
from planmap.microbatching import AUTO_MICROBATCHES, resolve_schedule
from planmap.problem import Problem
from planmap.vocabulary import Mode, ObjectiveKind, Schedule, ThroughputVariant

__all__ = ["build_problem", "remat_options", "plan_remat"]

def _pins(spec, graph: OpGraph, original: OpGraph, topo: Topology, allowed: np.ndarray) -> None:
    names = np.asarray(original.op_name, dtype=object)
    node_of = graph.original_to_node
    for pin in spec.spec.constraints.pins:
        ops = np.flatnonzero([fnmatch.fnmatchcase(n, pin.ops) for n in names])
        devs = topo.match(pin.device)
        if len(ops) == 0:
            raise InfeasibleError(f"pin {pin.ops!r} -> {pin.device!r} matches no operator of the model "
                                  f"(operator names look like {names[len(names) // 2]!r})")
        mask = np.zeros(topo.num_devices, bool)
        mask[devs] = True
        nodes = np.unique(node_of[ops])
        allowed[nodes] &= mask


AUTO_MIN_NODES_PER_DEVICE = 3  # granularity the solvers need to balance stages well
AUTO_MAX_NODES = 5000  # beyond this, exact solvers slow down a lot


def _coarsen(frontend: Any, original: OpGraph, level: str, topo: Topology) -> OpGraph:
    """Coarsen ``original``; ``auto`` takes repeated layers when there are a few per device (they are
    the natural pipeline stages), else fused ops — never raw ops, whose argument-only chains (bias
    broadcasts, converts) would multiply the solvers' work for nothing."""
    if level != "auto":
        return frontend.coarsen(original, level)
    devices = max(1, len(topo.accelerators) or topo.num_devices)
    layers = frontend.coarsen(original, "layers")
    if layers.num_nodes >= AUTO_MIN_NODES_PER_DEVICE * devices:
        return layers
    fused = frontend.coarsen(original, "fuse")
    return fused if fused.num_nodes <= AUTO_MAX_NODES else layers


def _batch_size(graph: OpGraph) -> int | None:
    """Leading dim of the first data argument: the samples one run of the artifact processes."""
    data = [a for a in graph.args if a.role == "data" and a.type.shape]
    return int(data[0].type.shape[0]) if data else None


def _microbatches(model: Any, graph: OpGraph) -> tuple[int, tuple[int, ...]]:
    """(microbatches, the planner's choices): the spec's number, or with ``globalBatch`` globalBatch / the
    artifact's batch (the artifact is exported at the microbatch size, so M is fixed); ``auto`` without
    ``globalBatch`` and a list are choices (:mod:`planmap.microbatching`), of which solvers that do not choose M
    solve at the largest."""
    batch = _batch_size(graph)
    mb = model.microbatches
    if isinstance(mb, list) or (mb == "auto" and not (model.global_batch and batch)):
        choices = tuple(sorted(set(mb))) if isinstance(mb, list) else AUTO_MICROBATCHES
        return choices[-1], choices
    if mb == "auto":
        mb = max(1, model.global_batch // batch)
    if model.global_batch and batch and model.global_batch != batch * mb:
        raise PlanmapError(f"globalBatch {model.global_batch} != the artifact's batch {batch} x microbatches {mb}: "
                           "the artifact is run once per microbatch, so export it at globalBatch / microbatches",
                           code="value")
    return int(mb), ()


def remat_options(spec: Any) -> tuple[bool, ...]:
    """The activation-checkpointing choices the spec allows: one, or both for ``remat: auto`` in training
    (inference stashes nothing: no choice to make)."""
    remat = spec.spec.constraints.remat
    if str(spec.spec.model.mode) != "training":
        return (False,)
    return (False, True) if remat == "auto" else (bool(remat),)


def build_problem(spec: Any, *, graph: OpGraph | None = None, remat: bool | None = None) -> Problem:
    """The problem a :class:`~planmap.spec.LoadedSpec` describes: load, coarsen, cost, constrain.

    ``remat``: activation checkpointing on every stage (True) or none (False), one of :func:`remat_options`;
    None (the default): the spec's, and for ``remat: auto`` a per-stage decision of the planner
    (:attr:`~planmap.problem.Problem.remat_choice`, none until a stage chooses it)."""
    from planmap import frontend

    body = spec.spec
    model = body.model
    topo = Topology.from_spec(body.cluster)
    original = graph if graph is not None else frontend.load_model(
        spec.model_path, format=str(model.format), arguments=model.arguments, entry=model.entry,
        loop_trip_count=model.loop_trip_count)
    coarse = _coarsen(frontend, original, str(body.constraints.coarsening), topo)
    if getattr(spec, "profile_path", None) is not None:
        from planmap.profile import apply_profile, file_sha256, load_profile

        coarse = apply_profile(coarse, original, load_profile(spec.profile_path), file_sha256(spec.model_path),
                               where=str(spec.profile_path))
    mode = str(model.mode)
    cost = CostModel.build(coarse, topo, mode=mode, optimizer=str(model.optimizer),
                           kernels=kernel_counts(coarse, original), master_dtype=model.master_dtype,
                           remat=remat if remat is not None else body.constraints.remat is True)
    allowed = cost.supported.copy()
    _pins(spec, coarse, original, topo, allowed)
    bad = np.flatnonzero(~allowed.any(axis=1))
    if len(bad):
        i = int(bad[0])
        raise InfeasibleError(f"operator {coarse.op_name[i]!r} ({coarse.kind[i]}) can run on no device of the "
                              f"cluster (unsupported, or excluded by pins); {len(bad)} such node(s)")
    schedule = Schedule(body.constraints.schedule)
    schedules = (Schedule.GPIPE, Schedule.ONE_F_ONE_B) if schedule is Schedule.AUTO else ()
    mb, mb_choices = _microbatches(model, original)
    if str(body.objective.kind) != "throughput":  # latency: one sample, no microbatches to choose
        mb_choices = ()
    return Problem(
        name=spec.metadata.name, graph=coarse, topology=topo, cost=cost, objective=ObjectiveKind(body.objective.kind),
        variant=ThroughputVariant(body.objective.variant), mode=Mode(mode),
        contiguous=str(body.constraints.placement) == "contiguous",
        max_subgraphs=body.constraints.max_subgraphs_per_device, max_stages=body.constraints.max_stages,
        memory_headroom=body.constraints.memory_headroom,
        schedule=resolve_schedule(mode) if schedule is Schedule.AUTO else schedule, schedule_choices=schedules,
        microbatches=mb, microbatch_choices=mb_choices, replication=str(body.constraints.replication) == "allow",
        batch_size=_batch_size(original),
        remat_choice=remat is None and len(remat_options(spec)) > 1, allowed=allowed, original=original, spec=spec,
    )


def plan_remat(spec: Any, doc: Any) -> bool | None:
    """The activation-checkpointing choice a plan of ``spec`` was made with: the spec's, or for
    ``remat: auto`` the one the plan records in ``solver.options.remat``: ``per-stage`` gives None (each
    stage's, as its ``remat`` ranges say), a bool (plans written before the choice was per stage) that
    choice for every stage; InputError when the spec does not allow the recorded choice."""
    allowed = remat_options(spec)
    recorded = doc.solver.options.get("remat", allowed[0])
    if recorded == "per-stage" and len(allowed) > 1:
        return None
    if not isinstance(recorded, bool) or recorded not in allowed:
        raise InputError(f"the plan records remat {recorded!r}, but the spec allows "
                         f"{' or '.join(str(r).lower() for r in allowed)}")
    return recorded

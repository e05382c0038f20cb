"""Solution <-> plan: write a solver's decisions as a plan document, and read them back onto a problem.

Decisions are stored in terms of the *artifact's* op ids (the entry function's body, in order), not
the coarsened graph the solver saw, so a plan stays meaningful to the runtime and to a reader
whatever coarsening was used; :func:`to_solution` maps them back onto a problem's graph.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from planmap import __version__
from planmap.errors import InputError
from planmap.evaluate import Evaluation
from planmap.io import INPUT_KINDS, read_input, sha256_input
from planmap.peak_memory import with_peak_memory
from planmap.plan.canonical import CANONICAL_ROLES, canonical_sha256_of, canonical_sha256_of_value
from planmap.plan.certificate import certificate_message
from planmap.plan.document import (
    FORMAT_VERSION,
    DevicePrediction,
    MeshDoc,
    ObjectiveDoc,
    PlanDocument,
    PlanInput,
    Predicted,
    ScheduleDoc,
    ShardingEntry,
    ShardingsDoc,
    SolverDoc,
    StageDoc,
    StageMesh,
    StagePrediction,
)
from planmap.problem import Certificate, Problem, Shardings, Solution, Stage, Status
from planmap.remat import remat_ops
from planmap.remat_stages import node_mask
from planmap.vocabulary import ObjectiveKind

__all__ = ["make_plan", "to_solution", "document", "plan_input", "stage_mesh", "shardings_doc", "op_ranges",
           "ranges_to_ids", "ns"]


def ns(seconds: float | None) -> int | None:
    """Seconds -> integer nanoseconds (plans hold integers); None stays None."""
    if seconds is None or not np.isfinite(seconds):
        return None
    return int(round(seconds * 1e9))


def op_ranges(ids: np.ndarray) -> list[tuple[int, int]]:
    """Sorted op ids -> half-open ranges [start, stop)."""
    ids = np.unique(np.asarray(ids, np.int64))
    if len(ids) == 0:
        return []
    breaks = np.flatnonzero(np.diff(ids) != 1)
    starts = np.concatenate([[ids[0]], ids[breaks + 1]])
    stops = np.concatenate([ids[breaks] + 1, [ids[-1] + 1]])
    return [(int(a), int(b)) for a, b in zip(starts, stops, strict=True)]


def ranges_to_ids(ranges: list[tuple[int, int]]) -> np.ndarray:
    if not ranges:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(a, b) for a, b in ranges]).astype(np.int64)


def _rel(path: Path, base: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(base).resolve())).as_posix()


def plan_input(role: str, path: Path, plan_dir: Path, loaded: tuple[bytes, Any] | None = None) -> PlanInput:
    """An input of a plan in ``plan_dir``: its path relative to the plan and the hashes that make the plan stale
    (spec and cluster also by their parsed content, see :mod:`planmap.plan.canonical`). ``loaded``: the
    document's bytes and parsed value as the spec loader read them (the documents solved), else it is read."""
    if role in CANONICAL_ROLES and loaded is not None:
        digest, canonical = hashlib.sha256(loaded[0]).hexdigest(), canonical_sha256_of_value(loaded[1])
    elif role in CANONICAL_ROLES:  # one read for both hashes: the file cannot change between them
        raw = read_input(path, INPUT_KINDS[role])
        digest, canonical = hashlib.sha256(raw).hexdigest(), canonical_sha256_of(raw)
    else:  # an artifact (up to GiBs) is streamed, hashed by its bytes only
        digest, canonical = sha256_input(Path(path), INPUT_KINDS.get(role, "artifact")), None
    return PlanInput(role=role, path=_rel(path, plan_dir), sha256=digest, canonical_sha256=canonical)


SOLVER_INPUT_ROLES = ("checkpoint",)  # inputs a solver names (Certificate.inputs), after the spec's files


def _inputs(spec: Any, plan_dir: Path, solver_inputs: Sequence[tuple[str, str]] = ()) -> list[PlanInput]:
    """The spec's files, then the files the solver read (``Certificate.inputs``: a DQN checkpoint)."""
    items = [("spec", spec.path)]
    if spec.cluster_path is not None:
        items.append(("cluster", spec.cluster_path))
    items.append(("model", spec.model_path))
    profile = getattr(spec, "profile_path", None)  # a spec-like object without cost.profile has none
    if profile is not None:
        items.append(("profile", profile))
    items += [(role, Path(p)) for role, p in solver_inputs]
    sources = getattr(spec, "sources", None) or {}  # a spec-like object that is not a LoadedSpec has none
    return [plan_input(r, p, plan_dir, sources.get(p) if r in CANONICAL_ROLES else None) for r, p in items]


def _layer_names(problem: Problem, nodes: np.ndarray) -> list[str]:
    names = problem.graph.meta.get("layer_names")
    if not names:
        return []
    ids = np.unique(problem.graph.layer[nodes])
    return [str(names[i]) for i in ids if 0 <= i < len(names)]


def _spec_entry(spec_tuple: Sequence) -> list:
    return [list(x) if isinstance(x, tuple) else x for x in spec_tuple]


def stage_mesh(axes: Sequence[tuple[str, int]]) -> StageMesh | None:
    """A stage's sub-mesh from ``(axis, size)`` pairs; None when there are none."""
    if not axes:
        return None
    return StageMesh(axis_names=[a for a, _ in axes], axis_sizes=[s for _, s in axes])


def shardings_doc(args: Mapping[int, Sequence], values: Mapping[tuple[int, int], Sequence], *,
                  arg_names: dict[int, str] | None = None, op_names: Sequence[str] | None = None,
                  zero: int = 0) -> ShardingsDoc:
    """PartitionSpecs by argument index and by (op id, result number), sorted, with names for reading."""
    arg_names = arg_names or {}
    return ShardingsDoc(
        zero=zero,
        args=[ShardingEntry(arg=i, name=arg_names.get(i, ""), spec=_spec_entry(s)) for i, s in sorted(args.items())],
        values=[ShardingEntry(op=op, result=r, name="" if op_names is None else op_names[op], spec=_spec_entry(s))
                for (op, r), s in sorted(values.items())])


def document(*, name: str, generator: str, objective: str, variant: str | None, mode: str,
             inputs: list[PlanInput], data_args: Sequence[int], mesh: Sequence[tuple[str, int]],
             devices: Sequence[str], schedule: str, microbatches: int, stages: list[StageDoc],
             shardings: ShardingsDoc, predicted: Predicted, solver: SolverDoc) -> PlanDocument:
    """The one constructor of plan documents, for solved plans (:func:`make_plan`) and hand-written ones
    (:mod:`planmap.plan.manual`): ``mesh`` is the plan mesh as ``(axis, size)`` pairs over ``devices``."""
    return PlanDocument(
        format_version=FORMAT_VERSION, generator=generator, name=name,
        objective=ObjectiveDoc(kind=objective, variant=variant), mode=mode, inputs=inputs, data_args=list(data_args),
        mesh=MeshDoc(axis_names=[a for a, _ in mesh], axis_sizes=[s for _, s in mesh], devices=list(devices)),
        schedule=ScheduleDoc(kind=schedule, microbatches=microbatches),
        stages=stages, shardings=shardings, predicted=predicted, solver=solver)


def _stage_predictions(evaluation: Evaluation, order: list[int], solution: Solution) -> list[StagePrediction]:
    """The program model's memory per device of each stage with nodes, under the ids the plan gives them (none
    for an invalid plan, which has no program model: :func:`~planmap.peak_memory.with_peak_memory`)."""
    if evaluation.peak is None:
        return []
    used = [k for k in order if (np.asarray(solution.assignment) == k).any()]
    out = []
    for i, k in enumerate(used):
        sm = evaluation.peak.stages[k]
        parts = {a: int(round(b)) for a, b in sm.parts().items()}
        out.append(StagePrediction(stage=i, memory=sum(parts.values()), in_flight=sm.in_flight, **parts))
    return out


def make_plan(problem: Problem, solution: Solution, evaluation: Evaluation, *, spec: Any,
              plan_path: str | Path, name: str | None = None) -> PlanDocument:
    """The plan document of ``solution`` (evaluated as ``evaluation``), with inputs relative to ``plan_path``.

    The memory recorded per device is the program model's (:mod:`planmap.peak_memory`, computed here unless
    ``evaluation`` carries it), not the solvers' linear terms."""
    plan_path = Path(plan_path)
    evaluation = with_peak_memory(problem, solution, evaluation)
    g, topo = problem.graph, problem.topology
    throughput = problem.objective is ObjectiveKind.THROUGHPUT
    order = list(evaluation.stage_order) if throughput else list(range(solution.num_stages))
    stages: list[StageDoc] = []
    remat = node_mask(problem, solution) if solution.shardings is None else None  # SPMD ignores remat
    for k in order:
        nodes = np.flatnonzero(solution.assignment == k)
        if len(nodes) == 0:
            continue
        members = np.concatenate([g.members_of(int(i)) for i in nodes])
        st = solution.stages[k]
        mesh = stage_mesh(st.mesh_axes or ([("data", st.replicas)] if st.replicas > 1 else []))
        stages.append(StageDoc(id=len(stages), devices=[topo.names[d] for d in st.devices],
                               ops=op_ranges(members), mesh=mesh, layers=_layer_names(problem, nodes),
                               remat=[] if remat is None else op_ranges(remat_ops(g, problem.original,
                                                                                  nodes[remat[nodes]]))))
    sh = solution.shardings
    if sh is not None and solution.num_stages == 1:
        # an SPMD plan's mesh is its one stage's devices in row-major mesh order
        mesh_axes, mesh_devices = list(sh.mesh_axes), [topo.names[d] for d in solution.stages[0].devices]
    else:  # pipelines; whole-cluster plans keep each stage's sub-mesh in the stage
        mesh_axes, mesh_devices = [("device", topo.num_devices)], list(topo.names)
    shardings = ShardingsDoc() if sh is None else shardings_doc(
        sh.args, sh.values, arg_names={a.index: a.name for a in problem.original.args},
        op_names=problem.original.op_name, zero=sh.zero)
    cert = solution.certificate
    cap = evaluation.capacity
    predicted = Predicted(
        objective_ns=ns(evaluation.objective) or 0, step_time_ns=ns(evaluation.step_time) or 0,
        bytes_moved=int(evaluation.bytes_moved),
        devices=[DevicePrediction(device=topo.names[d], memory=int(round(evaluation.memory[d])),
                                  capacity=None if not np.isfinite(cap[d]) else int(cap[d]),
                                  load_ns=ns(evaluation.load[d]) or 0)
                 for d in range(topo.num_devices) if evaluation.memory[d] > 0 or evaluation.load[d] > 0],
        stages=_stage_predictions(evaluation, order, solution))
    gap = None if cert.gap is None else round(float(cert.gap), 6)
    options = {k: v for k, v in sorted(cert.options.items())}
    # the message is derived from the structured fields (planmap.plan.certificate); the solver's free-text
    # remarks are kept apart, for review: only `check --resolve` can verify them (it solves again)
    solver = SolverDoc(name=cert.solver, version=cert.version, backend=cert.backend, status=str(cert.status),
                       objective_ns=ns(cert.objective), bound_ns=ns(cert.bound), gap=gap, options=options,
                       message=certificate_message(str(cert.status), ns(cert.objective), ns(cert.bound), gap, options),
                       remarks=cert.message)
    data_args = [a.index for a in problem.original.args if a.role == "data"]
    return document(
        name=name or problem.name, generator=f"planmap {__version__}", objective=problem.objective,
        variant=problem.variant if throughput else None, mode=problem.mode,
        inputs=_inputs(spec, plan_path.parent, cert.inputs), data_args=data_args, mesh=mesh_axes, devices=mesh_devices,
        schedule=(solution.schedule or "none") if throughput else "none", microbatches=max(1, solution.microbatches),
        stages=stages, shardings=shardings, predicted=predicted, solver=solver)


def to_solution(problem: Problem, doc: PlanDocument) -> Solution:
    """The plan's decisions as a Solution on ``problem.graph`` (InputError if they do not fit it)."""
    g, topo = problem.graph, problem.topology
    n_ops = g.n_original
    stage_of_op = np.full(n_ops, -1, np.int64)
    stages = []
    for k, st in enumerate(doc.stages):
        if any(not 0 <= a <= b <= n_ops for a, b in st.ops):  # before expanding a range: [0, 10**12) is 7 TiB
            raise InputError(f"plan stage {st.id} names op ids outside the artifact's {n_ops} ops",
                             code="plan-decision")
        ids = ranges_to_ids(st.ops)
        if (stage_of_op[ids] >= 0).any():
            raise InputError(f"plan stage {st.id} repeats ops of an earlier stage", code="plan-decision")
        stage_of_op[ids] = k
        try:
            devs = tuple(topo.index(d) for d in st.devices)
        except KeyError as e:
            raise InputError(f"plan stage {st.id}: {e.args[0]}", code="plan-decision") from None
        if len(set(devs)) != len(devs):
            raise InputError(f"plan stage {st.id} lists a device twice ({', '.join(st.devices)})", code="plan-decision")
        axes = tuple(zip(st.mesh.axis_names, st.mesh.axis_sizes, strict=True)) if st.mesh else ()
        stages.append(Stage(devs, axes, remat=bool(st.remat) if problem.remat_choice else None))
    covered = g.members[stage_of_op[g.members] >= 0]
    if len(covered) != len(g.members):
        missing = int(g.members[stage_of_op[g.members] < 0][0])
        raise InputError(f"the plan places no stage on op {missing} ({problem.original.op_name[missing]!r})",
                         code="plan-decision")
    node_stage = stage_of_op[g.members]
    lo = np.minimum.reduceat(node_stage, g.members_indptr[:-1])
    hi = np.maximum.reduceat(node_stage, g.members_indptr[:-1])
    split = np.flatnonzero(lo != hi)
    if len(split):
        i = int(split[0])
        raise InputError(f"the plan splits fused node {i} ({g.op_name[i]!r}) across stages; "
                         "re-solve, or set constraints.coarsening: none", code="plan-decision")
    shardings = None
    spmd_stage = (len(doc.stages) == 1 and doc.stages[0].mesh is not None
                  and doc.stages[0].mesh.axis_names == doc.mesh.axis_names
                  and doc.stages[0].devices == doc.mesh.devices)
    if doc.shardings.args or doc.shardings.values or spmd_stage:
        shardings = Shardings(  # several stages: each names its axes (whole-cluster plan)
            mesh_axes=() if len(doc.stages) > 1 else tuple(zip(doc.mesh.axis_names, doc.mesh.axis_sizes, strict=True)),
            args={e.arg: tuple(tuple(x) if isinstance(x, list) else x for x in e.spec)
                  for e in doc.shardings.args if e.arg is not None},
            values={(e.op, e.result): tuple(tuple(x) if isinstance(x, list) else x for x in e.spec)
                    for e in doc.shardings.values if e.op is not None}, zero=doc.shardings.zero)
    status = Status(doc.solver.status) if doc.solver.status in {s.value for s in Status} else Status.HEURISTIC
    cert = Certificate(status, doc.solver.name, version=doc.solver.version, backend=doc.solver.backend,
                       objective=None if doc.solver.objective_ns is None else doc.solver.objective_ns * 1e-9,
                       bound=None if doc.solver.bound_ns is None else doc.solver.bound_ns * 1e-9,
                       gap=doc.solver.gap, options=dict(doc.solver.options),
                       message=doc.solver.remarks)  # the solver's text; `message` is derived again
    return Solution(lo.astype(np.int32), tuple(stages), cert,
                    schedule=None if doc.schedule.kind == "none" else doc.schedule.kind,
                    microbatches=doc.schedule.microbatches, shardings=shardings)

"""Solution <-> plan: write a solver's decisions as a plan document, and read them back onto a problem.

Decisions are stored in terms of the *artifact's* op ids (the entry function's body, in order), not
the coarsened graph the solver saw, so a plan stays meaningful to the runtime and to a reader
whatever coarsening was used; :func:`to_solution` maps them back onto a problem's graph.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from planmap import __version__
from planmap.errors import InputError
from planmap.evaluate import Evaluation
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
)
from planmap.problem import Certificate, Problem, Shardings, Solution, Stage, Status

__all__ = ["make_plan", "to_solution", "sha256_file", "op_ranges", "ranges_to_ids", "ns"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def _inputs(spec: Any, plan_dir: Path) -> list[PlanInput]:
    items = [("spec", spec.path)]
    if spec.cluster_path is not None:
        items.append(("cluster", spec.cluster_path))
    items.append(("model", spec.model_path))
    return [PlanInput(role=r, path=_rel(p, plan_dir), sha256=sha256_file(Path(p))) for r, p in items]


def _layer_names(problem: Problem, nodes: np.ndarray) -> list[str]:
    names = problem.graph.meta.get("layer_names")
    if not names:
        return []
    ids = np.unique(problem.graph.layer[nodes])
    return [str(names[i]) for i in ids if 0 <= i < len(names)]


def _spec_entry(spec_tuple: tuple) -> list:
    return [list(x) if isinstance(x, tuple) else x for x in spec_tuple]


def make_plan(problem: Problem, solution: Solution, evaluation: Evaluation, *, spec: Any,
              plan_path: Path, name: str | None = None) -> PlanDocument:
    """The plan document of ``solution`` (evaluated as ``evaluation``), with inputs relative to ``plan_path``."""
    g, topo = problem.graph, problem.topology
    order = list(evaluation.stage_order) if problem.objective == "throughput" else list(range(solution.num_stages))
    stages = []
    for k in order:
        nodes = np.flatnonzero(solution.assignment == k)
        if len(nodes) == 0:
            continue
        members = np.concatenate([g.members_of(int(i)) for i in nodes])
        st = solution.stages[k]
        mesh = None
        if st.mesh_axes:
            mesh = StageMesh(axis_names=[a for a, _ in st.mesh_axes], axis_sizes=[s for _, s in st.mesh_axes])
        elif st.replicas > 1:
            mesh = StageMesh(axis_names=["data"], axis_sizes=[st.replicas])
        stages.append(StageDoc(id=len(stages), devices=[topo.names[d] for d in st.devices],
                               ops=op_ranges(members), mesh=mesh, layers=_layer_names(problem, nodes)))
    sh = solution.shardings
    if sh is not None:
        # an SPMD plan's mesh is its one stage's devices in row-major mesh order
        mesh_devs = solution.stages[0].devices if solution.num_stages == 1 else range(
            int(np.prod([s for _, s in sh.mesh_axes])))
        mesh_doc = MeshDoc(axis_names=[a for a, _ in sh.mesh_axes], axis_sizes=[s for _, s in sh.mesh_axes],
                           devices=[topo.names[d] for d in mesh_devs])
        arg_names = {a.index: a.name for a in problem.original.args}
        shardings = ShardingsDoc(
            args=[ShardingEntry(arg=i, name=arg_names.get(i, ""), spec=_spec_entry(s)) for i, s in sorted(sh.args.items())],
            values=[ShardingEntry(op=op, result=r, name=problem.original.op_name[op], spec=_spec_entry(s))
                    for (op, r), s in sorted(sh.values.items())])
    else:
        mesh_doc = MeshDoc(axis_names=["device"], axis_sizes=[topo.num_devices], devices=list(topo.names))
        shardings = ShardingsDoc()
    cert = solution.certificate
    cap = evaluation.capacity
    predicted = Predicted(
        objective_ns=ns(evaluation.objective) or 0, step_time_ns=ns(evaluation.step_time) or 0,
        bytes_moved=int(evaluation.bytes_moved),
        devices=[DevicePrediction(device=topo.names[d], memory=int(round(evaluation.memory[d])),
                                  capacity=None if not np.isfinite(cap[d]) else int(cap[d]),
                                  load_ns=ns(evaluation.load[d]) or 0)
                 for d in range(topo.num_devices) if evaluation.memory[d] > 0 or evaluation.load[d] > 0])
    solver = SolverDoc(name=cert.solver, version=cert.version, backend=cert.backend, status=str(cert.status),
                       objective_ns=ns(cert.objective), bound_ns=ns(cert.bound),
                       gap=None if cert.gap is None else round(float(cert.gap), 6),
                       options={k: v for k, v in sorted(cert.options.items())}, message=cert.message)
    data_args = [a.index for a in problem.original.args if a.role == "data"]
    schedule = ScheduleDoc(kind=(solution.schedule or "none") if problem.objective == "throughput" else "none",
                           microbatches=max(1, solution.microbatches))
    return PlanDocument(
        format_version=FORMAT_VERSION, generator=f"planmap {__version__}", name=name or problem.name,
        objective=ObjectiveDoc(kind=problem.objective,
                                                          variant=problem.variant if problem.objective == "throughput" else None), mode=problem.mode,
        inputs=_inputs(spec, plan_path.parent), data_args=data_args, mesh=mesh_doc, schedule=schedule,
        stages=stages, shardings=shardings, predicted=predicted, solver=solver)


def to_solution(problem: Problem, doc: PlanDocument) -> Solution:
    """The plan's decisions as a Solution on ``problem.graph`` (InputError if they do not fit it)."""
    g, topo = problem.graph, problem.topology
    n_ops = g.n_original
    stage_of_op = np.full(n_ops, -1, np.int64)
    stages = []
    for k, st in enumerate(doc.stages):
        ids = ranges_to_ids(st.ops)
        if len(ids) and (ids.min() < 0 or ids.max() >= n_ops):
            raise InputError(f"plan stage {st.id} names op ids outside the artifact's {n_ops} ops")
        if (stage_of_op[ids] >= 0).any():
            raise InputError(f"plan stage {st.id} repeats ops of an earlier stage")
        stage_of_op[ids] = k
        try:
            devs = tuple(topo.index(d) for d in st.devices)
        except KeyError as e:
            raise InputError(f"plan stage {st.id}: {e.args[0]}") from None
        axes = tuple(zip(st.mesh.axis_names, st.mesh.axis_sizes, strict=True)) if st.mesh else ()
        stages.append(Stage(devs, axes))
    covered = g.members[stage_of_op[g.members] >= 0]
    if len(covered) != len(g.members):
        missing = int(g.members[stage_of_op[g.members] < 0][0])
        raise InputError(f"the plan places no stage on op {missing} ({problem.original.op_name[missing]!r})")
    node_stage = stage_of_op[g.members]
    lo = np.minimum.reduceat(node_stage, g.members_indptr[:-1])
    hi = np.maximum.reduceat(node_stage, g.members_indptr[:-1])
    split = np.flatnonzero(lo != hi)
    if len(split):
        i = int(split[0])
        raise InputError(f"the plan splits fused node {i} ({g.op_name[i]!r}) across stages; "
                         "re-solve, or set constraints.coarsening: none")
    shardings = None
    spmd_stage = (len(doc.stages) == 1 and doc.stages[0].mesh is not None
                  and doc.stages[0].mesh.axis_names == doc.mesh.axis_names
                  and doc.stages[0].devices == doc.mesh.devices)
    if doc.shardings.args or doc.shardings.values or spmd_stage:
        shardings = Shardings(
            mesh_axes=tuple(zip(doc.mesh.axis_names, doc.mesh.axis_sizes, strict=True)),
            args={e.arg: tuple(tuple(x) if isinstance(x, list) else x for x in e.spec) for e in doc.shardings.args},
            values={(e.op, e.result): tuple(tuple(x) if isinstance(x, list) else x for x in e.spec)
                    for e in doc.shardings.values})
    status = Status(doc.solver.status) if doc.solver.status in {s.value for s in Status} else Status.HEURISTIC
    cert = Certificate(status, doc.solver.name, version=doc.solver.version, backend=doc.solver.backend,
                       objective=None if doc.solver.objective_ns is None else doc.solver.objective_ns * 1e-9,
                       bound=None if doc.solver.bound_ns is None else doc.solver.bound_ns * 1e-9,
                       gap=doc.solver.gap, options=dict(doc.solver.options), message=doc.solver.message)
    return Solution(lo.astype(np.int32), tuple(stages), cert,
                    schedule=None if doc.schedule.kind == "none" else doc.schedule.kind,
                    microbatches=doc.schedule.microbatches, shardings=shardings)

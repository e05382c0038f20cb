"""Plans written by hand: a plan document for an artifact, stage by stage — for experiments,
tests and benchmarks that need plan shapes no solver picks for a small model (a 4-stage pipeline
of a tiny MLP, a deliberately non-contiguous placement, a given Megatron layout).

The document is a real plan, built by :func:`planmap.plan.build.document` like a solved one: its
model input carries the artifact's sha256 (so a changed artifact makes it stale), and it is written
with :func:`planmap.plan.save`. Predictions and the certificate are empty (solver ``manual``,
status ``heuristic``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from planmap.plan import PlanDocument, save
from planmap.plan.build import document, plan_input, shardings_doc, stage_mesh
from planmap.plan.document import DevicePrediction, Predicted, SolverDoc, StageDoc

__all__ = ["stage", "plan_document", "write_plan", "device_names"]


def stage(devices: Sequence[str], ops: Sequence[tuple[int, int]], mesh: dict[str, int] | None = None) -> dict:
    """A stage: device names, op ranges ``[start, stop)``, optional sub-mesh ``{axis: size}``."""
    return {"devices": list(devices), "ops": [tuple(r) for r in ops], "mesh": mesh}


def device_names(n: int, start: int = 0, prefix: str = "d") -> list[str]:
    """``d0, d1, ...``: names for the devices of a hand-written plan."""
    return [f"{prefix}{i}" for i in range(start, start + n)]


def plan_document(artifact: Path, plan_dir: Path, stages: list[dict], *, data_args: Sequence[int],
                  mesh: dict[str, int] | None = None, devices: Sequence[str] | None = None,
                  args: dict[int, Sequence] | None = None, values: dict[tuple[int, int], Sequence] | None = None,
                  schedule: str = "none", microbatches: int = 1, objective: str = "throughput",
                  mode: str = "inference", name: str = "manual") -> PlanDocument:
    """A plan for ``artifact`` to be saved in ``plan_dir``.

    ``mesh``: the plan mesh ``{axis: size}`` (default one ``device`` axis over ``devices``, which
    default to the stages' devices in order; ``{}``: no axes, as :func:`planmap.plan.build.make_plan`
    writes a plan of several sharded stages); ``args``: ``{argument index: PartitionSpec entries}``;
    ``values``: ``{(op id, result number): PartitionSpec entries}``.
    """
    if devices is None:
        devices = []
        for st in stages:
            devices += [d for d in st["devices"] if d not in devices]
    devices = list(devices)
    mesh = {"device": len(devices)} if mesh is None else mesh
    return document(
        name=name, generator="planmap manual", objective=objective, variant=None, mode=mode,
        inputs=[plan_input("model", artifact, plan_dir)], data_args=data_args, mesh=list(mesh.items()),
        devices=devices, schedule=schedule, microbatches=microbatches,
        stages=[StageDoc(id=k, devices=st["devices"], ops=st["ops"], mesh=stage_mesh(list((st["mesh"] or {}).items())))
                for k, st in enumerate(stages)],
        shardings=shardings_doc(args or {}, values or {}),
        # every device listed: the plan emitter writes an empty list as a bare key (read back as null)
        predicted=Predicted(objective_ns=0, step_time_ns=0, bytes_moved=0,
                            devices=[DevicePrediction(device=d, memory=0, load_ns=0) for d in devices]),
        solver=SolverDoc(name="manual", status="heuristic"))


def write_plan(path: Path, artifact: Path, stages: list[dict], **kw) -> Path:
    """Write a hand-made plan for ``artifact`` to ``path`` (see :func:`plan_document`); return ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = plan_document(Path(artifact), path.parent, stages, **kw)
    return save(doc, path, header_lines=["Written by hand (planmap.plan.manual); no solver certificate."])

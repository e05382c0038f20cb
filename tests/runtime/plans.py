"""Hand-written plans for runtime tests (see planmap.plan.manual): each model's artifact is copied
next to its plans, so a test may change it without touching specs/models."""

from __future__ import annotations

import shutil
from pathlib import Path

from planmap.plan.manual import device_names as devs
from planmap.plan.manual import stage
from planmap.plan.manual import write_plan as _write

__all__ = ["MODELS", "stage", "devs", "write_plan"]

MODELS = Path(__file__).resolve().parents[2] / "specs" / "models"


def write_plan(tmp: Path, model: str, stages: list[dict], *, name: str = "plan", **kw) -> Path:
    """Copy ``specs/models/<model>.mlir`` into ``tmp`` and write a plan for it there; return the plan path."""
    tmp.mkdir(parents=True, exist_ok=True)
    artifact = tmp / f"{model}.mlir"
    if not artifact.exists():
        shutil.copy(MODELS / f"{model}.mlir", artifact)
    return _write(tmp / f"{model}-{name}.plan.yaml", artifact, stages, **kw)

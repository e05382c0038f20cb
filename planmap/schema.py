"""JSON Schemas of planmap's documents, generated from their pydantic models (never hand-written).

The files in ``schemas/`` are checked in so editors (yaml-language-server) and CI can use them
without planmap installed; a test regenerates them and fails, naming ``make schemas``, when one is
stale. Output is deterministic: sorted keys, two-space indent, trailing newline.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from planmap.io import write_atomic

__all__ = ["SCHEMAS", "generate", "render", "write_all", "stale"]

BASE_URL = "https://planmap.dev/schemas/"

# file name -> "module:ModelClass"; every user-facing document format is listed here.
SCHEMAS: dict[str, str] = {
    "planspec.schema.json": "planmap.spec.models:PlanSpec",
    "cluster.schema.json": "planmap.spec.models:Cluster",
    "plan.schema.json": "planmap.plan.document:PlanDocument",
    "opgraph.schema.json": "planmap.frontend.profiled:ProfiledGraph",
    "plan-check.schema.json": "planmap.plan.review:CheckResults",
    "plan-diff.schema.json": "planmap.plan.review:DiffReport",
}


def generate(filename: str) -> dict:
    """The JSON Schema (draft 2020-12) for one entry of :data:`SCHEMAS`."""
    module, attr = SCHEMAS[filename].split(":")
    model = getattr(importlib.import_module(module), attr)
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": BASE_URL + filename, **schema}


def render(filename: str) -> str:
    return json.dumps(generate(filename), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_all(out_dir: str | Path) -> list[Path]:
    """Write every schema into ``out_dir``; return the paths written."""
    out = Path(out_dir)
    return [write_atomic(out / name, render(name)) for name in sorted(SCHEMAS)]


def stale(out_dir: str | Path) -> list[str]:
    """Names of schemas in ``out_dir`` that are missing or differ from what the models generate."""
    out = Path(out_dir)
    return [name for name in sorted(SCHEMAS)
            if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != render(name)]

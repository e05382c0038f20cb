"""Schemas are generated and current; every field is documented; examples point at their schema."""

from __future__ import annotations

import json
import os
import subprocess
import typing

import pytest
from pydantic import BaseModel

from planmap import schema
from planmap.spec import models


def test_checked_in_schemas_are_current(root):
    stale = schema.stale(root / "schemas")
    assert not stale, f"stale schemas {stale}: regenerate with `make schemas`"


@pytest.mark.slow
def test_schema_bytes_are_the_same_in_processes_with_different_hash_seeds(root, tmp_path, planmap_exe):
    """Set and dict order must not leak into the schemas: two processes with different string hashing
    write the same bytes, and those are the checked-in files."""
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([planmap_exe, "schema", "--out", str(tmp_path / seed)], env=env, check=True,
                       capture_output=True)
    for name in schema.SCHEMAS:
        one, two = (tmp_path / "1" / name).read_bytes(), (tmp_path / "2" / name).read_bytes()
        assert one == two, f"{name} differs between PYTHONHASHSEED=1 and =2"
        assert one == (root / "schemas" / name).read_bytes(), f"{name} differs from schemas/{name}"
        json.loads(one)


def _models():
    seen, todo = set(), [models.PlanSpec, models.Cluster]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for f in m.model_fields.values():
            stack = [f.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
                stack.extend(typing.get_args(t))
    return sorted(seen, key=lambda m: m.__name__)


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_field_has_a_description_and_models_are_strict(model):
    assert model.model_config.get("extra") == "forbid"
    assert model.model_config.get("frozen") is True
    for name, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{name} has no description"


def test_cluster_field_accepts_path_or_inline_in_schema():
    s = schema.generate("planspec.schema.json")
    cluster = s["$defs"]["PlanSpecBody"]["properties"]["cluster"]
    assert {"type": "string"}.items() <= cluster["anyOf"][0].items()


def test_example_specs_start_with_schema_line(specs_dir):
    for path in sorted(specs_dir.glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../schemas/planspec.schema.json", path
    for path in sorted((specs_dir / "clusters").glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../../schemas/cluster.schema.json", path

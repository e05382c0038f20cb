"""Plan documents: deterministic bytes, round trip to decisions, format versions, staleness, atomic save."""

from __future__ import annotations

import types

import numpy as np
import pytest

from planmap import plan as plan_mod
from planmap.errors import InputError, StalePlanError
from planmap.evaluate import evaluate
from planmap.plan.build import op_ranges, ranges_to_ids
from planmap.plan.diff import diff_plans
from planmap.plan.document import FORMAT_VERSION
from planmap.problem import Certificate, Problem, Solution, Stage
from planmap.workloads.graphs import paper_topology, random_dag


@pytest.fixture
def setup(tmp_path):
    g = random_dag(40, seed=3)
    p = Problem.from_graph(g, paper_topology(4), objective="throughput", contiguous=False, microbatches=4)
    dev = np.repeat([1, 2, 3, 4], 10)
    s = Solution.from_devices(p, dev, Certificate("heuristic", "hand", objective=None), schedule="gpipe",
                              microbatches=4)
    (tmp_path / "spec.yaml").write_text("spec")
    (tmp_path / "model.json").write_text("model")
    spec = types.SimpleNamespace(path=tmp_path / "spec.yaml", cluster_path=None, model_path=tmp_path / "model.json")
    plans = tmp_path / "plans"
    return p, s, spec, plans / "x.plan.yaml"


def _write(p, s, spec, path):
    ev = evaluate(p, s)
    doc = plan_mod.make_plan(p, s.with_certificate(objective=ev.objective), ev, spec=spec, plan_path=path)
    plan_mod.save(doc, path, header_lines=plan_mod.header(spec.path, path))
    return doc


def test_ranges_roundtrip():
    ids = np.array([0, 1, 2, 5, 7, 8, 9])
    assert op_ranges(ids) == [(0, 3), (5, 6), (7, 10)]
    np.testing.assert_array_equal(ranges_to_ids(op_ranges(ids)), ids)


def test_plan_bytes_are_deterministic_and_relative(setup):
    p, s, spec, path = setup
    _write(p, s, spec, path)
    first = path.read_bytes()
    _write(p, s, spec, path)
    assert path.read_bytes() == first
    text = first.decode()
    assert str(path.parent.parent) not in text, "no absolute paths in a plan"
    assert "path: \"../spec.yaml\"" in text and "planmap solve ../spec.yaml -o x.plan.yaml" in text


def test_plan_roundtrip_to_solution(setup):
    p, s, spec, path = setup
    doc = _write(p, s, spec, path)
    loaded = plan_mod.load(path)
    assert loaded.document.model_copy(update={"digest": None}) == doc
    assert loaded.document.digest == plan_mod.document.body_digest(doc)
    back = plan_mod.to_solution(p, loaded.document)
    np.testing.assert_array_equal(back.node_device(), s.node_device())
    assert evaluate(p, back).objective == pytest.approx(evaluate(p, s).objective)


def test_stale_plan_refused_with_regenerate_command(setup):
    p, s, spec, path = setup
    _write(p, s, spec, path)
    (spec.model_path).write_text("model changed")
    with pytest.raises(StalePlanError, match=r"plan is stale: its model input \.\./model\.json changed.*planmap solve"):
        plan_mod.load(path)
    assert plan_mod.load(path, verify_inputs=False).document.name == p.name


def test_unknown_major_version_refused(setup):
    p, s, spec, path = setup
    _write(p, s, spec, path)
    path.write_text(path.read_text().replace(f'format_version: "{FORMAT_VERSION}"', 'format_version: "2.0"'))
    with pytest.raises(InputError, match="plan format 2.0 is not readable.*upgrade planmap"):
        plan_mod.load(path)
    path.write_text(path.read_text().replace('format_version: "2.0"', 'format_version: "1.7"') + "future_field: 1\n")
    assert plan_mod.load(path).document.format_version == "1.7"  # minor versions only add fields


def test_garbage_plan_is_a_clean_error(tmp_path):
    f = tmp_path / "bad.plan.yaml"
    f.write_text("stages: [\n")
    with pytest.raises(InputError):
        plan_mod.load(f)
    f.write_text("format_version: '1.0'\nname: 3\n")
    with pytest.raises(InputError, match="invalid plan"):
        plan_mod.load(f)


def test_save_is_atomic(setup, monkeypatch):
    p, s, spec, path = setup
    _write(p, s, spec, path)
    before = path.read_bytes()
    import os

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        _write(p, Solution.from_devices(p, np.full(40, 1), Certificate("heuristic", "x")), spec, path)
    assert path.read_bytes() == before
    assert [f.name for f in path.parent.iterdir()] == [path.name], "no temporary file left behind"


def test_diff_names_moved_ranges(setup):
    p, s, spec, path = setup
    a = _write(p, s, spec, path)
    dev = np.repeat([1, 2, 3, 4], 10)
    dev[10:15] = 1
    b = plan_mod.make_plan(p, Solution.from_devices(p, dev, Certificate("heuristic", "hand"), schedule="gpipe",
                                                    microbatches=4), evaluate(p, s), spec=spec, plan_path=path)
    d = diff_plans(a, b)
    assert d.changed
    assert d.moved == [(10, 15, "host0/acc1", "host0/acc0", "")]
    assert not diff_plans(a, a).changed


def test_replicated_stage_roundtrip(setup):
    p, _, spec, path = setup
    p = Problem.from_graph(p.graph, p.topology, objective="throughput", replication=True)
    s = Solution(np.repeat([0, 1], 20), (Stage((1,)), Stage((2, 3), (("data", 2),))), Certificate("heuristic", "h"))
    doc = _write(p, s, spec, path)
    assert doc.stages[1].mesh.axis_names == ["data"] and doc.stages[1].devices == ["host0/acc1", "host0/acc2"]
    back = plan_mod.to_solution(p, plan_mod.load(path).document)
    assert back.stages[1].devices == (2, 3)

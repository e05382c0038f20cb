"""Tampering with every field of a solved plan of each kind (issue 18, "Checked by"): a latency placement
(the latency IP), a pipeline placement (the pipeline DP), an SPMD sharding (a sharding baseline), a
whole-cluster plan and a DQN plan. Each edit is made as a forger who knows the format would make it: the
document is edited, its message re-rendered from the edited structured fields and its digest recomputed.
Every edit makes `planmap check` fail and the runtime refuse the plan.

Fields no edit here reaches, and why they are accepted: ``generator`` (which planmap wrote the plan: a plan
that still reproduces under this planmap is valid whoever wrote it), and a solver's own choices among
``solver.options`` that only solving again reveals (``q``, ``warm_start``, the DQN's ``evaluations`` /
``width`` / ``finetune_s``: `check --resolve`), and a ``status`` swapped between the proof-less statuses
(``heuristic``, ``time_limit``, ``interrupted``) with the message re-rendered: how a proof-less solve ended is
not re-derivable without solving again; likewise the solver's free-text ``remarks`` (the space it searched,
the candidates it judged): `check --resolve` compares them (tested below).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from planmap import plan as plan_mod
from planmap.cli import main
from planmap.plan.certificate import certificate_message
from planmap.plan.document import PlanDocument, ShardingEntry, StageMesh, parse, render

# proof-less statuses are interchangeable without solving again (module doc): an edit moves to a proven one
_STATUS = {"heuristic": "optimal", "time_limit": "optimal", "interrupted": "optimal", "optimal": "heuristic",
           "gap_reached": "heuristic", "bounded": "heuristic"}


_NEXT_SCHEDULE = {"none": "gpipe", "gpipe": "1f1b", "1f1b": "gpipe"}


def _bump(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v * 2 + 1
    if isinstance(v, str):
        return v + "x"
    if isinstance(v, dict):
        return {**v, "x": 1}
    return None


def _u(d: PlanDocument, **kw) -> PlanDocument:
    return d.model_copy(update=kw)


def _solver(d: PlanDocument, **kw) -> PlanDocument:
    return _u(d, solver=d.solver.model_copy(update=kw))


def _predicted(d: PlanDocument, **kw) -> PlanDocument:
    return _u(d, predicted=d.predicted.model_copy(update=kw))


def _stage0(d: PlanDocument, **kw) -> PlanDocument:
    return _u(d, stages=[d.stages[0].model_copy(update=kw), *d.stages[1:]])


def _device0(d: PlanDocument, **kw) -> PlanDocument:
    return _predicted(d, devices=[d.predicted.devices[0].model_copy(update=kw), *d.predicted.devices[1:]])


def _input(d: PlanDocument, role: str, **kw) -> PlanDocument:
    return _u(d, inputs=[i.model_copy(update=kw) if i.role == role else i for i in d.inputs])


def _other_device(d: PlanDocument) -> PlanDocument | None:
    st = d.stages[0]
    free = [x for x in d.mesh.devices if x not in st.devices]
    if free:
        return _stage0(d, devices=[free[0], *st.devices[1:]])
    return _stage0(d, devices=list(reversed(st.devices))) if len(st.devices) > 1 else None


def _stage_mesh(d: PlanDocument) -> PlanDocument | None:
    m, n = d.stages[0].mesh, len(d.stages[0].devices)
    if m is None:
        return _stage0(d, mesh=StageMesh(axis_names=["data"], axis_sizes=[n])) if n > 1 else None
    if len(m.axis_sizes) == 1 and n % 2 == 0 and n > 2:  # reshaped: the same devices as two axes
        return _stage0(d, mesh=StageMesh(axis_names=[*m.axis_names, "a1"], axis_sizes=[2, n // 2]))
    return _stage0(d, mesh=StageMesh(axis_names=[x + "x" for x in m.axis_names], axis_sizes=m.axis_sizes))


def _sharding(d: PlanDocument) -> PlanDocument:
    sh = d.shardings
    if sh.args:
        return _u(d, shardings=sh.model_copy(update={"args": sh.args[1:]}))
    return _u(d, shardings=sh.model_copy(update={"args": [ShardingEntry(arg=0, name="x", spec=[None])]}))


def _objective(d: PlanDocument) -> PlanDocument:
    o = d.objective
    if o.kind == "latency":
        return _u(d, objective=o.model_copy(update={"kind": "throughput", "variant": "max-load"}))
    return _u(d, objective=o.model_copy(update={"variant": "max-fw-plus-max-bw" if o.variant == "max-load"
                                                else "max-load"}))


Edit = Callable[[PlanDocument], "PlanDocument | None"]
EDITS: dict[str, Edit] = {
    "format_version": lambda d: _u(d, format_version="1.1"),
    "name": lambda d: _u(d, name=d.name + "-x"),
    "objective": _objective,
    "mode": lambda d: _u(d, mode="training" if d.mode == "inference" else "inference"),
    "inputs: model hash": lambda d: _input(d, "model", sha256="0" * 64),
    "inputs: spec path": lambda d: _input(d, "spec", path=next(i.path for i in d.inputs if i.role == "spec") + "x"),
    "inputs: cluster canonical hash": lambda d: _input(d, "cluster", canonical_sha256="1" * 64),
    "data_args": lambda d: _u(d, data_args=[] if d.data_args else [0]),
    "mesh axis names": lambda d: _u(d, mesh=d.mesh.model_copy(update={"axis_names": [x + "x" for x in
                                                                                     d.mesh.axis_names]})),
    "mesh axis sizes": lambda d: _u(d, mesh=d.mesh.model_copy(update={"axis_sizes": [s + 1 for s in
                                                                                     d.mesh.axis_sizes]})),
    "mesh devices": lambda d: (_u(d, mesh=d.mesh.model_copy(update={"devices": d.mesh.devices[::-1]}))
                               if len(d.mesh.devices) > 1 else None),
    "schedule kind": lambda d: _u(d, schedule=d.schedule.model_copy(update={"kind": _NEXT_SCHEDULE[d.schedule.kind]})),
    "schedule microbatches": lambda d: _u(d, schedule=d.schedule.model_copy(update={
        "microbatches": d.schedule.microbatches + 1})),
    "stage id": lambda d: _stage0(d, id=d.stages[0].id + len(d.stages)),
    "stage devices": _other_device,
    "stage ops": lambda d: _stage0(d, ops=[(a, b - 1) if b - a > 1 else (a, b) for a, b in d.stages[0].ops[:1]]
                                   + list(d.stages[0].ops[1:])),
    "stage mesh": _stage_mesh,
    "stage layers": lambda d: _stage0(d, layers=[*d.stages[0].layers, "x"]),
    "shardings: zero": lambda d: _u(d, shardings=d.shardings.model_copy(update={"zero": 0 if d.shardings.zero else 1})),
    "shardings: entry": _sharding,
    "predicted objective": lambda d: _predicted(d, objective_ns=d.predicted.objective_ns + 1),
    "predicted step time": lambda d: _predicted(d, step_time_ns=d.predicted.step_time_ns + 1),
    "predicted bytes moved": lambda d: _predicted(d, bytes_moved=d.predicted.bytes_moved + 1),
    "predicted device memory": lambda d: _device0(d, memory=d.predicted.devices[0].memory + 1),
    "predicted device capacity": lambda d: _device0(d, capacity=(d.predicted.devices[0].capacity or 0) + 1),
    "predicted device load": lambda d: _device0(d, load_ns=d.predicted.devices[0].load_ns + 1),
    "predicted device name": lambda d: _device0(d, device=d.predicted.devices[0].device + "x"),
    "solver name": lambda d: _solver(d, name="greedy" if d.solver.name != "greedy" else "even"),
    "solver version": lambda d: _solver(d, version=d.solver.version + "0"),
    "solver backend": lambda d: _solver(d, backend=None if d.solver.backend else "highs 1.16.0"),
    "solver status": lambda d: _solver(d, status=_STATUS[d.solver.status]),
    "solver objective": lambda d: _solver(d, objective_ns=(d.solver.objective_ns or 0) + 1),
    "solver bound": lambda d: _solver(d, bound_ns=None if d.solver.bound_ns is not None else d.solver.objective_ns),
    "solver gap": lambda d: _solver(d, gap=0.0 if d.solver.gap is None else d.solver.gap + 0.1),
    "solver message": lambda d: _solver(d, message=d.solver.message + " (reviewed)"),
    "solver option added": lambda d: _solver(d, options={**d.solver.options, "x": 1}),
}
OPTIONS = ("time_limit", "rel_gap", "threads", "seed", "backend", "checkpoint_sha256", "passthrough")
for _key in OPTIONS:
    EDITS[f"solver option {_key}"] = (lambda k: lambda d: _solver(d, options={**d.solver.options,
                                                                             k: _bump(d.solver.options[k])})
                                      if k in d.solver.options else None)(_key)
# "solver option added" is a free-form key (module doc: a solver's own options are --resolve's); not asserted
del EDITS["solver option added"]

KINDS = {"latency": None, "cluster": None, "placement": "dp", "sharding": "data-parallel",
         "dqn": "dqn"}


@pytest.fixture(scope="module")
def solved(root, tmp_path_factory) -> dict[str, Path]:
    """One solved plan per kind, beside a copy of the example specs (the solver named in each spec)."""
    base = tmp_path_factory.mktemp("kinds")
    shutil.copytree(root / "specs", base / "specs")
    (base / "plans").mkdir()
    out = {"latency": base / "plans" / "mlp-latency-cpu4acc.plan.yaml",
           "cluster": base / "plans" / "gpt-8dev.plan.yaml"}
    for path in out.values():
        shutil.copy(root / "plans" / path.name, path)
    return out


def _plan_of(kind: str, solved: dict[str, Path]) -> Path:
    if kind in solved:
        return solved[kind]
    specs = next(iter(solved.values())).parent.parent / "specs"
    spec = specs / f"gpt-8dev-{kind}.yaml"
    text = (specs / "gpt-8dev.yaml").read_text().replace("    name: auto\n", f"    name: {KINDS[kind]}\n")
    spec.write_text(text.replace("timeLimit: 30s", "timeLimit: 5s"))
    path = specs.parent / "plans" / f"{kind}.plan.yaml"
    assert main(["solve", str(spec), "-o", str(path), "-q"]) == 0
    solved[kind] = path
    return path


def _forged(doc: PlanDocument, edit: Edit) -> PlanDocument | None:
    edited = edit(doc)
    if edited is None or edited == doc:
        return None
    if edited.solver.message == doc.solver.message:  # a forger re-renders the message of the edited fields
        s = edited.solver
        edited = _solver(edited, message=certificate_message(s.status, s.objective_ns, s.bound_ns, s.gap, s.options))
    return edited


_PARAMS = [pytest.param(kind, edit, marks=[pytest.mark.slow] if kind == "dqn" else [])
           for kind in KINDS for edit in sorted(EDITS)]


def test_each_kind_solves_to_a_plan_that_passes(solved):
    for kind in KINDS:
        if kind != "dqn":
            assert plan_mod.check(_plan_of(kind, solved)).ok, kind


@pytest.mark.parametrize(("kind", "edit"), _PARAMS)
def test_every_field_edit_fails_check_and_run(solved, kind, edit, tmp_path):
    import planmap.runtime as rt
    from planmap.errors import PlanmapError

    src = _plan_of(kind, solved)
    text = src.read_text()
    doc = parse(text, str(src))
    edited = _forged(doc, EDITS[edit])
    if edited is None:
        pytest.skip(f"no {edit} to edit in a {kind} plan")
    path = src.with_name(f"{kind}-{edit.replace(' ', '_').replace(':', '')}.plan.yaml")
    path.write_text(render(edited, ["forged"]))
    try:  # the runtime's gate is `check` itself (planmap.plan.integrity.verify): its refusal is check's verdict
        with pytest.raises(PlanmapError, match=r"fails `planmap check`|changed|stale|invalid plan|not a"):
            rt.load(path)
    finally:
        path.unlink()


def test_a_forged_edit_fails_the_check_command_and_run(solved, capsys):
    path = _plan_of("cluster", solved).with_name("forged.plan.yaml")
    doc = parse(_plan_of("cluster", solved).read_text(), "x")
    path.write_text(render(_forged(doc, EDITS["solver option time_limit"]), ["forged"]))
    assert main(["check", str(path)]) == 1
    assert "option time_limit is 61.0, but the spec gives 30.0" in capsys.readouterr().err
    assert main(["run", str(path), "--steps", "1"]) == 1
    assert "refusing a plan that fails `planmap check`" in capsys.readouterr().err


def test_a_reshaped_replicated_mesh_fails_check(root, tmp_path):
    """An SPMD plan that splits nothing evaluates the same on any mesh shape: check requires the canonical one axis
    a0 (planmap.sharding.solution.mesh_axes). The committed sharding plans all split something, so the test takes
    hf-gpt2's (one axis a0 of 8 devices), replicates every value (its recorded predictions then differ too) and
    reshapes the mesh: the mesh rule must still name the stage."""
    shutil.copytree(root / "specs", tmp_path / "specs")
    fixtures = tmp_path / "tests" / "fixtures" / "thirdparty"
    shutil.copytree(root / "tests" / "fixtures" / "thirdparty", fixtures,
                    ignore=shutil.ignore_patterns("hf_bert*", "hf_t5*", "keras*", "hf-bert*", "hf-t5*"))
    path = fixtures / "plans" / "hf-gpt2.sharding.plan.yaml"
    doc = parse(path.read_text(), str(path))
    assert doc.stages[0].mesh.axis_names == ["a0"] and doc.mesh.axis_sizes == [8]
    none = [e.model_copy(update={"spec": [None] * len(e.spec)}) for e in doc.shardings.args]
    values = [e.model_copy(update={"spec": [None] * len(e.spec)}) for e in doc.shardings.values]
    two = {"axis_names": ["a0", "a1"], "axis_sizes": [2, 4]}
    edited = _u(_stage0(doc, mesh=StageMesh(**two)), mesh=doc.mesh.model_copy(update=two),
                shardings=doc.shardings.model_copy(update={"args": none, "values": values}))
    path.write_text(render(edited, ["forged"]))
    report = plan_mod.check(path)
    assert [m for m in report.problems if m.startswith("non-canonical mesh: stage 0 splits nothing")], report.problems


def test_edited_remarks_pass_plain_check_and_fail_check_resolve(solved):
    """The solver's remarks are for review; only solving again can tell them wrong (module doc)."""
    src = _plan_of("placement", solved)
    doc = parse(src.read_text(), str(src))
    path = src.with_name("remarks.plan.yaml")
    path.write_text(render(_solver(doc, remarks=doc.solver.remarks + " (and proven optimal on every cluster)"),
                           ["forged"]))
    try:
        assert plan_mod.check(path).ok
        report = plan_mod.check(path, resolve=True)
        assert not report.ok
        assert any("not reproducible" in m and "remarks" in m for m in report.stale), report.stale
    finally:
        path.unlink()

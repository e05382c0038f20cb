"""``constraints.remat: auto`` (issue 16 item 3): the throughput planner solves with and without activation
checkpointing and keeps the faster plan that fits memory — one choice per plan, recorded in the plan's
solver options, re-derived by ``check`` and shown by ``explain``."""

from __future__ import annotations

from pathlib import Path

import pytest

from planmap.errors import InfeasibleError, InputError
from tests.runtime.test_remat_runtime import SPEC, export_residual_mlp

ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A residual MLP whose activations (batch 256) outweigh its parameters: 8 MB per device without
    checkpointing, 4 MB with it."""
    return export_residual_mlp(tmp_path_factory.mktemp("remat-auto") / "resmlp.mlir", batch=256)


def _spec(model: Path, memory: str, remat: str) -> Path:
    cluster = model.parent / f"h100-{memory}.yaml"
    cluster.write_text((ROOT / "specs" / "clusters" / "h100-1x8.yaml").read_text().replace("memory: 80GiB",
                                                                                             f"memory: {memory}"))
    path = model.parent / f"remat-{remat}-{memory}.yaml"
    path.write_text(SPEC.format(model=model, cluster=cluster, remat=remat, microbatches=4))
    return path


def _plan(spec: Path):
    from planmap.api import plan

    p = plan(spec)
    p.save(spec.with_suffix(".plan.yaml"))
    return p


def test_tight_memory_chooses_remat_where_plain_does_not_fit(model, capsys):
    from planmap.cli import main
    from planmap.plan.integrity import check

    with pytest.raises(InfeasibleError, match="memory"):
        _plan(_spec(model, "6MiB", "false"))
    p = _plan(_spec(model, "6MiB", "auto"))
    doc = p.document
    assert doc.solver.options["remat"] is True
    assert all(st.remat for st in doc.stages)
    assert max(d.memory for d in doc.predicted.devices) <= min(d.capacity for d in doc.predicted.devices)
    forced = _plan(_spec(model, "6MiB", "true")).document
    assert forced.stages == doc.stages and forced.predicted == doc.predicted  # the same plan as remat: true
    report = check(p.path)
    assert report.ok, report.messages()
    assert main(["explain", str(p.path)]) == 0
    assert "activation checkpointing: on (chosen by the planner (remat: auto))" in capsys.readouterr().out


def test_ample_memory_chooses_no_remat(model):
    from planmap.plan.integrity import check

    p = _plan(_spec(model, "80GiB", "auto"))
    doc = p.document
    assert doc.solver.options["remat"] is False
    assert not any(st.remat for st in doc.stages)
    plain = _plan(_spec(model, "80GiB", "false")).document
    assert doc.stages == plain.stages and doc.predicted == plain.predicted
    assert check(p.path).ok


def test_check_rejects_a_choice_the_spec_does_not_allow(model):
    from planmap.assemble import plan_remat
    from planmap.spec import load_spec

    doc = _plan(_spec(model, "6MiB", "auto")).document
    assert plan_remat(load_spec(_spec(model, "6MiB", "auto")), doc) is True
    with pytest.raises(InputError, match="allows false"):
        plan_remat(load_spec(_spec(model, "6MiB", "false")), doc)

"""Activation checkpointing (issue 16 item 3): ``constraints.remat`` trades the stash of each repeated
layer's interior for running its forward again in the backward pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from planmap.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[2]


def _problem(tmp_path, remat: bool):
    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    specs = ROOT / "specs"
    text = (specs / "gpt-train-8dev.yaml").read_text().replace("models/", f"{specs}/models/")
    text = text.replace("clusters/", f"{specs}/clusters/").replace("    memoryHeadroom: 10%\n",
                                                                    f"    memoryHeadroom: 10%\n    remat: {remat}\n")
    path = tmp_path / f"remat-{remat}.yaml"
    path.write_text(text.replace("timeLimit: 60s", "timeLimit: 20s"))
    return build_problem(load_spec(path))


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("remat")
    return _problem(tmp, False), _problem(tmp, True)


def test_remat_trades_stash_for_recompute(problems):
    plain, remat = problems
    g = plain.graph
    inner = ~g.backward & (g.layer >= 0)
    assert inner.any() and remat.cost.remat and not plain.cost.remat
    assert remat.cost.stash_bytes.sum() < 0.5 * plain.cost.stash_bytes.sum()
    outside = ~inner & ~g.backward  # the embedding and the head keep what their backward reads
    assert (remat.cost.stash_bytes[outside] >= plain.cost.stash_bytes[outside]).all()
    assert remat.cost.compute[inner] == pytest.approx(2 * plain.cost.compute[inner])
    assert remat.cost.compute[~inner] == pytest.approx(plain.cost.compute[~inner])


def test_the_same_plan_needs_less_memory_and_more_time(problems):
    from planmap.problem import SolveOptions
    from planmap.solve import solve

    plain, remat = problems
    solution = solve(plain, "dp", SolveOptions(time_limit=20)).solution
    a, b = evaluate(plain, solution), evaluate(remat, solution)
    assert a.feasible and b.feasible
    assert b.memory.max() < a.memory.max()
    assert b.objective > a.objective
    # a stage without layers may keep more: the next stage's layer input, which its recomputation reads
    assert b.memory.sum() < 0.5 * a.memory.sum()

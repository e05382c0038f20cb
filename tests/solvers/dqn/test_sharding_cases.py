"""The shipped agent on the classic sharding cases (tests/fixtures/sharding_cases/, tools/export_sharding_cases.py):
where the cost model prefers data parallel or Megatron to every pipeline split, the agent's plan is that layout."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from planmap import frontend  # noqa: E402
from planmap.cluster import Topology  # noqa: E402
from planmap.evaluate import evaluate  # noqa: E402
from planmap.problem import Problem  # noqa: E402
from planmap.solvers.dqn import checkpoint  # noqa: E402
from planmap.solvers.dqn.env import baseline_plan  # noqa: E402
from planmap.solvers.dqn.solver import plan_with_agent  # noqa: E402
from planmap.solvers.dqn.space import action_name  # noqa: E402
from planmap.spec.loader import load_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _problem(name: str) -> Problem:
    topo = Topology.from_spec(load_cluster(ROOT / "specs" / "clusters" / "h100-1x8.yaml").spec)
    original = frontend.load_model(ROOT / "tests" / "fixtures" / "sharding_cases" / f"{name}.mlir")
    return Problem.from_graph(frontend.coarsen(original, "auto"), topo, original=original)


@pytest.mark.parametrize("name, layout, other", [("mlp_data_parallel", "data-parallel", "megatron"),
                                                 ("mlp_megatron", "megatron", "data-parallel")])
def test_agent_picks_the_spmd_layout_the_cost_model_prefers(name, layout, other):
    p = _problem(name)
    agent, _ = checkpoint.load()
    res, env = plan_with_agent(agent, p, 32)
    assert action_name(res.actions[0]) == layout
    chosen = evaluate(p, baseline_plan(p, layout))
    assert chosen.feasible and res.objective == pytest.approx(chosen.objective, rel=1e-9)
    # the pipelines the agent tried (its beam) and the other baseline are worse by far (or do not fit)
    assert res.beam_objective > 2.5 * res.objective
    alt = evaluate(p, baseline_plan(p, other))
    assert not alt.feasible or alt.objective > 1.01 * res.objective


def test_agent_finds_the_exact_pipeline_split_of_unseen_bert():
    """HF BERT (tests/fixtures/thirdparty/, never trained on): the exact DP's split interleaves two independent
    operations of a layer across a cut, which no grouping of the agent's topological order expresses; the last
    pass (single operations moved across the boundaries) reaches it within the budget."""
    from planmap.problem import SolveOptions
    from planmap.solvers import get

    topo = Topology.from_spec(load_cluster(ROOT / "specs" / "clusters" / "h100-1x8.yaml").spec)
    original = frontend.load_model(ROOT / "tests" / "fixtures" / "thirdparty" / "hf_bert.mlir")
    p = Problem.from_graph(frontend.coarsen(original, "auto"), topo, original=original)
    exact = evaluate(p, get("dp").solve(p, SolveOptions(time_limit=60))).objective
    agent, _ = checkpoint.load()
    res, _ = plan_with_agent(agent, p, 32)
    assert res.evaluations <= 32 and res.moved >= 1
    assert res.beam_objective > 1.2 * exact  # the beam's fixed-order plans alone are far from it
    ev = evaluate(p, res.plan)
    assert ev.feasible and res.objective == pytest.approx(ev.objective, rel=1e-12)
    assert res.objective <= exact * (1 + 1e-9)

"""The last pass of the agent's search (unit moves across stage boundaries): legal moves only, budget kept."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from planmap.evaluate import evaluate  # noqa: E402
from planmap.problem import Problem  # noqa: E402
from planmap.solvers.dqn.env import PlanEnv  # noqa: E402
from planmap.solvers.dqn.polish import moves, polish, stage_loads, units  # noqa: E402
from planmap.solvers.dqn.problems import gpu_cluster  # noqa: E402
from planmap.workloads.graphs import layered_dag  # noqa: E402
from planmap.workloads.pipelines import tight_memory  # noqa: E402


def _plan(training: bool):
    g = layered_dag(6, 3, seed=5, training=training)
    kw = dict(mode="training", schedule="1f1b", microbatches=4) if training else {}
    p = Problem.from_graph(g, gpu_cluster(1, 4, tight_memory(g, 4, slack=3.0, **kw)), **kw)
    env = PlanEnv(p)
    env.reset()
    acts = [1] + [0] * (env.space.num_groups - 1)
    for k in range(1, 4):  # four single-device stages, cut at about equal group counts
        acts[k * env.space.num_groups // 4] = 1
    for a in acts:
        *_, info = env.step(a)
    assert "objective" in info
    return p, env.plan, env.evaluation


@pytest.mark.parametrize("training", [False, True])
def test_every_ranked_move_keeps_the_plan_feasible(training):
    p, sol, ev = _plan(training)
    parts = units(p)
    ranked = moves(p, sol, stage_loads(sol, ev.load), parts)
    assert ranked
    for _, i, t in ranked[:20]:
        a = np.array(sol.assignment)
        a[parts[i]] = t
        moved = evaluate(p, type(sol)(a, sol.stages, sol.certificate, sol.schedule, sol.microbatches))
        assert moved.feasible, moved.violations


def test_polish_never_worsens_and_keeps_the_budget():
    p, sol, ev = _plan(True)
    seen: list[float] = []

    def judge(cand):
        if len(seen) >= 6:
            raise StopIteration
        e = evaluate(p, cand)
        seen.append(e.objective if e.feasible else float("inf"))
        return (e.objective, tuple(np.sort(e.load)[::-1].tolist())) if e.feasible else (float("inf"), ()), e.load

    with contextlib.suppress(StopIteration):  # the budget, or no better plan among those judged in a round
        polish(p, sol, (ev.objective, tuple(np.sort(ev.load)[::-1].tolist())), ev.load, judge, shortlist=2)
    assert 1 <= len(seen) <= 6 and all(np.isfinite(seen))

"""The DQN planner: gymnasium API, masks against evaluate, determinism, checkpoints, the solver."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from planmap.errors import PlanmapError  # noqa: E402
from planmap.evaluate import evaluate  # noqa: E402
from planmap.problem import Problem, SolveOptions  # noqa: E402
from planmap.solvers import get  # noqa: E402
from planmap.solvers.dqn import checkpoint  # noqa: E402
from planmap.solvers.dqn.agent import Agent, AgentConfig  # noqa: E402
from planmap.solvers.dqn.env import PlanEnv  # noqa: E402
from planmap.solvers.dqn.problems import gpu_cluster  # noqa: E402
from planmap.solvers.dqn.solver import plan_with_agent  # noqa: E402
from planmap.solvers.dqn.train import train  # noqa: E402
from planmap.workloads.graphs import layered_dag, paper_topology  # noqa: E402
from planmap.workloads.pipelines import tight_memory, workload  # noqa: E402


def _paper(training: bool = False) -> Problem:
    g = workload("gnmt-layers", training=training)
    kw = dict(mode="training", schedule="1f1b", microbatches=4) if training else {}
    return Problem.from_graph(g, paper_topology(4, memory=tight_memory(g, 4, **kw)), **kw)


def _gpus() -> Problem:
    g = layered_dag(8, 2, seed=3, training=True)
    kw = dict(mode="training", schedule="1f1b", microbatches=4)
    return Problem.from_graph(g, gpu_cluster(2, 4, tight_memory(g, 8, slack=3.0, **kw)), replication=True, **kw)


def test_env_passes_gymnasium_checker():
    from gymnasium.utils.env_checker import check_env

    env = PlanEnv(_paper())
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert info["action_mask"].dtype == bool and info["action_mask"].any()


@pytest.mark.parametrize("make", [_paper, lambda: _paper(True), _gpus])
def test_masked_episodes_are_feasible_and_return_the_objective(make):
    """Random valid actions: every finished plan is feasible under evaluate, and the return is -objective/ideal."""
    p = make()
    env = PlanEnv(p)
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(8):
        obs, info = env.reset()
        total, done = 0.0, False
        while not done:
            a = int(rng.choice(np.flatnonzero(env.action_masks())))
            obs, r, done, _, info = env.step(a)
            total += r
        if "objective" in info:
            finished += 1
            ev = evaluate(p, env.plan)
            assert ev.feasible, ev.violations
            assert math.isclose(total, -ev.objective / env.features.ideal, rel_tol=1e-9)
    assert finished >= 6


def test_invalid_action_ends_the_episode_with_a_penalty():
    env = PlanEnv(_paper())
    env.reset()
    _, r, done, _, info = env.step(0)  # "continue" before any stage is open
    assert done and r < 0 and info.get("invalid")


def test_same_seed_same_training_and_plan():
    p = _gpus()

    def run():
        agent = Agent(AgentConfig(batch=16, eps_decay=100), seed=7)
        train(agent, p, episodes=4, seed=7)
        res, _ = plan_with_agent(agent, p, evaluations=6, seconds=600)  # no time cut: deterministic
        sol = res.plan
        return res.objective, res.evaluations, sol.assignment.tolist(), [s.devices for s in sol.stages]

    first = run()
    assert first == run()
    assert 1 <= first[1] <= 6  # the search stays within its evaluate budget


def test_search_beats_the_greedy_episode_within_its_budget():
    """The agent's search judges the greedy plan's neighbours too: never worse than the greedy episode, a
    feasible plan, at most the evaluate calls it was given."""
    from planmap.solvers.dqn.train import rollout

    p = _paper(True)
    agent = Agent(AgentConfig(batch=16), seed=0)
    greedy = rollout(agent, PlanEnv(p))
    res, _ = plan_with_agent(agent, p, evaluations=12, seconds=600)
    assert res.evaluations <= 12 and res.plan is not None
    assert res.objective <= greedy * (1 + 1e-9)
    ev = evaluate(p, res.plan)
    assert ev.feasible and math.isclose(ev.objective, res.objective)
    assert res.history == sorted(res.history, reverse=True)  # best so far, one entry per evaluate call


def test_solver_answers_a_feasible_plan_with_a_certificate(tmp_path):
    p = _paper()
    agent = Agent(AgentConfig(batch=16), seed=0)
    train(agent, p, episodes=4)
    path = tmp_path / "a.pt"
    sha = checkpoint.save(agent, path)
    sol = get("dqn").solve(p, SolveOptions(time_limit=30, passthrough={"checkpoint": str(path), "evaluations": 4,
                                                                       "exact": True}))
    ev = evaluate(p, sol)
    c = sol.certificate
    assert ev.feasible and math.isclose(c.objective, ev.objective)
    assert c.options["checkpoint_sha256"] == sha
    assert "evaluations" in c.message and "reward" in c.message
    assert c.bound is not None and c.bound <= ev.objective * (1 + 1e-9) and c.gap is not None


def test_corrupted_or_mismatched_checkpoint_is_a_clear_error(tmp_path):
    import torch

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="corrupted"):
        checkpoint.load(bad)
    good = tmp_path / "good.pt"
    checkpoint.save(Agent(), good)
    good_bytes = good.read_bytes()
    (tmp_path / "cut.pt").write_bytes(good_bytes[: len(good_bytes) // 2])
    with pytest.raises(checkpoint.CheckpointError, match="corrupted"):
        checkpoint.load(tmp_path / "cut.pt")
    blob = torch.load(good, weights_only=True)
    blob["obs_dim"] = 3
    torch.save(blob, tmp_path / "other.pt")
    with pytest.raises(checkpoint.CheckpointError, match="features"):
        checkpoint.load(tmp_path / "other.pt")
    blob["obs_dim"], blob["format"] = checkpoint.OBS_DIM, "something-else"
    torch.save(blob, tmp_path / "fmt.pt")
    with pytest.raises(checkpoint.CheckpointError, match="format"):
        checkpoint.load(tmp_path / "fmt.pt")
    with pytest.raises(PlanmapError, match="does not exist"):
        get("dqn").solve(_paper(), SolveOptions(passthrough={"checkpoint": str(tmp_path / "missing.pt")}))


def test_shipped_checkpoint_is_small_and_loads():
    path = checkpoint.shipped_path()
    assert path.is_file() and path.stat().st_size <= 5 * 2**20
    agent, meta = checkpoint.load()
    assert meta.get("episodes", 0) > 0


def test_agent_cli_trains_writes_a_curve_and_evaluates(tmp_path):
    pytest.importorskip("matplotlib")
    from typer.testing import CliRunner

    from planmap.cli import app

    ck, png = tmp_path / "ck.pt", tmp_path / "curve.png"
    r = CliRunner().invoke(app, ["agent", "train", "-o", str(ck), "--episodes", "2", "--png", str(png)])
    assert r.exit_code == 0, r.output
    assert ck.is_file() and png.stat().st_size > 0 and "2 episodes" in r.output
    r = CliRunner().invoke(app, ["agent", "eval", "--checkpoint", str(ck), "--held-out", "1", "--no-exact",
                                 "--evaluations", "1"])
    assert r.exit_code == 0, r.output
    assert "bert3-ops" in r.output


def test_checkpoint_is_a_plan_input_so_a_changed_checkpoint_makes_the_plan_stale(tmp_path):
    from typer.testing import CliRunner

    from planmap import plan as plan_mod
    from planmap.assemble import build_problem
    from planmap.cli import app
    from planmap.spec import load_spec

    root = Path("specs").resolve()  # the spec names the DQN (check: the solver the spec allows, its options)
    spec_path = tmp_path / "gpt-dqn.yaml"
    spec_path.write_text((root / "gpt-8dev.yaml").read_text().replace("name: auto", "name: dqn")
                         .replace("models/", f"{root / 'models'}/").replace("clusters/", f"{root / 'clusters'}/"))
    spec = load_spec(spec_path)
    problem = build_problem(spec)
    ck = tmp_path / "agent.pt"
    checkpoint.save(Agent(seed=0), ck)
    opts = SolveOptions.from_spec(spec.spec.solver)
    sol = get("dqn").solve(problem, replace(opts, passthrough={"checkpoint": str(ck), "evaluations": 2}))
    sol = sol.with_certificate(options={**sol.certificate.options, "time_limit": opts.time_limit,  # as solve does
                                        "rel_gap": opts.rel_gap, "threads": opts.threads, "seed": opts.seed})
    path = tmp_path / "gpt.plan.yaml"
    doc = plan_mod.make_plan(problem, sol, evaluate(problem, sol), spec=spec, plan_path=path)
    assert [i.role for i in doc.inputs][-1] == "checkpoint"
    assert doc.inputs[-1].sha256 == checkpoint.sha256(ck)
    plan_mod.save(doc, path, header_lines=plan_mod.header(spec_path, path, []))
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 0, r.output
    checkpoint.save(Agent(seed=1), ck)  # another network: the plan no longer says what this checkpoint gives
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 2 and "checkpoint" in r.output, r.output


def test_finer_grouping_holds_every_plan_of_the_beam():
    """The improvement pass works in a finer grouping cut wherever the beam's grouping cuts: a coarse action
    sequence maps to the same plan (same assignment, same devices), and the fine masks allow it."""
    from planmap.solvers.dqn.search import _finer, _refiner

    p = _paper(True)
    coarse = PlanEnv(p, 8)
    fine = _finer(coarse, 64)
    assert fine.space.num_groups > coarse.space.num_groups
    assert set(coarse.space.cut_positions) <= set(fine.space.cut_positions)
    refine = _refiner(coarse, fine)
    rng = np.random.default_rng(1)
    for _ in range(6):
        coarse.reset()
        acts, done, info = [], False, {}
        while not done:
            a = int(rng.choice(np.flatnonzero(coarse.action_masks())))
            acts.append(a)
            _, _, done, _, info = coarse.step(a)
        if "objective" not in info or acts[-1] > 8:
            continue
        fine.reset()
        for a in refine(tuple(acts)):
            assert fine.action_masks()[a]
            _, _, done, _, finfo = fine.step(a)
        assert finfo["objective"] == info["objective"]
        assert fine.plan.assignment.tolist() == coarse.plan.assignment.tolist()


def test_replay_fills_each_episodes_return_to_go():
    from planmap.solvers.dqn.agent import Replay
    from planmap.solvers.dqn.features import OBS_DIM
    from planmap.solvers.dqn.space import NUM_ACTIONS

    r = Replay(8)
    obs, mask = np.zeros(OBS_DIM, np.float32), np.zeros(NUM_ACTIONS, bool)
    slots = [r.add(obs, 1, rew, obs, mask, 0.0) for rew in (-0.5, 0.0, -1.25)]
    assert np.isnan(r.ret[slots]).all()  # unknown until the episode ends
    r.close_episode(slots)
    assert r.ret[slots].tolist() == [-1.75, -1.25, -1.25]


def test_margin_loss_makes_a_demonstrated_plan_the_greedy_one():
    """The DQfD margin loss fine-tuning adds on the best plans found: 100 updates on one episode's steps make its
    actions the greedy ones (the mask is the observation's tail), so the beam (greedy episode first) proposes it."""
    from planmap.solvers.dqn.agent import Replay
    from planmap.solvers.dqn.space import NUM_ACTIONS
    from planmap.solvers.dqn.train import run_episode

    p = _gpus()
    env = PlanEnv(p)
    agent = Agent(AgentConfig(batch=16, train_every=1, return_bound=True), seed=0)
    replay = Replay(1000)
    steps: list[tuple[np.ndarray, int]] = []

    def record(step, mask, rng=np.random.default_rng(3)):
        a = int(rng.choice(np.flatnonzero(mask)))
        steps.append((env._obs(), a))
        return a

    _, obj = run_episode(agent, env, replay, 0.0, learn=False, policy=record)
    assert math.isfinite(obj)
    demo = (np.stack([o for o, _ in steps]), np.array([a for _, a in steps], np.int64))
    assert all(agent.update(replay, demo) > 0 for _ in range(100))
    actions = [agent.act(o, o[-NUM_ACTIONS:] > 0.5, eps=0.0) for o, _ in steps]
    assert actions == demo[1].tolist()


def test_finetuning_plays_the_search_and_counts_its_evaluations():
    from planmap.solvers.dqn.finetune import finetune

    p = _paper(True)
    agent = Agent(AgentConfig(batch=16), seed=0)
    log = finetune(agent, p, 600, rounds=1, evaluations=8, explore=1, updates=16)
    assert log.returns and log.evaluations == sum(np.isfinite(log.objectives)) >= 1
    assert agent.config.return_bound and agent.updates == 16

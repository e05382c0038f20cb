"""Pre-training on a distribution of problems (or plain Q-learning on one), within a time (or episode) budget.

Each episode runs the ε-greedy agent through one environment and stores its transitions (and, when it ends,
their returns to go); after every step one Double-DQN update is made. A fixed problem builds its environment
once. The learning curve is the return of every episode, smoothed. Fine-tuning on a target is
:mod:`.finetune`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from planmap.problem import Problem

from .agent import Agent, Replay
from .env import PlanEnv

__all__ = ["TrainLog", "run_episode", "train", "rollout"]


@dataclass
class TrainLog:
    returns: list[float] = field(default_factory=list)
    objectives: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    evaluations: int = 0
    steps: int = 0
    seconds: float = 0.0


def run_episode(agent: Agent, env: PlanEnv, replay: Replay | None, eps: float | None, log: TrainLog | None = None,
                learn: bool = True, policy: Callable[[int, np.ndarray], int | None] | None = None,
                ) -> tuple[float, float]:
    """One episode; with ``replay`` its transitions are stored (their returns to go when it ends) and
    (``learn``) one update per step is made. ``policy(step, mask)`` may dictate an action (None: the agent's
    ε-greedy choice). Returns (return, objective: inf when the episode ended without a plan)."""
    obs, info = env.reset()
    mask = info["action_mask"]
    total, done = 0.0, False
    info = {}
    slots: list[int] = []
    while not done:
        if not mask.any():
            break
        a = policy(env.state.next_group, mask) if policy is not None else None
        a = agent.act(obs, mask, eps) if a is None else a
        nxt, r, done, _, info = env.step(a)
        nmask = info.get("action_mask", np.zeros_like(mask))
        total += r
        if replay is not None:
            slots.append(replay.add(obs, a, r, nxt, nmask, float(done)))
            agent.steps += 1
            if learn:
                loss = agent.update(replay)
                if log is not None and loss:
                    log.losses.append(loss)
        obs, mask = nxt, nmask
    if replay is not None:
        replay.close_episode(slots)
    return total, float(info.get("objective", math.inf))


def rollout(agent: Agent, env: PlanEnv) -> float:
    """The greedy plan's objective (inf when the greedy episode hits a dead end)."""
    return run_episode(agent, env, None, 0.0)[1]


def train(agent: Agent, problems: Callable[[np.random.Generator], Problem] | Problem, *, episodes: int | None = None,
          seconds: float | None = None, seed: int = 0, mask_actions: bool = True, max_groups: int = 32,
          on_episode: Callable[[int, TrainLog], None] | None = None) -> TrainLog:
    """Train ``agent`` on ``problems`` (one problem, or a sampler) for ``episodes`` or ``seconds``, whichever
    ends first (at least one must be given)."""
    if episodes is None and seconds is None:
        raise ValueError("train requires episodes or seconds")
    rng = np.random.default_rng(seed)
    replay = Replay(agent.config.replay)
    log = TrainLog()
    t0 = time.perf_counter()
    fixed = None
    if isinstance(problems, Problem):
        fixed = PlanEnv(problems, max_groups, mask_actions)
    ep = 0
    while (episodes is None or ep < episodes) and (seconds is None or time.perf_counter() - t0 < seconds):
        env = fixed if fixed is not None else PlanEnv(problems(rng), max_groups, mask_actions)  # type: ignore[operator]
        before = env.evaluations
        ret, obj = run_episode(agent, env, replay, None, log)
        log.returns.append(ret)
        log.objectives.append(obj)
        log.evaluations += env.evaluations - before
        ep += 1
        log.steps = agent.steps
        if on_episode is not None:
            on_episode(ep, log)
    log.seconds = time.perf_counter() - t0
    return log


def learning_curve(log: TrainLog, path, title: str = "DQN learning curve") -> None:
    """Episode returns and their moving average, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = np.asarray(log.returns, float)
    r = np.where(np.isfinite(r), r, np.nan)
    w = max(1, len(r) // 30)
    smooth = np.convolve(np.nan_to_num(r, nan=-20.0), np.ones(w) / w, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(r, ".", ms=2, alpha=0.4, label="episode return")
    ax.plot(np.arange(len(smooth)) + w - 1, smooth, label=f"moving average ({w})")
    ax.set_xlabel("episode")
    ax.set_ylabel("return (- objective / ideal load)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

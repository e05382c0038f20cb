"""Fine-tuning on one target within a time budget: the search's plans as episodes, return-bounded targets.

Plain ε-greedy Q-learning on the target (what pre-training does) rarely changes what the agent's search
finds: in a few hundred episodes its random walks seldom meet a plan better than the one the beam already
ranks first, and one-step targets take thousands of updates to carry a better plan's value back to the
first decision. The agent's own search finds better plans of the same action space quickly — its
improvement pass follows the cost model's stage loads — so fine-tuning is expert iteration:

* each round runs the search in the agent's grouping (the greedy episode and the beam with the current
  Q-values, then the improvement pass; ``evaluations`` calls) and a few ε-greedy episodes; every episode
  they play, with its rewards, goes into the replay buffer — the beam's top plans too, so its over-estimates
  are corrected;
* then Double-DQN updates whose targets are at least each transition's own return to go
  (``AgentConfig.return_bound``: the environment is deterministic and undiscounted, so that return is a lower
  bound of the optimal Q-value), plus DQfD's margin loss on the steps of the four best plans found, so that
  their actions become the greedy ones: a fine-tuned agent's search judges its greedy episode first.

The rounds repeat until the time (or ``rounds``) is spent: the next beam starts from the better plans and the
search climbs further from them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from planmap.problem import Problem

from .agent import Agent, Replay
from .env import PlanEnv
from .search import search
from .space import NUM_ACTIONS
from .train import TrainLog, run_episode

__all__ = ["finetune"]


class _Recorder(PlanEnv):
    """The environment the search and the exploration play in: every step goes into ``replay``, and each
    episode's return to go when it ends."""

    def __init__(self, problem: Problem, max_groups: int, replay: Replay, log: TrainLog,
                 on_episode: Callable[[int, TrainLog], None] | None):
        super().__init__(problem, max_groups)
        self.replay, self.log, self.on_episode = replay, log, on_episode
        self._last: np.ndarray | None = None
        self._slots: list[int] = []
        self._return = 0.0
        self._steps: list[tuple[np.ndarray, int]] = []
        self.elites: dict[tuple[int, ...], tuple[float, list[tuple[np.ndarray, int]]]] = {}  # the best plans' steps

    def demo(self, rng: np.random.Generator, k: int, keep: int = 4) -> tuple[np.ndarray, np.ndarray] | None:
        """``k`` steps drawn from the ``keep`` best plans found (observations and actions), or None."""
        best = sorted(self.elites.values(), key=lambda e: e[0])[:keep]
        steps = [st for _, sts in best for st in sts]
        if not steps:
            return None
        pick = rng.integers(0, len(steps), k)
        return np.stack([steps[i][0] for i in pick]), np.array([steps[i][1] for i in pick], np.int64)

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self._last, self._slots, self._return, self._steps = obs, [], 0.0, []
        return obs, info

    def step(self, action):
        before = self.evaluations
        obs, r, done, trunc, info = super().step(action)
        mask = info.get("action_mask", np.zeros(NUM_ACTIONS, bool))
        self._slots.append(self.replay.add(self._last, int(action), r, obs, mask, float(done)))
        self._steps.append((self._last, int(action)))
        self._last, self._return = obs, self._return + r
        self.log.evaluations += self.evaluations - before
        self.log.steps += 1
        if done:
            self.replay.close_episode(self._slots)
            self.log.returns.append(self._return)
            obj = float(info.get("objective", math.inf))
            self.log.objectives.append(obj)
            if math.isfinite(obj):
                self.elites[tuple(a for _, a in self._steps)] = (obj, self._steps)
            if self.on_episode is not None:
                self.on_episode(len(self.log.returns), self.log)
        return obs, r, done, trunc, info


def finetune(agent: Agent, problem: Problem, seconds: float, *, seed: int = 0, max_groups: int = 32,
             width: int = 32, evaluations: int = 256, explore: int = 16, updates: int = 1024, lr: float = 1e-3,
             rounds: int | None = None, on_episode: Callable[[int, TrainLog], None] | None = None) -> TrainLog:
    """Fine-tune ``agent`` on ``problem`` for ``seconds`` (or ``rounds``; see the module doc): each round one
    search of ``evaluations`` calls, ``explore`` ε-greedy episodes, then ``updates`` gradient steps."""
    agent.config = replace(agent.config, train_every=1, return_bound=True, lr=lr)
    agent.opt = type(agent.opt)(agent.online.parameters(), lr=lr)
    agent.rng = np.random.default_rng(seed)
    log = TrainLog()
    replay = Replay(max(agent.config.replay, 50000))
    env = _Recorder(problem, max_groups, replay, log, on_episode)
    t0 = time.perf_counter()

    def left() -> float:
        return seconds - (time.perf_counter() - t0)

    done_rounds = 0
    while left() > 0 and (rounds is None or done_rounds < rounds):
        search(agent, env, evaluations=evaluations, width=width, seconds=max(0.0, min(left(), 30.0)),
               fine_groups=0, greedy=True)
        for _ in range(explore):
            if left() <= 0:
                break
            run_episode(agent, env, None, 0.2)
        for _ in range(updates):
            if rounds is None and left() <= 0:
                break
            loss = agent.update(replay, env.demo(agent.rng, agent.config.batch))
            if loss:
                log.losses.append(loss)
        done_rounds += 1
    log.seconds = time.perf_counter() - t0
    return log

"""``PlanEnv``: the gymnasium environment of one ``Problem`` — an episode decides the layer groups in order.

Observation: :mod:`.features` (a float vector of :data:`OBS_DIM`); actions: ``Discrete(NUM_ACTIONS)``
(continue the open stage, cut to a new stage on a submesh of 1, 2, 4, … devices, or — at the first step,
when the model is a StableHLO artifact — one of the SPMD baselines as the whole plan); ``action_masks()``
gives the valid ones (the convention of sb3-contrib's MaskablePPO).

Reward, in units of the *ideal load* (see :mod:`.features`), summing to minus the plan's objective:
each cut pays the growth of the largest closed-stage load (compute per replica, from the cost model,
available as soon as the stage closes); the last step pays the rest of ``evaluate``'s objective of the
complete plan, so the return is exactly ``-evaluate(plan).objective / ideal``. An invalid action (the
env checker samples unmasked actions) or a dead end (no valid action left) ends the episode with
``-INVALID``.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from planmap.errors import PlanmapError
from planmap.evaluate import Evaluation, evaluate
from planmap.problem import Problem, Solution

from .features import OBS_DIM, Features
from .space import BASELINE_ACTIONS, CPU, NUM_ACTIONS, Partial, PipelineSpace

__all__ = ["PlanEnv", "INVALID"]

INVALID = 20.0


def baseline_plan(problem: Problem, name: str) -> Solution:
    """The whole-plan SPMD baseline ``name`` (data parallel, FSDP, Megatron)."""
    from planmap.solvers.sharding import baselines

    fn = {"data-parallel": baselines.data_parallel, "fsdp": baselines.fsdp, "megatron": baselines.megatron}[name]
    return fn(problem)[0]


class PlanEnv(gym.Env):
    """Decide a plan for ``problem`` group by group (see the module doc)."""

    metadata = {"render_modes": []}

    def __init__(self, problem: Problem, max_groups: int = 32, mask_actions: bool = True,
                 must_cuts: tuple[int, ...] = ()):
        self.problem = problem
        self.space = PipelineSpace(problem, max_groups, must_cuts)
        self.features = Features(self.space)
        self.mask_actions = mask_actions
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (OBS_DIM,), np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.evaluations = 0
        self.state = Partial()
        self.best_closed = 0.0
        self.plan: Solution | None = None
        self.objective = math.inf
        self.evaluation: Evaluation | None = None  # evaluate's verdict on the last complete plan

    # ------------------------------------------------------------------------------- gym API
    def action_masks(self) -> np.ndarray:
        """Valid actions now (all pipeline actions the space knows of, when masking is off)."""
        m = self.space.mask(self.state).copy()
        if not self.mask_actions:
            m = np.zeros(NUM_ACTIONS, bool)
            if self.state.next_group < self.space.num_groups:
                for a in range(1, CPU + 1):
                    m[a] = self.space.cut_devices(self.state, a) is not None
                m[0] = self.state.num_stages > 0
        return m

    def _obs(self) -> np.ndarray:
        return self.features.observe(self.state, self.action_masks())

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.state = Partial()
        self.best_closed = 0.0
        self.plan, self.objective = None, math.inf
        return self._obs(), {"action_mask": self.action_masks()}

    def step(self, action):
        a = int(action)
        mask = self.space.mask(self.state)
        done_info = {"action_mask": np.zeros(NUM_ACTIONS, bool)}
        if not (0 <= a < NUM_ACTIONS) or not self._possible(a, mask):
            return self._obs(), -INVALID, True, False, {**done_info, "invalid": True}
        if a > CPU:
            return self._finish_baseline(BASELINE_ACTIONS[a - 1 - CPU], done_info)
        self.best_closed, reward = self.advance(self.state, self.best_closed, a)
        if self.state.next_group == self.space.num_groups:
            sol = self.space.solution(self.state)
            ev = evaluate(self.problem, sol)
            self.evaluations += 1
            if not ev.feasible or not math.isfinite(ev.objective):
                return self._obs(), -INVALID, True, False, {**done_info, "invalid": True,
                                                             "violations": ev.violations}
            self.plan, self.objective, self.evaluation = sol, ev.objective, ev
            return self._obs(), reward - (ev.objective / self.features.ideal - self.best_closed), True, False, \
                {**done_info, "objective": ev.objective}
        nxt = self.action_masks()
        if not nxt.any():
            return self._obs(), -INVALID, True, False, {**done_info, "dead_end": True}
        return self._obs(), reward, False, False, {"action_mask": nxt}

    def advance(self, state: Partial, best_closed: float, a: int) -> tuple[float, float]:
        """Apply pipeline action ``a`` to ``state``; returns (the largest closed-stage load, in ideal loads, and
        the shaping reward: minus its growth). The search replays plans with it without calling evaluate."""
        closed = self.space.apply(state, a)
        if closed is not None and state.next_group < self.space.num_groups:
            grow = max(0.0, closed / self.features.ideal - best_closed)
            return best_closed + grow, -grow
        return best_closed, 0.0

    def _possible(self, a: int, mask: np.ndarray) -> bool:
        """Masked: the space's mask; unmasked: anything evaluate could judge (devices left, a stage open)."""
        if self.mask_actions:
            return bool(mask[a])
        if a > CPU:
            return bool(mask[a])
        if a == 0:
            return self.state.num_stages > 0
        return self.space.cut_devices(self.state, a) is not None

    def _finish_baseline(self, name: str, done_info: dict):
        try:
            sol = baseline_plan(self.problem, name)
        except PlanmapError:
            return self._obs(), -INVALID, True, False, {**done_info, "invalid": True}
        ev = evaluate(self.problem, sol)
        self.evaluations += 1
        if not ev.feasible or not math.isfinite(ev.objective):
            return self._obs(), -INVALID, True, False, {**done_info, "invalid": True}
        self.state.next_group = self.space.num_groups
        self.plan, self.objective, self.evaluation = sol, ev.objective, ev
        return self._obs(), -ev.objective / self.features.ideal, True, False, {**done_info, "objective": ev.objective}

"""Double DQN with a target network, replay, an ε schedule and action masking (torch, CPU, deterministic).

The online network picks the next action among the valid ones, the target network values it
(van Hasselt et al.'s Double DQN); invalid actions get -inf before every argmax, in acting and in the
targets alike. With ``return_bound`` the target is never below the return the transition's own episode went
on to get: the environment is deterministic and undiscounted, so that return is a lower bound of the optimal
Q-value, and it carries the value of the best plans seen to their first step at once instead of one bootstrap
per update (self-imitation; fine-tuning on one target uses it). Seeds fix numpy, torch and the replay sampling;
torch runs single-threaded with deterministic algorithms, so the same seed gives the same network and plans.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .features import OBS_DIM
from .space import NUM_ACTIONS

__all__ = ["AgentConfig", "Agent", "Replay", "deterministic"]


def deterministic(seed: int) -> None:
    """Single thread, deterministic kernels, seeded torch."""
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class AgentConfig:
    hidden: int = 64
    lr: float = 1e-3
    gamma: float = 1.0  # episodes are short and the return is the plan's objective: no discount
    batch: int = 64
    train_every: int = 4  # environment steps per gradient step
    replay: int = 20000
    target_every: int = 100  # gradient steps between target-network copies
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay: int = 3000  # environment steps from eps_start to eps_end (linear)
    return_bound: bool = False  # targets at least the episode's return from the transition on (see the module doc)


class Replay:
    """A ring buffer of (obs, action, reward, next obs, next mask, done, return to go: NaN until the episode
    ends, see :meth:`close_episode`)."""

    def __init__(self, size: int):
        self.obs = np.zeros((size, OBS_DIM), np.float32)
        self.nxt = np.zeros((size, OBS_DIM), np.float32)
        self.mask = np.zeros((size, NUM_ACTIONS), bool)
        self.act = np.zeros(size, np.int64)
        self.rew = np.zeros(size, np.float32)
        self.done = np.zeros(size, np.float32)
        self.ret = np.full(size, np.nan, np.float32)
        self.size, self.n, self.i = size, 0, 0

    def add(self, obs, act, rew, nxt, mask, done) -> int:
        """Store one transition; returns its slot."""
        i = self.i
        self.obs[i], self.act[i], self.rew[i], self.nxt[i], self.mask[i], self.done[i] = obs, act, rew, nxt, mask, done
        self.ret[i] = np.nan
        self.i = (i + 1) % self.size
        self.n = min(self.n + 1, self.size)
        return i

    def close_episode(self, slots: list[int]) -> None:
        """Fill in the return to go of an ended episode's transitions (``slots`` in step order)."""
        acc = 0.0
        for i in reversed(slots):
            acc += float(self.rew[i])
            self.ret[i] = acc

    def sample(self, rng: np.random.Generator, k: int):
        idx = rng.integers(0, self.n, k)
        return (self.obs[idx], self.act[idx], self.rew[idx], self.nxt[idx], self.mask[idx], self.done[idx],
                self.ret[idx])


def _net(hidden: int):
    import torch.nn as nn

    return nn.Sequential(nn.Linear(OBS_DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, NUM_ACTIONS))


class Agent:
    """The Q-network, its target copy and the optimiser."""

    def __init__(self, config: AgentConfig = AgentConfig(), seed: int = 0):
        import torch

        deterministic(seed)
        self.config = config
        self.online = _net(config.hidden)
        self.target = _net(config.hidden)
        self.target.load_state_dict(self.online.state_dict())
        self.opt = torch.optim.Adam(self.online.parameters(), lr=config.lr)
        self.rng = np.random.default_rng(seed)
        self.steps = 0  # environment steps (for ε)
        self.updates = 0

    def epsilon(self) -> float:
        c = self.config
        f = min(1.0, self.steps / max(c.eps_decay, 1))
        return c.eps_start + f * (c.eps_end - c.eps_start)

    def q(self, obs: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.online(torch.as_tensor(obs[None], dtype=torch.float32))[0].numpy()

    def q_batch(self, obs: np.ndarray) -> np.ndarray:
        """Q-values of a batch of observations (rows)."""
        import torch

        with torch.no_grad():
            return self.online(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    def act(self, obs: np.ndarray, mask: np.ndarray, eps: float | None = None) -> int:
        """ε-greedy among the valid actions (greedy with ``eps=0``)."""
        valid = np.flatnonzero(mask)
        e = self.epsilon() if eps is None else eps
        if e > 0 and self.rng.random() < e:
            return int(valid[self.rng.integers(len(valid))])
        q = self.q(obs)
        return int(valid[np.argmax(q[valid])])

    def update(self, replay: Replay, demo: tuple[np.ndarray, np.ndarray] | None = None, margin: float = 0.1) -> float:
        """One Double-DQN gradient step on a replay batch; returns the loss. ``demo`` (observations and the actions
        taken there in the best plans known) adds DQfD's large-margin loss (Hester et al.): every other valid
        action (the mask is the observation's tail) must score ``margin`` below the demonstrated one."""
        import torch
        import torch.nn.functional as F

        c = self.config
        if replay.n < c.batch or self.steps % c.train_every:
            return 0.0
        obs, act, rew, nxt, mask, done, ret = (torch.as_tensor(x) for x in replay.sample(self.rng, c.batch))
        with torch.no_grad():
            q_next = self.online(nxt).masked_fill(~mask, -1e9)
            best = q_next.argmax(dim=1, keepdim=True)
            value = self.target(nxt).gather(1, best).squeeze(1)
            value = torch.where(mask.any(dim=1), value, torch.zeros_like(value))
            y = rew + c.gamma * (1.0 - done) * value
            if c.return_bound:
                y = torch.where(torch.isnan(ret), y, torch.maximum(y, ret))
        q = self.online(obs).gather(1, act[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        if demo is not None and len(demo[0]):
            d_obs, d_act = torch.as_tensor(demo[0]), torch.as_tensor(demo[1])
            qd = self.online(d_obs)
            valid = d_obs[:, -NUM_ACTIONS:] > 0.5
            bump = torch.full_like(qd, margin).scatter(1, d_act[:, None], 0.0)
            top = (qd + bump).masked_fill(~valid, -1e9).max(dim=1).values
            loss = loss + (top - qd.gather(1, d_act[:, None]).squeeze(1)).mean()
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.online.parameters(), 10.0)
        self.opt.step()
        self.updates += 1
        if self.updates % c.target_every == 0:
            self.target.load_state_dict(self.online.state_dict())
        return float(loss.detach())

    def config_dict(self) -> dict:
        return asdict(self.config)

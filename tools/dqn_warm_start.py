"""Re-create the shipped DQN checkpoint: warm-start from an older checkpoint, then pre-train for N minutes.

The shipped ``planmap/solvers/dqn/pretrained.pt`` was made this way: the previous checkpoint (``git show
2e1ad0a:planmap/solvers/dqn/pretrained.pt > old.pt``) was widened to the current observation (the device features
added since start at zero weight, so the old policy is unchanged at step 0) and trained for 13 minutes on one core,
seed 1, on ``problems.sample_problem``. Training is bounded by wall time, so a rerun on another machine trains a
different number of episodes and gives a different (not byte-identical) checkpoint; the plan records the checkpoint's
sha256, so plans made with it go stale, as they should.

    python tools/dqn_warm_start.py OLD.pt NEW.pt MINUTES [CURVE.png]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from planmap.solvers.dqn import checkpoint
from planmap.solvers.dqn.agent import Agent, AgentConfig
from planmap.solvers.dqn.features import _DEVICE, OBS_DIM
from planmap.solvers.dqn.problems import sample_problem
from planmap.solvers.dqn.space import NUM_ACTIONS
from planmap.solvers.dqn.train import learning_curve, train


def widened_state(blob: dict) -> dict:
    """The old network's weights with zero columns for the device features it did not have."""
    state = dict(blob["state"])
    weight = state["0.weight"]
    at = weight.shape[1] - NUM_ACTIONS  # the device features sit just before the action mask
    state["0.weight"] = torch.cat([weight[:, :at], torch.zeros(weight.shape[0], _DEVICE), weight[:, at:]], dim=1)
    if state["0.weight"].shape[1] != OBS_DIM:
        raise SystemExit(f"old checkpoint has {weight.shape[1]} inputs; cannot widen it to {OBS_DIM}")
    return state


def main(argv: list[str]) -> None:
    if len(argv) not in (3, 4):
        raise SystemExit(__doc__)
    old_path, new_path, minutes = argv[0], argv[1], float(argv[2])
    blob = torch.load(old_path, weights_only=True)
    agent = Agent(AgentConfig(eps_start=0.3, eps_end=0.05, eps_decay=20000), seed=0)
    state = widened_state(blob)
    agent.online.load_state_dict(state)
    agent.target.load_state_dict(state)
    start = time.time()

    def progress(episode: int, log) -> None:
        if episode % 50 == 0:
            recent = [r for r in log.returns[-50:] if np.isfinite(r)]
            print(episode, log.steps, round(time.time() - start), np.mean(recent) if recent else None, flush=True)

    log = train(agent, sample_problem, seconds=minutes * 60, seed=1, on_episode=progress)
    old = blob.get("meta", {})
    meta = {"seed": 1, "distribution": "planmap.solvers.dqn.problems.sample_problem", "episodes": len(log.returns),
            "steps": log.steps, "seconds": round(log.seconds),
            "warm_start": {k: old.get(k) for k in ("episodes", "steps", "seconds")}}
    print(checkpoint.save(agent, new_path, meta), meta, flush=True)
    if len(argv) == 4:
        learning_curve(log, argv[3], "DQN pre-training (warm start)")


if __name__ == "__main__":
    main(sys.argv[1:])

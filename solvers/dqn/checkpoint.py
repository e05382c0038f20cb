"""Saving and loading the agent's network: a small torch file with a header that is checked on load.

The shipped checkpoint (``pretrained.pt`` next to this module) or the one a spec names is a plan input:
the ``dqn`` solver lists it in ``Certificate.inputs``, the plan records its path and sha256, and
``planmap check`` reports the plan stale when it changes. A file that is not a checkpoint, is truncated,
or was written for other features or actions raises :class:`CheckpointError` saying which.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files
from pathlib import Path
from typing import Any

from planmap.errors import PlanmapError

from .agent import Agent, AgentConfig
from .features import OBS_DIM
from .space import NUM_ACTIONS

__all__ = ["CheckpointError", "save", "load", "shipped_path", "sha256", "FORMAT"]

FORMAT = "planmap-dqn/1"


class CheckpointError(PlanmapError):
    """A DQN checkpoint that cannot be used."""


def shipped_path() -> Path:
    return Path(str(files("planmap.solvers.dqn") / "pretrained.pt"))


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save(agent: Agent, path: str | Path, meta: dict[str, Any] | None = None) -> str:
    """Write the online network and its header; returns the file's sha256."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"format": FORMAT, "obs_dim": OBS_DIM, "num_actions": NUM_ACTIONS, "config": agent.config_dict(),
                "meta": dict(meta or {}), "state": agent.online.state_dict()}, buf)
    from planmap.io import write_atomic

    write_atomic(Path(path), buf.getvalue())
    return sha256(path)


def load(path: str | Path | None = None, seed: int = 0) -> tuple[Agent, dict[str, Any]]:
    """An agent with the network of ``path`` (default: the shipped checkpoint) and the file's header."""
    import torch

    path = Path(path) if path is not None else shipped_path()
    if not path.is_file():
        raise CheckpointError(f"DQN checkpoint {path} does not exist; train one with `planmap agent train`")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one error for the user
        raise CheckpointError(f"DQN checkpoint {path} is corrupted or not a checkpoint ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:120]})") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        got = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise CheckpointError(f"DQN checkpoint {path} has format {got!r}, expected {FORMAT!r}")
    if blob.get("obs_dim") != OBS_DIM or blob.get("num_actions") != NUM_ACTIONS:
        raise CheckpointError(f"DQN checkpoint {path} was trained for {blob.get('obs_dim')} features and "
                              f"{blob.get('num_actions')} actions, but this planmap has {OBS_DIM} and {NUM_ACTIONS}; "
                              "retrain it with `planmap agent train`")
    fields = {k: v for k, v in dict(blob.get("config", {})).items() if k in AgentConfig.__dataclass_fields__}
    agent = Agent(AgentConfig(**fields), seed=seed)
    try:
        agent.online.load_state_dict(blob["state"])
    except (RuntimeError, KeyError, TypeError) as e:
        raise CheckpointError(f"DQN checkpoint {path} does not match the network: {str(e).splitlines()[0][:160]}") \
            from None
    agent.target.load_state_dict(agent.online.state_dict())
    return agent, dict(blob.get("meta", {}))

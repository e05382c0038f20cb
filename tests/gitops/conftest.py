"""A sample repository as a planmap user keeps one: a spec, its cluster and model, and the committed plan."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SPEC = "gpt-8dev"  # GPT pipelined over 8 GPUs; re-solving it for 4 GPUs takes seconds
PLAN = f"plans/{SPEC}.plan.yaml"


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-c", "user.name=planmap-test", "-c", "user.email=test@planmap.invalid",
                        "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
                       cwd=repo, capture_output=True, text=True, check=True)
    return r.stdout


@pytest.fixture
def sample_repo(root, tmp_path, monkeypatch) -> Path:
    """specs/ (spec, cluster, model) and plans/ (the golden plan) committed on ``main``; the cwd is the repo."""
    repo = tmp_path / "repo"
    for rel in (f"specs/{SPEC}.yaml", "specs/clusters/h100-1x8.yaml", "specs/models/gpt.mlir", PLAN):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, repo / rel)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "spec and plan")
    monkeypatch.chdir(repo)
    return repo

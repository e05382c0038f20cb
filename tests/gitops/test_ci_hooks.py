"""The pre-commit hooks (.pre-commit-hooks.yaml) and the GitHub Actions example (examples/ci/planmap.yml),
run on a sample repository the way pre-commit and a workflow runner would run them."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.gitops.conftest import PLAN, git


def _env(planmap_exe: str, **extra: str) -> dict[str, str]:
    """The environment of a hook or a step: the tested planmap first on PATH, as `pip install` would put it."""
    return {**os.environ, "PATH": f"{Path(planmap_exe).parent}{os.pathsep}{os.environ['PATH']}", **extra}


def _run_hook(root: Path, repo: Path, hook_id: str, planmap_exe: str) -> subprocess.CompletedProcess:
    """Run a hook as pre-commit does: ``entry`` + ``args`` + the tracked files its ``files`` regex and
    ``types`` select (when ``pass_filenames``), from the repository root."""
    hooks = {h["id"]: h for h in YAML(typ="safe").load((root / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks[hook_id]
    files = [f for f in git(repo, "ls-files").split() if re.search(hook.get("files", ""), f)]
    if "yaml" in hook.get("types", []):
        files = [f for f in files if f.endswith((".yaml", ".yml"))]
    argv = shlex.split(hook["entry"]) + list(hook.get("args", []))
    if hook.get("pass_filenames", True):
        argv += files
    elif not files:
        return subprocess.CompletedProcess(argv, 0, "", "")  # pre-commit skips a hook with no matching file
    return subprocess.run(argv, cwd=repo, env=_env(planmap_exe), capture_output=True, text=True)


@pytest.mark.slow
def test_pre_commit_hooks_on_a_sample_repository(root, sample_repo, planmap_exe):
    repo = sample_repo
    r = _run_hook(root, repo, "planmap-validate", planmap_exe)
    assert r.returncode == 0 and "specs/gpt-8dev.yaml: ok" in r.stdout, r.stderr
    assert "plans/" not in r.stdout  # plans are not specs
    r = _run_hook(root, repo, "planmap-check", planmap_exe)
    assert r.returncode == 0 and f"{PLAN}: ok" in r.stdout, r.stderr

    cluster = repo / "specs" / "clusters" / "h100-1x8.yaml"
    cluster.write_text(cluster.read_text().replace("memory: 80GiB", "memory: 1KiB"))
    r = _run_hook(root, repo, "planmap-check", planmap_exe)
    assert r.returncode == 2 and "regenerate with: planmap solve" in r.stderr

    cluster.write_text(cluster.read_text().replace("memory: 1KiB", "memory: lots"))
    r = _run_hook(root, repo, "planmap-validate", planmap_exe)
    assert r.returncode == 1 and "specs/clusters/h100-1x8.yaml:" in r.stdout + r.stderr


def _planmap_steps(root: Path) -> list[dict]:
    workflow = YAML(typ="safe").load((root / "examples" / "ci" / "planmap.yml").read_text())
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    assert any(s.get("uses", "").startswith("actions/checkout") for s in steps)
    assert any("pip install" in s.get("run", "") and "planmap" in s["run"] for s in steps)
    return [s for s in steps if "planmap " in s.get("run", "") and "pip install" not in s["run"]]


@pytest.mark.slow
def test_github_workflow_steps_on_a_pull_request(root, sample_repo, planmap_exe, tmp_path):
    """The workflow's planmap steps on a PR branch that changes the cluster and re-solves: validate and
    check pass, and the review step writes the markdown diff (moved layers) to the job summary."""
    origin = sample_repo
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(repo)], check=True, capture_output=True)
    git(repo, "checkout", "-q", "-b", "fewer-gpus")
    cluster = repo / "specs" / "clusters" / "h100-1x8.yaml"
    cluster.write_text(cluster.read_text().replace("count: 8}", "count: 4}"))
    subprocess.run(["planmap", "solve", "specs/gpt-8dev.yaml", "-o", PLAN, "-q"], cwd=repo,
                   env=_env(planmap_exe), check=True, capture_output=True)
    git(repo, "commit", "-qam", "4 GPUs")

    summary = tmp_path / "summary.md"
    steps = _planmap_steps(root)
    assert [s["name"] for s in steps] == ["Validate specs", "Check plans", "Review changed plans"]
    for step in steps:
        env = {k: str(v).replace("${{ github.base_ref }}", "main") for k, v in step.get("env", {}).items()}
        r = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, capture_output=True, text=True,
                           env=_env(planmap_exe, GITHUB_STEP_SUMMARY=str(summary), **env))
        assert r.returncode == 0, (step["name"], r.stdout, r.stderr)
    md = summary.read_text()
    assert md.startswith("### planmap diff:") and "op(s) moved" in md and "- stages: 8 -> 4" in md

"""Bench output says what produced it: commit, library versions and machine (bench/_stamp.py)."""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys

import numpy as np
import pytest

import planmap


@pytest.fixture(scope="module")
def stamp_module(root):
    spec = importlib.util.spec_from_file_location("_stamp", root / "bench" / "_stamp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_stamp_names_the_commit_and_the_versions(root, stamp_module):
    s = stamp_module.stamp()
    head = _git(root, "rev-parse", "--short", "HEAD")
    assert s["commit"] in (head, head + "-dirty")
    assert s["planmap"] == planmap.__version__
    assert s["versions"]["python"] == platform.python_version()
    assert s["versions"]["numpy"] == np.__version__
    assert {"jax", "jaxlib"} <= s["versions"].keys()
    assert s["machine"]["cores"] >= 1
    text = stamp_module.header(s)
    assert f"commit {s['commit']}" in text and f"numpy {np.__version__}" in text and "machine:" in text


def test_commit_is_marked_dirty_when_tracked_files_change(tmp_path, stamp_module):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    (tmp_path / "untracked.txt").write_text("results being written\n")
    assert stamp_module.git_commit(tmp_path) == head
    (tmp_path / "f.txt").write_text("b\n")
    assert stamp_module.git_commit(tmp_path) == head + "-dirty"
    assert stamp_module.git_commit(tmp_path / "missing") == "unknown"


def test_a_bench_script_prints_the_stamp_before_its_table(root):
    r = subprocess.run([sys.executable, "bench/cost.py", "--nodes", "200", "--repeats", "1"], cwd=root,
                       capture_output=True, text=True, check=True)
    first, second = r.stdout.splitlines()[:2]
    head = _git(root, "rev-parse", "--short", "HEAD")
    assert f"planmap {planmap.__version__} at commit {head}" in first and f"numpy {np.__version__}" in first
    assert second.startswith("machine: ")

"""Shared test configuration: 8 fake CPU devices for every JAX test (set before jax is imported)."""

import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def specs_dir() -> Path:
    return ROOT / "specs"


@pytest.fixture(scope="session")
def planmap_exe() -> str:
    """The ``planmap`` console script of the environment running the tests (for subprocess tests)."""
    return str(Path(sys.executable).with_name("planmap"))


@pytest.fixture
def workdir(specs_dir, tmp_path, monkeypatch):
    """A temporary working directory holding a copy of ``specs/`` (plans written there stay out of the tree)."""
    import shutil

    shutil.copytree(specs_dir, tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path

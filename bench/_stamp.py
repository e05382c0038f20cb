"""Provenance stamp for benchmark output: which code, which library versions, which machine.

A results table is only comparable with another when both say what produced them, so every bench
script prints :func:`header` before its table and records :func:`stamp` in the files it writes into
``bench/results/``. Bench scripts run as ``python bench/x.py`` (``bench/`` is then on ``sys.path``),
so they import this module as ``from _stamp import header``.

Library versions come from the installed distributions' metadata for the modules that are
importable, without importing them (importing torch or jax only to read a version costs seconds).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
from pathlib import Path

__all__ = ["LIBRARIES", "stamp", "header", "git_commit", "cpu_model", "write_results"]

ROOT = Path(__file__).resolve().parent.parent

# module name -> distribution name, in the order the stamp lists them
LIBRARIES: dict[str, str] = {
    "numpy": "numpy",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "pyomo": "pyomo",
    "highspy": "highspy",
    "torch": "torch",
}


def git_commit(root: Path = ROOT) -> str:
    """Short hash of HEAD, with ``-dirty`` when tracked files differ from it; ``unknown`` outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else the platform's processor string."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for module, dist in LIBRARIES.items():
        if importlib.util.find_spec(module) is None:
            continue
        try:
            out[module] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[module] = "unknown"
    return out


def stamp() -> dict:
    """Commit, planmap version, library versions and machine, as a JSON-ready dict."""
    import planmap  # installed (editable) in the environment that runs the benches

    return {
        "commit": git_commit(),
        "planmap": planmap.__version__,
        "versions": _versions(),
        "machine": {"platform": platform.platform(), "cpu": cpu_model(), "cores": os.cpu_count()},
    }


def header(s: dict | None = None) -> str:
    """The stamp as two text lines (no trailing newline), printed at the top of a results table."""
    s = s or stamp()
    versions = ", ".join(f"{k} {v}" for k, v in s["versions"].items())
    m = s["machine"]
    cpu = f"{m['cpu']}, " if m["cpu"] else ""
    return (f"planmap {s['planmap']} at commit {s['commit']}; {versions}\n"
            f"machine: {m['platform']} ({cpu}{m['cores']} cores)")


def write_results(path: str | Path, title: str, text: str) -> Path:
    """Write a results file (title, stamp, table) and keep the hand-written notes of the file it
    replaces: everything from its first "## Reading" heading on."""
    p = Path(path)
    old = p.read_text() if p.exists() else ""
    notes = old[old.index("\n## Reading"):] if "\n## Reading" in old else ""
    p.write_text(f"# {title}\n\n{stamp()}\n\n{text}\n{notes}")
    return p


if __name__ == "__main__":
    print(header())

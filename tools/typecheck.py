"""Type-check planmap with mypy, as the package is installed: ``solvers/`` as ``planmap.solvers``.

``pyproject.toml`` maps ``solvers/`` and ``runtime/`` into the ``planmap`` namespace
(``[tool.setuptools] package-dir``), and the editable install resolves that mapping with an import
hook that mypy cannot follow. So this script mirrors the mapping as a tree of symbolic links in
``build/typecheck/`` (the ``mypy_path`` of ``[tool.mypy]``), runs mypy on the package there, and
prints its report with the repository's own paths. Settings are those of ``[tool.mypy]``; extra
arguments go to mypy.

Run: ``.venv/bin/python tools/typecheck.py`` (or ``make typecheck``); exit status is mypy's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def package_dirs(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, Path]:
    """Package name -> source directory, from ``[tool.setuptools] package-dir``."""
    mapping = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / src for name, src in mapping.items()}


def build_tree(tree: Path = TREE) -> dict[Path, Path]:
    """Links under ``tree`` laid out as the installed packages; returns link -> source directory."""
    dirs = package_dirs()
    shutil.rmtree(tree, ignore_errors=True)
    links: dict[Path, Path] = {}
    for name in sorted(dirs, key=lambda n: n.count(".")):
        target = tree.joinpath(*name.split("."))
        if "." in name:  # a mapped subpackage: one link inside its (already built) parent
            target.symlink_to(dirs[name], target_is_directory=True)
            links[target] = dirs[name]
            continue
        target.mkdir(parents=True)  # a top-level package: its entries, so subpackages can be added
        for entry in dirs[name].iterdir():
            if entry.name != "__pycache__":
                (target / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        links[target] = dirs[name]
    return links


def to_repo_paths(report: str, links: dict[Path, Path]) -> str:
    """mypy's report with paths in the link tree replaced by the repository's paths."""
    for link, source in sorted(links.items(), key=lambda kv: -len(str(kv[0]))):
        for form in (str(link), os.path.relpath(link, ROOT)):
            report = report.replace(form + os.sep, os.path.relpath(source, ROOT) + os.sep)
    return report


def main(argv: list[str]) -> int:
    from mypy import api

    links = build_tree()
    os.chdir(ROOT)  # [tool.mypy] paths are relative to the repository root
    stdout, stderr, status = api.run(argv)
    sys.stdout.write(to_repo_paths(stdout, links))
    sys.stderr.write(to_repo_paths(stderr, links))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

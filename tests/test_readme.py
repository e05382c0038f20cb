"""The README's examples run: every ```python block, and every ```sh block marked `<!-- runnable -->`.

They run in document order in one temporary directory holding copies of specs/ and examples/ (so a
later block may use a plan an earlier one wrote), with the environment's `planmap` on PATH; each
python block runs in its own interpreter, as a reader pasting it would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"(?P<marker><!--\s*runnable\s*-->\s*\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)^```", re.S | re.M)


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of the blocks that must run: python always, sh when marked runnable."""
    return [(m["lang"], m["body"]) for m in _BLOCK.finditer(text)
            if m["lang"] == "python" or (m["lang"] == "sh" and m["marker"])]


def test_readme_marks_what_runs():
    blocks = readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    langs = [lang for lang, _ in blocks]
    assert langs.count("sh") >= 1 and langs.count("python") >= 2
    quickstart = next(code for lang, code in blocks if lang == "sh")
    for step in ("planmap export", "planmap validate", "planmap solve", "planmap explain", "planmap check",
                 "planmap run"):
        assert step in quickstart, f"the quickstart misses {step!r}"


@pytest.mark.slow
def test_readme_examples_run(tmp_path):
    for d in ("specs", "examples"):
        shutil.copytree(ROOT / d, tmp_path / d)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    for k, (lang, code) in enumerate(readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))):
        cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "sh" else [sys.executable, "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"README block {k} ({lang}) failed:\n{code}\n--- stderr:\n{r.stderr[-3000:]}"
    assert (tmp_path / "plans" / "gpt-8dev.png").is_file() and (tmp_path / "my_gpt.mlir").is_file()

"""The distribution builds as a wheel whose packages import without the source tree."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest


@pytest.mark.slow
def test_wheel_installs_and_imports_mapped_packages(root, tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(root)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("planmap-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "planmap/solvers/__init__.py" in names and "planmap/runtime/__init__.py" in names
    for sub in ("latency", "pipeline", "heuristics"):
        assert f"planmap/solvers/{sub}/__init__.py" in names, f"solver subpackage {sub} missing from the wheel"
    assert not any(n.startswith(("solvers/", "runtime/")) for n in names), "no top-level solvers/runtime"
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True)
    code = ("import planmap, planmap.solvers, planmap.runtime, planmap.spec, planmap.cli, planmap.solvers.pipeline.dp,"
            " planmap.workloads.nets;"
            "print(planmap.__file__); print(planmap.solvers.__file__); print(planmap.runtime.__file__);"
            "print(planmap.solvers.pipeline.dp.__file__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}).stdout.split()
    assert all(p.startswith(str(target)) for p in out), out

"""The CP-SAT prototype of the latency problem (bench/latency_cpsat.py) is exact: on small random instances
its placement is the exhaustive optimum under ``evaluate`` and its bound never passes it (with and without
``prepare``'s windows and bounds as constraints). Skipped without OR-Tools (not a project dependency)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("ortools")
pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap.solvers.latency.data import prepare  # noqa: E402
from tests.solvers.latency.cases import optimum  # noqa: E402
from tests.solvers.latency.test_cuts import any_instance, fork_join_instance  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cpsat():
    spec = importlib.util.spec_from_file_location("latency_cpsat", ROOT / "bench" / "latency_cpsat.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["latency_cpsat"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("latency_cpsat", None)


@pytest.mark.parametrize("case", [("any", 5, 5, 2), ("fj", "diamond", 3, 2)])
def test_cpsat_model_finds_the_exhaustive_optimum(cpsat, case):
    kind, a, b, q = case
    p = any_instance(a, b, q) if kind == "any" else fork_join_instance(a, b, q)
    opt = optimum(p)
    assert math.isfinite(opt)
    for windows, dt in ((False, prepare(p, bounds=False)), (True, prepare(p, opt * 1.001, probe_seconds=0))):
        best, latency, bound, _ = cpsat.solve(p, dt, 20.0, 1, windows=windows, log=lambda *a: None)
        assert best is not None
        assert latency == pytest.approx(opt, rel=1e-9)
        assert opt * (1 - 1e-3) <= bound <= opt * (1 + 1e-9)


def test_cpsat_hint_reads_back_a_placement(cpsat):
    """A placement turned into units (slots in stage order, identical devices relabelled) and back
    evaluates to the same latency."""
    from planmap.evaluate import evaluate
    from tests.solvers.latency.cases import placements

    p = any_instance(1, 5, 2)
    dt = prepare(p, bounds=False)
    checked = 0
    for sol in placements(p):
        ev = evaluate(p, sol)
        if not ev.feasible:
            continue
        units = cpsat.canonical_units(p, dt, cpsat.units_of(p, dt, sol))
        assert evaluate(p, cpsat.solution_of(dt, units)).objective == pytest.approx(ev.objective, rel=1e-12)
        checked += 1
        if checked >= 30:
            break
    assert checked

"""Fuzzing in CI (issue 18, item 8): a few derandomized mutated inputs of each kind through the CLI —
never a traceback, never a hang. ``make fuzz`` runs the same harness for longer."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.fuzzing import KINDS, fuzz_one


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_inputs_never_crash_or_hang(kind, root, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"fuzz-{kind}")

    @settings(max_examples=25, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(rng=st.randoms(use_true_random=False))
    def check(rng):
        outcome = fuzz_one(kind, rng, root, work)
        assert outcome.status == "ok", f"{outcome.status} on {outcome.argv}: {outcome.detail}"

    check()


def test_fuzz_finding_plan_nested_past_the_serialization_depth_is_an_error(tmp_path):
    """``make fuzz`` found a mutated plan whose digest could not be computed (pydantic's maximum
    serialization depth): ``check`` now reports it as an error, not a traceback."""
    import random
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    outcome = fuzz_one("plan", random.Random("plan:102835"), root, tmp_path)
    assert outcome.status == "ok", outcome


def test_fuzz_finding_long_digit_run_in_a_scope_name_is_linear():
    """``make fuzz`` (artifact seed 168) put a 5,000-digit run into a location name: the layer-stem
    regex ``\\d+$`` retried at every digit (0.9 s for 5,000 digits, quadratic: ~14 s for the 20,000 here).
    Now linear, with the same stems as before."""
    import time

    from planmap.frontend.namestack import label_ops

    names = [f"jit(f)/j{'9' * 20_000}x/layer{i}/add" for i in range(2)] + ["jit(f)/h/0/add", "jit(f)/h/1/add"]
    t = time.process_time()
    labels = label_ops(names)
    assert time.process_time() - t < 5.0
    assert labels.layer.tolist() == [0, 1, 2, 3]  # layer0/layer1 and h/0, h/1: two stems, two layers each

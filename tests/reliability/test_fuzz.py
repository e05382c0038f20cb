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

"""The context factor of a profile (issue 16 item 5): node times scaled to what they cost inside the whole program.

A profile that also timed the whole entry function as one program scales every op's time by
``program_seconds / sum of node times``, so that a plan of the whole program on one device predicts
the program's measured time; a profile without it (older files, ``--no-whole``) keeps the node times.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from planmap.errors import InputError
from planmap.profile import Profile, apply_profile, context_factor, load_profile, write_profile
from planmap.workloads.graphs import random_dag


def _profile(op_seconds, program=None) -> Profile:
    return Profile("ab" * 32, "cpu", "test cpu", np.asarray(op_seconds, float), 1e-4, 1, 3, "none", program)


def test_context_factor_is_program_over_nodes():
    assert context_factor(2.0, 5.0) == pytest.approx(2.5)
    assert context_factor(4.0, 3.0) == pytest.approx(0.75)  # fusion across nodes can make the program faster
    assert context_factor(2.0, None) == 1.0  # not timed: nodes count as timed alone
    assert context_factor(0.0, 1.0) == 1.0  # nothing measurable to scale
    assert _profile([1.0, np.nan, 3.0], 8.0).context_factor == pytest.approx(2.0)  # unmeasured ops count 0


def test_apply_profile_scales_node_times_to_the_program():
    g = random_dag(4, seed=0)
    prof = _profile([1e-3, 2e-3, 3e-3, 4e-3], 25e-3)
    measured = apply_profile(g, g, prof, prof.model_sha256).measured["cpu"]
    np.testing.assert_allclose(measured, [2.5e-3, 5e-3, 7.5e-3, 10e-3])
    assert measured.sum() == pytest.approx(prof.program_seconds)
    plain = apply_profile(g, g, _profile(prof.op_seconds), prof.model_sha256).measured["cpu"]
    np.testing.assert_allclose(plain, prof.op_seconds)


def test_program_seconds_round_trip_and_older_files(tmp_path):
    prof = _profile([1e-3, None, 2e-3], 6e-3)
    back = load_profile(write_profile(tmp_path / "p.json", prof))
    assert back.program_seconds == pytest.approx(6e-3) and back.context_factor == pytest.approx(2.0)
    doc = json.loads((tmp_path / "p.json").read_text())
    del doc["program_seconds"]  # a profile written before the whole program was timed
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert load_profile(tmp_path / "old.json").program_seconds is None
    assert load_profile(tmp_path / "old.json").context_factor == 1.0
    doc["program_seconds"] = -1.0
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="finite and >= 0"):
        load_profile(tmp_path / "bad.json")

"""Which entry arguments are data and which are parameters."""

from __future__ import annotations

import pytest

from planmap.errors import InputError
from planmap.frontend.arguments import assign_roles, default_roles
from planmap.spec.models import ArgumentRoles

NAMES = ["params['embed']['wte']", "params['blocks']['layer0']['w']", "tokens", "targets"]


def test_default_roles_from_jax_names():
    assert default_roles(NAMES) == ["param", "param", "data", "data"]
    assert default_roles(["states[0]", "states[1]", "inputs[0][0]"]) == ["param", "param", "data"]  # torchax
    assert default_roles(["weights.conv1", "my_weight", "x"]) == ["param", "param", "data"]


def test_default_roles_without_usable_names():
    assert default_roles(["", "", ""]) == ["data", "param", "param"]
    assert default_roles(["XLA_Args"] * 3) == ["data", "param", "param"]  # TensorFlow


def test_selectors_by_index_and_glob():
    assert assign_roles(NAMES, ArgumentRoles(data=[0]), "m") == ["data", "param", "param", "param"]
    assert assign_roles(NAMES, ArgumentRoles(parameters=["params['embed']*", -1]), "m") == [
        "param", "data", "data", "param"]
    both = ArgumentRoles(data=["tok*"], parameters=["params*"])
    assert assign_roles(NAMES, both, "m") == ["param", "param", "data", "data"]  # targets: default
    assert assign_roles(NAMES, {"data": ["t?rgets"]}, "m") == ["param", "param", "param", "data"]


@pytest.mark.parametrize("roles, message", [
    (ArgumentRoles(data=[7]), "argument index 7 is out of range: @main has 4 arguments"),
    (ArgumentRoles(data=["tokns"]), "argument selector 'tokns' matches no argument"),
    (ArgumentRoles(data=["t*"], parameters=["targets"]), "argument 3 .targets. is selected both as data"),
])
def test_selector_mistakes_are_input_errors(roles, message):
    with pytest.raises(InputError, match=message):
        assign_roles(NAMES, roles, "spec.yaml")

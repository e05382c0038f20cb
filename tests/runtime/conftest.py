"""Fixtures for runtime tests: example-model parameters and inputs, single-device references.

References are computed by the plain JAX functions of planmap.examples.models under ``jax.jit``
on one device — independent of the runtime and of the exported artifacts.

Tolerances (float32, values of order 1): sharded or pipelined runs reorder sums, so outputs are
compared with ``rtol=1e-5, atol=1e-5`` (MLP) and ``rtol=1e-4, atol=1e-4`` (GPT logits, which go
through layer norms and softmaxes); gradients averaged over microbatches with ``rtol=1e-4,
atol=1e-6`` (they are of order 1e-3).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from planmap.examples.models import gpt, mlp


def leaves(tree) -> list[np.ndarray]:
    """Flat numpy leaves in the artifact's argument order (jax.tree order = sorted dict keys)."""
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.fixture(scope="session")
def plan_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("plans")


@pytest.fixture(scope="session")
def mlp_params():
    return mlp.init(jax.random.PRNGKey(0))


@pytest.fixture(scope="session")
def gpt_params():
    return gpt.init(jax.random.PRNGKey(0))


def mlp_batch(rows: int, seed: int = 1) -> np.ndarray:
    return np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (rows, 256), np.float32))


def gpt_tokens(rows: int, seed: int = 1) -> np.ndarray:
    return np.asarray(jax.random.randint(jax.random.PRNGKey(seed), (rows, 64), 0, 512, np.int32))


def single_device(fn, *args):
    """``fn`` under jit on jax.devices()[0] (the unsharded reference)."""
    dev = jax.devices()[0]
    placed = jax.device_put(args, dev)
    return jax.tree.map(np.asarray, jax.jit(fn)(*placed))

"""A JAX model to export with ``planmap export`` (the default ``--from jax``).

    planmap export examples/export/jax_mlp.py:forward --args-from examples/export/jax_mlp.py:example_args \\
        -o jax_mlp.mlir

``forward`` is any function of arrays; the example arguments are ``jax.ShapeDtypeStruct``\\ s (or a
zero-argument function returning them, traced with ``jax.eval_shape``), so no weights are allocated.
"""

import jax
import jax.numpy as jnp

SIZES = (256, 512, 512, 512, 64)
BATCH = 32


def forward(params, x):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x


def example_args():
    params = [(jax.ShapeDtypeStruct((a, b), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32))
              for a, b in zip(SIZES[:-1], SIZES[1:], strict=True)]
    return params, jax.ShapeDtypeStruct((BATCH, SIZES[0]), jnp.float32)

"""Optimizers as pure per-parameter functions, so each parameter updates where it lives.

A pipeline keeps each parameter on its stage's devices (possibly sharded); an optimizer that
updated a whole pytree at once would need one device set for everything. Here an optimizer is
``init(param) -> state`` and ``update(param, grad, state, step) -> (param, state)`` for one
parameter (``state`` a tuple of arrays shaped like it), which :class:`planmap.runtime.Trainer`
jits once per stage with the parameters' own shardings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Optimizer", "sgd", "adam"]


@dataclass(frozen=True)
class Optimizer:
    """``init(param) -> state``; ``update(param, grad, state, step) -> (param, state)``; step counts from 1."""

    name: str
    init: Callable
    update: Callable


def sgd(learning_rate: float, momentum: float = 0.0) -> Optimizer:
    """Stochastic gradient descent, with heavy-ball momentum when ``momentum > 0``."""
    import jax.numpy as jnp

    if momentum == 0.0:
        return Optimizer("sgd", lambda p: (), lambda p, g, s, t: (p - learning_rate * g.astype(p.dtype), ()))

    def update(p, g, s, t):
        (v,) = s
        v = momentum * v + g.astype(v.dtype)
        return p - learning_rate * v.astype(p.dtype), (v,)

    return Optimizer("sgd", lambda p: (jnp.zeros_like(p),), update)


def adam(learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """Adam (Kingma & Ba) with bias correction."""
    import jax.numpy as jnp

    def init(p):
        return (jnp.zeros_like(p), jnp.zeros_like(p))

    def update(p, g, s, t):
        mu, nu = s
        g = g.astype(mu.dtype)
        mu = b1 * mu + (1 - b1) * g
        nu = b2 * nu + (1 - b2) * g * g
        mu_hat = mu / (1 - b1 ** t)
        nu_hat = nu / (1 - b2 ** t)
        return (p - learning_rate * mu_hat / (jnp.sqrt(nu_hat) + eps)).astype(p.dtype), (mu, nu)

    return Optimizer("adam", init, update)

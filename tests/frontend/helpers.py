"""Helpers shared by the front-end tests."""

from __future__ import annotations

import jax


def abstract_args(model, train: bool = False) -> tuple:
    """ShapeDtypeStructs of an example model's arguments, by tracing (``ModelDef.abstract_args`` runs
    the initialiser eagerly, which compiles dozens of small programs)."""
    key = jax.random.PRNGKey(0)
    return jax.eval_shape(lambda: (model.init(key), *model.inputs(key)) + ((model.targets(key),) if train else ()))


def xla_flops(fn, *args) -> float:
    """FLOPs XLA's cost analysis reports for ``fn`` compiled at ``args``."""
    ca = jax.jit(fn).lower(*args).compile().cost_analysis()
    return float((ca[0] if isinstance(ca, list) else ca)["flops"])


def mlp_args() -> tuple:
    """The example MLP's abstract arguments (for ``planmap export --args-from``)."""
    from planmap.examples.models import mlp

    return abstract_args(mlp)

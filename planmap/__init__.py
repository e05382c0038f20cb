"""planmap: declarative, plan-as-config device placement and parallelisation for StableHLO models.

The Python API (see the README's "Python API" section)::

    import planmap
    p = planmap.plan("specs/gpt-8dev.yaml", solver="data-parallel")   # -> planmap.Plan
    p.save("plans/gpt-8dev.plan.yaml")
    p = planmap.load_plan("plans/gpt-8dev.plan.yaml")
    in_shardings = p.shardings(jax.devices())                          # NamedShardings for jax.jit

The core (spec, frontend, graph, cost, problem, plan, cli) knows no solver's internals; solvers
live in :mod:`planmap.solvers` and are found through its registry; :mod:`planmap.runtime` applies
plans with JAX. Heavy dependencies (jax, pyomo, torch) are imported lazily: ``import planmap`` is
cheap, and the API names below are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself), resolved by __getattr__ on first use
_LAZY = {
    "plan": ("planmap.plan", None),  # the plan subpackage, callable as planmap.api.plan
    "Plan": ("planmap.api", "Plan"),
    "load_plan": ("planmap.api", "load_plan"),
    "load_spec": ("planmap.spec", "load_spec"),
    "export": ("planmap.export", None),
    "PlanmapError": ("planmap.errors", "PlanmapError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'planmap' has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

"""planmap: declarative, plan-as-config device placement and parallelisation for StableHLO models.

The core (spec, frontend, graph, cost, problem, plan, cli) knows no solver's internals; solvers
live in :mod:`planmap.solvers` and are found through its registry; :mod:`planmap.runtime` applies
plans with JAX. Heavy dependencies (jax, pyomo, torch) are imported lazily.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

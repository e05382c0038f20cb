"""Applies plans to StableHLO artifacts with JAX sharding.

``load(plan_path)`` compiles a plan for the artifact it was made for (refusing a stale plan) and
returns an :class:`Executable`; ``apply(plan, fn, *example_args)`` does the same for a JAX
function, after checking that ``fn`` exports to exactly the planned artifact. One runtime covers
every kind of plan: SPMD (one stage over a mesh, with sdy shardings), pipelines (stages on
sub-meshes, microbatches streamed with GPipe or 1F1B), and placements (ops on single devices,
possibly non-contiguous). :class:`Trainer` adds gradient accumulation's other half, the optimizer
update, laid out like the parameters.

On one machine, fake CPU devices stand in for accelerators: set
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX is imported.
"""

from planmap.runtime.api import UNCHECKED_WARNING, PytreeExecutable, apply, load
from planmap.runtime.executable import Executable
from planmap.runtime.optim import Optimizer, adam, sgd
from planmap.runtime.train import Trainer
from planmap.runtime.transfer import place

__all__ = ["load", "apply", "UNCHECKED_WARNING", "Executable", "PytreeExecutable", "place", "Trainer", "Optimizer",
           "sgd", "adam"]

"""Solvers, found by name through this registry.

One subpackage per family — :mod:`.latency` (the latency IP), :mod:`.pipeline` (``dp``, PipeDream,
the throughput IP), :mod:`.heuristics` (greedy, even/single, METIS, local search), :mod:`.sharding` (SPMD
layouts), :mod:`.cluster` (whole-cluster plans: stages × submeshes × sharding) — over a shared
layer of public modules any solver may use: :mod:`.mip` (solving Pyomo models), :mod:`.mip_backends`
(the MIP backends and their options), :mod:`.mip_model` (model-building helpers), :mod:`.segments`
(stages from a device assignment), :mod:`.repair` (valid assignments, last resorts) and
:mod:`.node_memory`. :mod:`.ip` picks the latency or the throughput IP by objective, importing it
with this registry's :func:`import_solver_module`. The shared layer imports neither a subpackage
nor this registry, and the import graph has no cycle (tests/test_imports.py checks both).

The registry maps names to ``"module:Class"`` strings and imports a solver only when it is asked
for, so ``planmap validate`` never pays for pyomo or torch. Third-party solvers register through
the ``planmap.solvers`` entry-point group (``name = "package.module:Class"``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType, ModuleType

from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.problem import Problem, Solver
from planmap.vocabulary import ObjectiveKind

__all__ = ["BUILTIN", "SolverInfo", "available", "get", "import_solver_module", "names", "auto_candidates", "version",
           "MIP_SOLVERS", "RECORDED_AS"]

BUILTIN = MappingProxyType({
    "ip": "planmap.solvers.ip:IP",
    "dp": "planmap.solvers.pipeline.dp:ThroughputDP",
    "greedy": "planmap.solvers.heuristics.greedy:Greedy",
    "even": "planmap.solvers.heuristics.even:EvenSplit",
    "single": "planmap.solvers.heuristics.even:SingleDevice",
    "metis": "planmap.solvers.heuristics.metis:Metis",
    "local-search": "planmap.solvers.heuristics.local_search:LocalSearch",
    "pipedream": "planmap.solvers.pipeline.pipedream:PipeDream",
    "sharding": "planmap.solvers.sharding.solver:Sharding",
    "data-parallel": "planmap.solvers.sharding.baselines:DataParallel",
    "fsdp": "planmap.solvers.sharding.baselines:FSDP",
    "megatron": "planmap.solvers.sharding.baselines:Megatron",
    "cluster": "planmap.solvers.cluster.solver:Cluster",
    "dqn": "planmap.solvers.dqn.solver:DQN",
})

# Built-in solvers whose certificate names a MIP backend (``backend``); every other built-in records none.
MIP_SOLVERS = frozenset({"ip", "sharding"})
# Names a solver's answer may carry besides its own: the sharding solver answers with its best SPMD baseline
# (``replicated``, its fallback layout, is not a registry name) when the IP does not beat it.
RECORDED_AS = MappingProxyType({"sharding": ("data-parallel", "fsdp", "megatron", "replicated")})
# The module whose ``VERSION`` a solver's certificates carry, where it is not the registered module's.
_VERSION_MODULES = {("ip", ObjectiveKind.LATENCY): "planmap.solvers.latency.report",
                    ("ip", ObjectiveKind.THROUGHPUT): "planmap.solvers.pipeline.ip"}

# What each module needs beyond the core, for the "how to install" hint.
_EXTRAS = {"ip": "ip", "metis": "ip", "sharding": "ip", "dqn": "dqn"}


@dataclass(frozen=True)
class SolverInfo:
    name: str
    target: str
    objectives: frozenset[str]
    available: bool
    reason: str = ""


def _targets() -> dict[str, str]:
    targets = dict(BUILTIN)
    for ep in entry_points(group="planmap.solvers"):
        targets.setdefault(ep.name, ep.value)
    return targets


def _target(name: str) -> str | None:
    """The target of solver ``name``, or None when no solver has that name. A built-in name wins over an
    entry point of the same name (as in :func:`_targets`), so the entry points — every installed
    distribution's metadata, tens of milliseconds — are read only for a name that is not built in."""
    return BUILTIN[name] if name in BUILTIN else _targets().get(name)


def names() -> list[str]:
    """Every registered solver name (available or not), sorted."""
    return sorted(_targets())


def get(name: str) -> Solver:
    """The solver called ``name``: raises PlanmapError for an unknown name and SolverUnavailableError
    (with the install command) when its module or a dependency is missing."""
    target = _target(name)
    if target is None:
        raise PlanmapError(f"unknown solver {name!r}; available: {', '.join(names())}")
    module, _, cls = target.partition(":")
    mod = import_solver_module(module, f"solver {name!r}", _EXTRAS.get(name))
    solver = getattr(mod, cls)()
    return solver


def import_solver_module(module: str, what: str, extra: str | None) -> ModuleType:
    """Import a solver's ``module``, turning a missing module into a :class:`SolverUnavailableError`:
    ``what`` (e.g. ``"solver 'metis'"``) "is not part of this installation" when the module itself is
    missing, else it "needs the package" it lacks, with the install command (the ``planmap[extra]``
    extra when given, else the package itself)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (e.name == module or module.startswith(e.name + ".")):
            raise SolverUnavailableError(f"{what} is not part of this installation ({module})") from None
        hint = f"pip install 'planmap[{extra}]'" if extra else f"pip install {e.name}"
        raise SolverUnavailableError(f"{what} needs the package {e.name!r}: {hint}") from None


def available() -> list[SolverInfo]:
    """Every registered solver with whether it can be imported here and the objectives it handles."""
    out = []
    for name, target in sorted(_targets().items()):
        try:
            s = get(name)
            out.append(SolverInfo(name, target, frozenset(s.objectives), True))
        except PlanmapError as e:
            out.append(SolverInfo(name, target, frozenset(), False, str(e)))
    return out


def auto_candidates(problem: Problem) -> list[str]:
    """Solvers ``solver: auto`` tries, best first (the first that is installed and answers wins).

    Exact methods first (they warm-start from heuristics themselves); then heuristics. Throughput on a
    StableHLO graph (one with dimension maps) is the whole-cluster planner's alone: it searches pipelines
    of sharded stages and judges the pipeline DP's plan and the SPMD baselines itself, by step time
    (the chain would compare by bottleneck). Profiled graphs keep the exact pipeline DP / IP.
    """
    if problem.objective is ObjectiveKind.LATENCY:
        return ["ip", "local-search", "greedy", "even"]
    if problem.original.dim_maps is not None and problem.original.outputs is not None:
        return ["cluster"]
    if problem.contiguous and not problem.replication:
        return ["dp", "ip", "local-search", "even"]
    if problem.contiguous:
        return ["dp", "pipedream", "local-search", "even"]
    return ["ip", "dp", "local-search", "even"]


def version(name: str, objective: str) -> str | None:
    """The version this installation's solver ``name`` writes into its certificates for ``objective`` (the
    ``VERSION`` of its module), or None when the solver does not declare one (a third-party solver).
    Raises like :func:`get` for an unknown or uninstalled solver."""
    if _target(name) is None:
        name = next((ran for ran, recorded in RECORDED_AS.items() if name in recorded), name)
    target = _target(name)
    if target is None:
        raise PlanmapError(f"unknown solver {name!r}; available: {', '.join(names())}")
    module = _VERSION_MODULES.get((name, ObjectiveKind(objective)), target.partition(":")[0])
    found = getattr(import_solver_module(module, f"solver {name!r}", _EXTRAS.get(name)), "VERSION", None)
    return None if found is None else str(found)

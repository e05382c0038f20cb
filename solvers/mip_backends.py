"""The MIP backends planmap can drive, by name, and the options each one takes.

:data:`BACKENDS` says how Pyomo reaches each backend, how to tell it is installed and how to
install it, and (shell backends) the names of its time-limit, gap, thread and seed options.
:func:`get_backend` resolves a name, raising :class:`SolverUnavailableError` with install advice
for a backend missing here and :class:`PlanmapError` for an unknown name;
:func:`check_passthrough` refuses passthrough options outside a backend's allow-list. Solving with
a backend is :mod:`planmap.solvers.mip`'s part.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from typing import Any

from planmap.errors import PlanmapError, SolverUnavailableError
from planmap.problem import SolveOptions

__all__ = ["Backend", "BACKENDS", "available_backends", "check_passthrough", "get_backend", "options_record"]


@dataclass(frozen=True)
class Backend:
    """A MIP backend planmap can drive: how Pyomo reaches it, how to tell it is installed, how to
    install it, and the names of its options (shell backends only; contrib ones share names)."""

    name: str
    interface: str  # "highs" | "contrib" | "legacy"
    pyomo_name: str
    install: str
    module: str | None = None  # python module the backend needs
    executable: str | None = None  # program the backend needs on PATH
    time_limit: str | None = None
    rel_gap: str | None = None
    threads: str | None = None
    seed: str | None = None
    warm_start: bool = True


BACKENDS: dict[str, Backend] = {
    "highs": Backend("highs", "highs", "highs", "pip install highspy  (or: pip install 'planmap[ip]')",
                     module="highspy"),
    "gurobi": Backend("gurobi", "contrib", "gurobi_direct", "pip install gurobipy  (and a Gurobi license)",
                      module="gurobipy"),
    "scip": Backend("scip", "contrib", "scip_direct", "pip install pyscipopt", module="pyscipopt"),
    "cbc": Backend("cbc", "legacy", "cbc", "apt-get install coinor-cbc  (or: conda install -c conda-forge "
                   "coin-or-cbc); the `cbc` program must be on PATH", executable="cbc",
                   time_limit="sec", rel_gap="ratioGap", threads="threads", seed="randomCbcSeed"),
    "glpk": Backend("glpk", "legacy", "glpk", "apt-get install glpk-utils  (or: conda install -c conda-forge "
                    "glpk); the `glpsol` program must be on PATH", executable="glpsol",
                    time_limit="tmlim", rel_gap="mipgap", warm_start=False),
    "cplex": Backend("cplex", "legacy", "cplex", "install IBM ILOG CPLEX and put the `cplex` program on PATH",
                     executable="cplex", time_limit="timelimit", rel_gap="mipgap", threads="threads",
                     seed="randomseed"),
}


def available_backends() -> list[str]:
    """Names of the backends installed here, in :data:`BACKENDS` order."""
    out = []
    for name in BACKENDS:
        try:
            get_backend(name)
        except PlanmapError:
            continue
        out.append(name)
    return out


def get_backend(name: str) -> Backend:
    """The backend called ``name`` if it is installed; otherwise an error that says how to get it."""
    key = name.lower()
    if key not in BACKENDS:
        raise PlanmapError(f"unknown MIP backend {name!r}; planmap knows {', '.join(BACKENDS)}")
    b = BACKENDS[key]
    missing = None
    if b.module is not None and importlib.util.find_spec(b.module) is None:
        missing = f"the Python package {b.module!r}"
    elif b.executable is not None and shutil.which(b.executable) is None:
        missing = f"the program {b.executable!r} on PATH"
    if missing:
        raise SolverUnavailableError(f"MIP backend {b.name!r} needs {missing}, which is not installed: {b.install}")
    return b


def check_passthrough(backend: str, passthrough: dict[str, Any]) -> None:
    """Refuse options outside the backend's allow-list (:mod:`planmap.spec.backend_options`): a spec is
    validated already, this guards callers of the library that build SolveOptions themselves."""
    from planmap.spec.backend_options import option_error

    for key, value in passthrough.items():
        bad = option_error(backend, key, value)
        if bad is not None:
            raise PlanmapError(f"solver.options: {bad[0]} (allowed: {bad[1]})")


def options_record(backend: Backend, options: SolveOptions) -> dict[str, Any]:
    """What a result records of the options it ran with (backend, limits, passthrough)."""
    rec: dict[str, Any] = {"backend": backend.name, "time_limit": options.time_limit, "rel_gap": options.rel_gap,
                           "threads": options.threads, "seed": options.seed}
    if options.passthrough:
        rec["passthrough"] = dict(sorted(options.passthrough.items()))
    return rec

"""Which ``solver.options`` a spec may pass to each MIP backend: an allow-list, not a deny-list.

A spec is reviewed as configuration, not code, so its options must not reach the filesystem or the
process: backends accept options that write files (HiGHS ``log_file``/``write_model_file``, CBC
``printingOptions`` with files, Gurobi ``LogFile``/``ResultFile``, SCIP ``display/…`` and ``write``
settings…) or run things. Only options that tune the search are allowed — time limits, gaps,
threads, tolerances, heuristics, presolve, seeds, node and solution limits — each with the type of
its value. Anything else, and every option of a backend without a list, is a spec error that names
the allowed options (:func:`option_error`). The MIP layer checks again before passing them on.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ALLOWED", "option_error"]

_F, _I, _B = "number", "integer", "boolean"  # value kinds: a non-negative finite number, an integer, a bool


ALLOWED: dict[str, dict[str, Any]] = {
    "highs": {
        "time_limit": _F, "mip_rel_gap": _F, "mip_abs_gap": _F, "threads": _I, "random_seed": _I,
        "presolve": ("off", "choose", "on"), "parallel": ("off", "choose", "on"),
        "solver": ("simplex", "choose", "ipm"), "mip_heuristic_effort": _F,
        "mip_feasibility_tolerance": _F, "primal_feasibility_tolerance": _F, "dual_feasibility_tolerance": _F,
        "mip_max_nodes": _I, "mip_max_leaves": _I, "mip_max_improving_sols": _I, "mip_detection_level": _I,
        "simplex_strategy": _I, "run_crossover": ("off", "choose", "on"),
    },
    "cbc": {
        "sec": _F, "seconds": _F, "ratioGap": _F, "ratio": _F, "allowableGap": _F, "threads": _I,
        "randomSeed": _I, "randomCbcSeed": _I, "presolve": ("on", "off", "more"),
        "heuristicsOnOff": ("on", "off"), "feasibilityPump": ("on", "off", "both", "before"),
        "cuts": ("on", "off", "root", "ifmove", "forceOn"), "maxNodes": _I, "maxSolutions": _I,
        "primalTolerance": _F, "integerTolerance": _F,
    },
    "glpk": {
        "tmlim": _I, "mipgap": _F, "presol": _B, "nopresol": _B, "cuts": _B, "fpump": _B, "gomory": _B,
        "mir": _B, "cover": _B, "clique": _B, "seed": _I,
    },
    "gurobi": {
        "TimeLimit": _F, "MIPGap": _F, "MIPGapAbs": _F, "Threads": _I, "Seed": _I, "Presolve": _I,
        "Heuristics": _F, "MIPFocus": _I, "Cuts": _I, "FeasibilityTol": _F, "IntFeasTol": _F, "OptimalityTol": _F,
        "NodeLimit": _F, "SolutionLimit": _I, "Method": _I,
    },
    "cplex": {
        "timelimit": _F, "mip_tolerances_mipgap": _F, "mip_tolerances_absmipgap": _F, "threads": _I,
        "randomseed": _I, "preprocessing_presolve": _I, "mip_strategy_heuristicfreq": _I,
        "mip_tolerances_integrality": _F, "simplex_tolerances_feasibility": _F, "mip_limits_nodes": _I,
        "mip_limits_solutions": _I, "emphasis_mip": _I,
    },
    "scip": {
        "limits/time": _F, "limits/gap": _F, "limits/absgap": _F, "limits/nodes": _I, "limits/solutions": _I,
        "randomization/randomseedshift": _I, "parallel/maxnthreads": _I, "presolving/maxrounds": _I,
        "numerics/feastol": _F, "heuristics/emphasis/default": _B,
    },
}


def _value_error(kind: Any, value: Any) -> str | None:
    if isinstance(kind, tuple):
        return None if isinstance(value, str) and value in kind else f"one of {', '.join(kind)}"
    if kind == _B:
        return None if isinstance(value, bool) else "true or false"
    if kind == _I:
        return None if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else \
            "a non-negative integer"
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return None if ok else "a non-negative finite number"


def option_error(backend: str, key: str, value: Any) -> tuple[str, str] | None:
    """``(message, expected)`` when ``key: value`` may not be passed to ``backend``; None when it may."""
    allowed = ALLOWED.get(backend)
    if allowed is None:
        return (f"backend {backend!r} takes no solver.options (options are allowed for "
                f"{', '.join(ALLOWED)} only)", "no options")
    if key not in allowed:
        return (f"option {key!r} is not allowed for backend {backend!r}: only options that tune the search "
                "(limits, gaps, threads, tolerances, heuristics, presolve, seeds) are; options that write files "
                "or touch the process are refused", ", ".join(sorted(allowed)))
    expected = _value_error(allowed[key], value)
    if expected is not None:
        return f"option {key!r} of backend {backend!r} must be {expected}", expected
    return None

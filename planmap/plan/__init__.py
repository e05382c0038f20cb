"""Plans: the document (:mod:`~planmap.plan.document`), building it from a solution
(:mod:`~planmap.plan.build`), files (:mod:`~planmap.plan.files`: atomic save, load with staleness
checks) and the integrity check CI and the runtime run (:mod:`~planmap.plan.integrity`).
"""

from __future__ import annotations

import sys
import types

from planmap.plan.build import make_plan, to_solution
from planmap.plan.document import FORMAT_VERSION, PlanDocument, render
from planmap.plan.files import LoadedPlan, default_plan_path, header, header_for, load, save, stale_inputs
from planmap.plan.integrity import CheckReport, check, verify

__all__ = [
    "FORMAT_VERSION",
    "PlanDocument",
    "LoadedPlan",
    "CheckReport",
    "make_plan",
    "to_solution",
    "render",
    "header",
    "header_for",
    "save",
    "load",
    "stale_inputs",
    "check",
    "verify",
    "default_plan_path",
]


class _CallableModule(types.ModuleType):
    """``planmap.plan`` is this subpackage and, called, the API function :func:`planmap.api.plan`.

    Importing a subpackage binds its name on the parent package, so a plain function named
    ``planmap.plan`` would be replaced by this module the first time anything imports it."""

    def __call__(self, spec, **kwargs):
        from planmap.api import plan

        return plan(spec, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

"""Plans: the document (:mod:`~planmap.plan.document`), building it from a solution
(:mod:`~planmap.plan.build`), files (:mod:`~planmap.plan.files`: atomic save, load with staleness
checks) and the integrity check CI and the runtime run (:mod:`~planmap.plan.integrity`).
"""

from __future__ import annotations

from planmap.plan.build import make_plan, to_solution
from planmap.plan.document import FORMAT_VERSION, PlanDocument, render
from planmap.plan.files import LoadedPlan, default_plan_path, header, load, save, stale_inputs
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
    "save",
    "load",
    "stale_inputs",
    "check",
    "verify",
    "default_plan_path",
]

"""Entry points: ``load`` a plan file and compile it, or ``apply`` a plan to a JAX function.

``load`` and ``apply`` go through :func:`planmap.plan.verify`, the same integrity check as
``planmap check``: a stale input, an edited decision or prediction, a model input that is not the
spec's model — any plan ``check`` rejects is refused. Only ``unchecked=True`` (for experiments with
hand-written plans, which name no spec to check against) skips it; it still refuses a stale plan and
warns loudly. The runtime then reads the artifact the plan records as its ``model`` input.

``apply`` is the JAX convenience: it exports the function, checks that the export *is* the planned
artifact (the canonical module text — no locations, no module name — must be identical; see
:func:`planmap.runtime.artifact.canonical_text`), and returns an executable that takes and returns
the function's pytrees.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planmap.errors import InputError, PlanmapError
from planmap.plan import LoadedPlan
from planmap.plan import load as load_plan
from planmap.plan import verify as verify_plan
from planmap.runtime.artifact import Artifact, canonical_text
from planmap.runtime.executable import Executable

__all__ = ["load", "apply", "PytreeExecutable"]


UNCHECKED_WARNING = ("WARNING: running an UNCHECKED plan: its decisions, predictions and model input are not "
                     "verified against a spec (`planmap check` would be skipped)")


def _loaded(plan: str | Path | LoadedPlan, unchecked: bool) -> LoadedPlan:
    path = plan.path if isinstance(plan, LoadedPlan) else Path(plan)
    if unchecked:
        warnings.warn(f"{path}: {UNCHECKED_WARNING}", stacklevel=3)
        return load_plan(path)
    verify_plan(path)
    return load_plan(path)


def load(plan: str | Path | LoadedPlan, devices: Sequence | None = None, *, recompute: bool = True,
         unchecked: bool = False) -> Executable:
    """Compile the plan at ``plan`` for its artifact; plan devices map to ``devices`` or ``jax.devices()``.

    Raises StalePlanError ("plan is stale ...") when the artifact (or another input) changed, and
    IntegrityError when ``planmap check`` rejects the plan (``unchecked=True``: stale check only).
    """
    lp = _loaded(plan, unchecked)
    return Executable(lp.document, Artifact.from_file(lp.model_path), devices=devices, recompute=recompute)


class PytreeExecutable:
    """An :class:`Executable` that takes and returns the pytrees of the function it was applied to."""

    def __init__(self, executable: Executable, in_tree, out_tree):
        self.executable = executable
        self._in_tree = in_tree
        self._out_tree = out_tree

    def __call__(self, *args: Any) -> Any:
        import jax

        leaves, tree = jax.tree.flatten((args, {}))
        if tree != self._in_tree:
            raise InputError(f"the arguments' structure {tree} differs from the planned function's {self._in_tree}")
        return jax.tree.unflatten(self._out_tree, self.executable(*leaves))

    @property
    def input_shardings(self) -> Any:
        """Shardings in the arguments' pytree structure (place parameters with ``jax.device_put``)."""
        import jax

        return jax.tree.unflatten(self._in_tree, self.executable.input_shardings)[0]

    def stage_times(self) -> dict[int, float]:
        return self.executable.stage_times()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.executable, name)


def check_same_artifact(planned: Artifact, text: str, what: str = "the function") -> None:
    """Raise PlanmapError unless ``text`` is the same computation as the planned artifact."""
    mine, theirs = canonical_text(text), canonical_text(planned.text)
    if mine == theirs:
        return
    diff = list(difflib.unified_diff(theirs.splitlines(), mine.splitlines(), "planned artifact", what,
                                     n=0, lineterm=""))
    first = next((line for line in diff[2:] if line[:1] in "+-" and not line.startswith("@@")), "")
    raise PlanmapError(f"{what} does not export to the planned artifact {planned.path or ''}: "
                       f"{sum(1 for d in diff[2:] if d[:1] in '+-')} line(s) differ, first: {first.strip()[:160]}; "
                       "re-export the model and re-solve, or pass the function the plan was made for")


def apply(plan: str | Path | LoadedPlan, fn: Any, *example_args: Any, devices: Sequence | None = None,
          unchecked: bool = False, **jit_kwargs: Any) -> PytreeExecutable:
    """Export ``fn`` at ``example_args`` (arrays or ShapeDtypeStructs; or pass a ``jax.export.Exported``
    as ``fn``), check it is the plan's artifact, and compile the plan for it."""
    from jax import export as jexport

    from planmap.export import exported

    lp = _loaded(plan, unchecked)
    planned = Artifact.from_file(lp.model_path)
    if isinstance(fn, jexport.Exported):
        exp = fn
    else:
        if not example_args:
            raise PlanmapError("apply requires example arguments (arrays or jax.ShapeDtypeStructs) to export fn")
        exp = exported(fn, *example_args, **jit_kwargs)
    check_same_artifact(planned, exp.mlir_module(), getattr(fn, "__name__", "the function"))
    return PytreeExecutable(Executable(lp.document, planned, devices=devices), exp.in_tree, exp.out_tree)

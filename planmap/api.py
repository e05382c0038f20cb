"""The Python API: ``planmap.plan(spec) -> Plan``, ``planmap.load_plan(path)``, ``Plan.save``, ``Plan.shardings``.

A :class:`Plan` is a plan document plus the directory its input paths are relative to, so it can be
saved anywhere (the inputs are re-expressed relative to the new file, as ``planmap solve -o`` would
write them; the bytes equal the CLI's for the same spec and options). ``Plan.shardings`` turns an
SPMD plan (one stage over the plan mesh: data-parallel, FSDP, Megatron, the sharding IP, or a
single device) into ``jax.sharding.NamedSharding``\\ s a JAX user passes to their own ``jax.jit`` —
the plan's decisions without planmap's runtime. Pipeline plans have no single-program shardings:
run them with :func:`planmap.runtime.load`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planmap.errors import InputError, PlanmapError
from planmap.explain import plan_kind
from planmap.plan.build import make_plan
from planmap.plan.document import PlanDocument, render
from planmap.plan.files import default_plan_path, header_for
from planmap.plan.files import load as load_file

__all__ = ["Plan", "plan", "load_plan", "solve_spec", "regenerate_args"]


def regenerate_args(solver: str | None = None, time_limit: Any = None, gap: float | None = None,
                    threads: int | None = None) -> list[str]:
    """The ``planmap solve`` flags that reproduce a solve with these overrides (for the plan's header)."""
    extra: list[str] = []
    if solver:
        extra += ["--solver", solver]
    if time_limit is not None:
        extra += ["--time-limit", time_limit if isinstance(time_limit, str) else f"{float(time_limit):g}s"]
    if gap is not None:
        extra += ["--gap", str(gap)]
    if threads is not None:
        extra += ["--threads", str(threads)]
    return extra


def _limit_seconds(time_limit: Any, spec_ns: float) -> float:
    from planmap.units import parse_duration

    if time_limit is None:
        return spec_ns / 1e9
    if isinstance(time_limit, str):
        try:
            return parse_duration(time_limit) / 1e9
        except ValueError as e:
            raise InputError(f"--time-limit: {e}", code="value") from None
    if not (isinstance(time_limit, int | float) and math.isfinite(time_limit) and time_limit > 0):
        raise InputError(f"time limit must be a positive number of seconds or a string like '60s', got {time_limit!r}",
                         code="value")
    return float(time_limit)


def solve_spec(loaded: Any, *, solver: str | None = None, time_limit: Any = None, gap: float | None = None,
               threads: int | None = None, progress: Any = None, on_problem: Any = None):
    """Build the problem of a loaded spec and solve it with the spec's solver settings, flags winning.

    ``on_problem(problem)`` is called once the model is loaded (the CLI updates its status line).
    Returns ``(problem, SolveResult)``, the problem with the plan's microbatches and schedule decided (the
    result's); the one path from a spec to an answer for the CLI and the API.
    """
    from planmap.assemble import build_problem
    from planmap.problem import SolveOptions
    from planmap.solve import solve as run_solve

    cfg = loaded.spec.solver
    options = SolveOptions.from_spec(cfg, time_limit=_limit_seconds(time_limit, cfg.time_limit), rel_gap=gap,
                                     threads=threads or None, progress=progress)
    problem = build_problem(loaded)  # remat: auto is a per-stage decision (planmap.remat_stages)
    if on_problem is not None:
        on_problem(problem)
    result = run_solve(problem, solver or cfg.name, options)
    return result.problem, result


@dataclass(eq=False)
class Plan:
    """A plan document and the directory its input paths are relative to.

    ``path`` is the file it was loaded from or last saved to (None for a fresh, unsaved plan);
    ``result`` is the :class:`planmap.solve.SolveResult` of a fresh plan (None for a loaded one), whose
    ``wall_time`` is the solve's wall time — plan files do not record it, so that they are reproducible.
    """

    document: PlanDocument
    base: Path
    path: Path | None = None
    result: Any = None
    regenerate: list[str] = field(default_factory=list)
    default_path: Path | None = None

    def _target(self, path: str | Path | None) -> Path:
        if path is not None:
            return Path(path)
        if self.path is not None:
            return self.path
        if self.default_path is not None:
            return self.default_path
        raise InputError(f"plan {self.name!r} was never saved: pass a path to save it to")

    @property
    def name(self) -> str:
        return self.document.name

    @property
    def kind(self) -> str:
        """``spmd``, ``single-device``, ``placement`` or ``pipeline`` (see :func:`planmap.explain.plan_kind`)."""
        return plan_kind(self.document)

    def _rebased(self, directory: Path) -> PlanDocument:
        inputs = [inp.model_copy(update={"path": _rel(self.base / inp.path, directory)})
                  for inp in self.document.inputs]
        return self.document.model_copy(update={"inputs": inputs})

    def text(self, path: str | Path | None = None) -> str:
        """The file's text as :meth:`save` writes it at ``path`` (default: where it lives, else the default path)."""
        target = self._target(path)
        doc = self._rebased(target.resolve().parent)
        return render(doc, header_for(doc, target, self.regenerate))

    def save(self, path: str | Path | None = None) -> Path:
        """Write the plan atomically to ``path`` (str or Path; default: where it was loaded from or saved to,
        else ``plans/<spec>.plan.yaml``), with inputs relative to it and the regenerate command in its header."""
        from planmap.io import write_atomic

        path = self._target(path)
        write_atomic(path, self.text(path))
        self.document = self._rebased(path.resolve().parent)  # before base moves: inputs are relative to it
        self.base, self.path = path.resolve().parent, path
        return path

    def shardings(self, mesh_or_devices: Any = None, *, like: Any = None) -> Any:
        """``in_shardings`` for ``jax.jit``: one ``NamedSharding`` per argument of the planned artifact.

        ``mesh_or_devices`` is a ``jax.sharding.Mesh`` with the plan mesh's axes, or a sequence of
        devices (default ``jax.devices()``) whose first ``prod(plan mesh)`` become the plan mesh in
        row-major order. Arguments the plan does not shard are replicated. With ``like`` (the
        example arguments, any pytree) the shardings come in its structure instead of a flat tuple.
        Raises :class:`PlanmapError` for a plan with several stages (a pipeline is not one program).
        """
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        doc = self.document
        if plan_kind(doc) in ("pipeline", "placement"):
            raise PlanmapError(f"plan {doc.name!r} has {len(doc.stages)} stages; a pipeline or placement plan is not "
                               "one SPMD program: run it with planmap.runtime.load(path)")
        mesh = _mesh(doc, mesh_or_devices)
        specs = {e.arg: tuple(tuple(x) if isinstance(x, list) else x for x in e.spec)
                 for e in doc.shardings.args if e.arg is not None}
        n_args = self._num_args()
        flat = tuple(NamedSharding(mesh, P(*specs.get(i, ()))) for i in range(n_args))
        if like is None:
            return flat
        import jax

        leaves, tree = jax.tree.flatten(like)
        if len(leaves) != n_args:
            raise InputError(f"`like` has {len(leaves)} leaves, but the planned artifact takes {n_args} arguments")
        return jax.tree.unflatten(tree, flat)

    def _num_args(self) -> int:
        if self.result is not None:
            return len(self.result.problem.original.args)
        from planmap.frontend import load_model

        model = next((inp for inp in self.document.inputs if inp.role == "model"), None)
        if model is None:
            raise InputError(f"plan {self.document.name!r} records no model input", code="plan-input")
        return len(load_model(self.base / model.path).args)


def _mesh(doc: PlanDocument, mesh_or_devices: Any):
    """The JAX mesh of an SPMD plan's one stage: the given Mesh (checked), or built from a device list
    that stands for the plan mesh's devices in order (a stage on part of them takes its own positions)."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh

    st = doc.stages[0]
    names, sizes = tuple(doc.mesh.axis_names), tuple(doc.mesh.axis_sizes)
    positions = list(range(math.prod(sizes)))
    if st.devices != doc.mesh.devices:  # one stage on part of the plan mesh
        names, sizes = ((tuple(st.mesh.axis_names), tuple(st.mesh.axis_sizes)) if st.mesh
                        else (("device",), (len(st.devices),)))
        missing = [d for d in st.devices if d not in doc.mesh.devices]
        if missing:
            raise InputError(f"plan stage 0 runs on {missing[0]!r}, which is not in the plan's mesh")
        positions = [doc.mesh.devices.index(d) for d in st.devices]
    want = tuple(zip(names, sizes, strict=True))
    if isinstance(mesh_or_devices, Mesh):
        got = tuple(zip(mesh_or_devices.axis_names, mesh_or_devices.devices.shape, strict=True))
        if got != want:
            raise InputError(f"the mesh has axes {got}, but the plan's mesh is {want}")
        return mesh_or_devices
    devices = list(jax.devices() if mesh_or_devices is None else mesh_or_devices)
    need = max(positions) + 1
    if len(devices) < need:
        raise InputError(f"the plan's mesh needs {need} devices, but {len(devices)} were given")
    grid = np.array([devices[i] for i in positions], dtype=object).reshape(sizes)
    return Mesh(grid, names, axis_types=(AxisType.Auto,) * len(names))


def _rel(path: Path, base: Path) -> str:
    try:
        return Path(os.path.relpath(Path(path).resolve(), Path(base).resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(path).resolve().as_posix()


def plan(spec: Any, *, solver: str | None = None, time_limit: Any = None, gap: float | None = None,
         threads: int | None = None, progress: Any = None) -> Plan:
    """Solve ``spec`` (a path as ``str`` or ``Path``, or a :class:`planmap.spec.LoadedSpec`) and return its plan.

    ``solver``, ``time_limit`` (seconds, or a string like ``"60s"``), ``gap`` and ``threads`` override
    the spec's ``solver`` section, like ``planmap solve``'s flags. Raises :class:`planmap.errors.SpecError`
    for an invalid spec and :class:`planmap.errors.InfeasibleError` when no plan fits. Nothing is written:
    call :meth:`Plan.save`.
    """
    from planmap.spec import LoadedSpec, load_spec

    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    _, result = solve_spec(loaded, solver=solver, time_limit=time_limit, gap=gap, threads=threads,
                           progress=progress)
    target = default_plan_path(loaded.path)
    doc = make_plan(result.problem, result.solution, result.evaluation, spec=loaded, plan_path=target)
    return Plan(doc, target.resolve().parent, None, result, regenerate_args(solver, time_limit, gap, threads), target)


def load_plan(path: str | Path, *, verify_inputs: bool = True) -> Plan:
    """Read a plan file; with ``verify_inputs`` raise :class:`planmap.errors.StalePlanError` when an input changed.

    (``planmap check`` / :func:`planmap.plan.check` verify the decisions too.)"""
    lp = load_file(path, verify_inputs=verify_inputs)
    return Plan(lp.document, lp.path.resolve().parent, lp.path, regenerate=_header_flags(lp.path))


def _header_flags(path: Path) -> list[str]:
    """The flags after ``-o PLAN`` in a plan's regenerate comment, so a re-saved plan keeps them."""
    import shlex

    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words = line.lstrip("# ").split(" ", 2)
        if words[:2] == ["planmap", "solve"]:
            try:
                argv = shlex.split(line.lstrip("# "))
            except ValueError:
                return []
            return argv[argv.index("-o") + 2:] if "-o" in argv else []
    return []


"""What a plan's certificate may claim, re-derived without solving again: solver, version, backend, options, message.

``planmap check`` holds the certificate to these rules (docs/errors.md, "Plan integrity"):

- **solver**: the spec's ``solver.name``, or for ``auto`` one of the candidates ``auto`` tries for this problem
  (:func:`planmap.solve.solver_choices`), or a name such a solver's answer carries (the sharding solver answers
  with its best baseline's name). A plan solved with ``solve --solver X`` where the spec does not allow
  ``X`` is an experiment: it does not follow from its spec, so it fails check (put the solver in the spec).
- **version**: the version this installation's solver writes. Another version is *stale* (regenerate the plan),
  not broken; a solver that is not installed here cannot vouch for any version, so its plans are stale too.
- **backend**: recorded exactly when ``options.backend`` is, only by a solver that runs a MIP backend, and it
  names the backend ``options.backend`` gives.
- **options**: ``time_limit``, ``rel_gap``, ``threads`` and ``seed`` (and ``backend`` when one ran) equal the
  spec's ``solver`` section with its defaults filled exactly as ``solve`` fills them
  (:meth:`planmap.problem.SolveOptions.from_spec`), and backend ``passthrough`` options equal the spec's
  ``solver.options``, and ``checkpoint_sha256`` (a DQN's) is the hash of the checkpoint input. CLI overrides
  (``--time-limit``, ``--gap``, ``--threads``) therefore give a plan that fails check: a committed plan must
  follow from its spec alone.
- **message**: not free text. It is :func:`certificate_message` of the structured fields (status, objective,
  bound, gap, time limit), written by :func:`planmap.plan.build.make_plan`, so check re-renders it like any
  derived field. The solver's own remarks (the space it searched, candidates it judged, per-stage gaps)
  cannot be checked without solving again: the plan records them apart, as ``solver.remarks``, for review,
  and only ``check --resolve`` compares them.

A solver's bound (a MIP's dual bound, the ``cluster`` solver's bound over its stated space) is likewise not
re-derivable without solving: check holds it to ``bound ≤ objective`` and ``gap`` = the relative gap of the two
(:mod:`planmap.plan.integrity`), and ``check --resolve`` reproduces it.

Options a solver chooses itself (e.g. the latency IP's ``q``, a warm start's name, the DQN's evaluation budget)
are not re-derivable without solving: ``check --resolve`` covers them.
"""

from __future__ import annotations

from typing import Any

from planmap.errors import PlanmapError

__all__ = ["certificate_message", "certificate_rules"]

_HEADS = {"optimal": "proven optimal", "gap_reached": "proven within the relative gap {rel_gap:g}",
          "time_limit": "stopped at the time limit of {time_limit:g} s",
          "bounded": "search complete, gap to a proven bound above the relative gap {rel_gap:g}",
          "interrupted": "interrupted by the user",
          "heuristic": "heuristic (no optimality proof)"}


def certificate_message(status: str, objective_ns: int | None, bound_ns: int | None, gap: float | None,
                        options: dict[str, Any]) -> str:
    """The certificate's message: a deterministic rendering of its structured fields (module doc)."""
    fill = {"rel_gap": options.get("rel_gap", 0.0), "time_limit": options.get("time_limit", 0.0)}
    try:
        head = _HEADS.get(status, status).format(**fill)
    except (TypeError, ValueError):  # a non-numeric option: check reports the option itself
        head = status
    parts = [head]
    if objective_ns is not None:
        parts.append(f"objective {objective_ns} ns")
    parts.append("no bound" if bound_ns is None else f"bound {bound_ns} ns")
    if gap is not None:
        parts.append(f"gap {gap:.4%}")
    return "; ".join(parts)


def _same(value: Any, want: Any) -> bool:
    """Equal and of the same type (``true`` is not the thread count 1, ``30`` not the time limit 30.0)."""
    return type(value) is type(want) and value == want


def _option_problems(options: dict[str, Any], spec_solver: Any, backend: str | None) -> list[str]:
    from planmap.problem import SolveOptions

    want = SolveOptions.from_spec(spec_solver)
    expected: dict[str, Any] = {"time_limit": float(want.time_limit), "rel_gap": float(want.rel_gap),
                                "threads": int(want.threads), "seed": int(want.seed)}
    if backend is not None:
        expected["backend"] = str(want.backend)
    out = []
    for key, value in expected.items():
        if key not in options:
            out.append(f"options record no {key} (the spec's is {value!r})")
        elif not _same(options[key], value):
            out.append(f"option {key} is {options[key]!r}, but the spec gives {value!r} (a CLI override or an edit: "
                       "a checked plan follows from its spec alone; set it in the spec's solver section)")
    if backend is None and "backend" in options:
        out.append(f"options name the backend {options['backend']!r}, but the certificate records none")
    passthrough = dict(sorted(dict(want.passthrough).items()))
    if "passthrough" in options and options["passthrough"] != passthrough:
        out.append(f"option passthrough is {options['passthrough']!r}, but the spec's solver.options are "
                   f"{passthrough!r}")
    return out


def certificate_rules(doc: Any, spec: Any, problem: Any) -> tuple[list[str], list[str]]:
    """``(problems, stale)``: how the certificate of ``doc`` breaks the rules of the module doc for ``spec``'s
    ``problem``."""
    from planmap.solve import installed_version, solver_choices

    s, spec_solver = doc.solver, spec.spec.solver
    problems = _option_problems(dict(s.options), spec_solver, s.backend)
    checkpoint = next((i.sha256 for i in doc.inputs if i.role == "checkpoint"), None)
    if s.options.get("checkpoint_sha256") != checkpoint:
        problems.append(f"option checkpoint_sha256 {s.options.get('checkpoint_sha256')!r} is not the hash of the "
                        f"checkpoint input ({checkpoint!r})")
    allowed = solver_choices(problem, spec_solver.name, recorded=True)
    if s.name not in allowed:
        problems.append(f"solver {s.name!r} is not one the spec allows (solver.name {spec_solver.name!r}: "
                        f"{', '.join(allowed)})")
        return problems, []
    try:
        version, mip = installed_version(s.name, problem)
    except PlanmapError as e:
        return problems, [f"solver {s.name!r} that made the plan is not usable here ({e}), so its version "
                          f"{s.version!r} cannot be vouched for"]
    if s.backend is not None and not mip:
        problems.append(f"backend {s.backend!r}: solver {s.name!r} runs no MIP backend")
    elif s.backend is not None and s.backend.split(" ")[0].removesuffix("_direct") != s.options.get("backend"):
        problems.append(f"backend {s.backend!r} is not the backend the options name ({s.options.get('backend')!r})")
    stale = []
    if version is not None and s.version != version:
        stale.append(f"stale: the plan was made by {s.name} version {s.version!r}; this installation's {s.name} is "
                     f"version {version!r} (plans of another solver version are out of date)")
    return problems, stale

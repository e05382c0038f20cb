"""Plan integrity: a plan that passes :func:`check` is exactly what its spec and artifact give.

A plan records decisions (stages: devices and op ranges; shardings) and many things *derived* from
the spec, the artifact and those decisions (inputs and their hashes, data arguments, schedule, mode,
microbatches, mesh, predictions). ``check`` trusts none of the derived fields: it rebuilds the whole
document with :func:`planmap.plan.build.make_plan` from the spec the plan names, the spec's model
and the plan's decisions (carrying the recorded certificate), and requires the canonical rendering
to be equal field by field. The decisions themselves are checked for validity (devices exist and
are distinct per stage, op ranges in bounds and a partition), the certificate for consistency
(objective equals the evaluated one, bound ≤ objective, gap = relative gap, a known status), and
the digest line for tamper evidence. ``check(resolve=True)`` also solves the spec again with the
*spec's* solver and requires identical bytes — the proof that the decisions are what a solve gives.

``planmap run`` and :func:`planmap.runtime.load` call :func:`verify`, which raises on any problem:
there is no way to execute a plan that ``check`` rejects except an explicit ``unchecked``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from planmap.errors import InputError, PlanmapError
from planmap.plan.document import PlanDocument, body_digest, render
from planmap.plan.files import load, stale_inputs

__all__ = ["CheckReport", "IntegrityError", "check", "verify", "certificate_problems", "decision_problems"]

_GAP_TOLERANCE = 1e-6  # the plan records the gap rounded to 6 decimals


@dataclass
class CheckReport:
    """What `planmap check` found; ``ok`` when nothing is wrong."""

    path: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class IntegrityError(PlanmapError):
    """A plan failed its integrity check (see :func:`check`)."""


def decision_problems(doc: PlanDocument) -> list[str]:
    """Structural faults of the decisions that need no spec: duplicate devices or stage ids, empty or
    reversed op ranges."""
    out = []
    ids = [st.id for st in doc.stages]
    if len(set(ids)) != len(ids):
        out.append("stage ids repeat")
    for st in doc.stages:
        if len(set(st.devices)) != len(st.devices):
            out.append(f"stage {st.id} lists a device twice ({', '.join(st.devices)})")
        bad = [r for r in st.ops if r[0] < 0 or r[1] <= r[0]]
        if bad:
            out.append(f"stage {st.id} has an empty, reversed or negative op range {list(bad[0])}")
    return out


def certificate_problems(doc: PlanDocument) -> list[str]:
    """Certificate rules: a known status, objective = predicted objective, bound ≤ objective, gap equal
    to the relative gap of objective and bound and not negative."""
    from planmap.problem import Status, relative_gap

    s, out = doc.solver, []
    if s.status not in {x.value for x in Status} or s.status == Status.INFEASIBLE:
        out.append(f"certificate status {s.status!r} is not a status of a plan "
                   f"({', '.join(x.value for x in Status if x != Status.INFEASIBLE)})")
    if s.objective_ns is not None and s.objective_ns != doc.predicted.objective_ns:
        out.append(f"certificate objective {s.objective_ns} ns differs from the predicted objective "
                   f"{doc.predicted.objective_ns} ns")
    if s.bound_ns is not None and s.objective_ns is not None and s.bound_ns > s.objective_ns:
        out.append(f"certificate bound {s.bound_ns} ns is above the objective {s.objective_ns} ns")
    if s.gap is not None and s.gap < 0:
        out.append(f"certificate gap {s.gap} is negative")
    expected = relative_gap(s.objective_ns, s.bound_ns)
    if (expected is None) != (s.gap is None):
        out.append(f"certificate gap {s.gap} does not follow from objective {s.objective_ns} ns and bound "
                   f"{s.bound_ns} ns (expected {expected})")
    elif expected is not None and s.gap is not None:
        slack = _GAP_TOLERANCE + 2.0 / max(abs(s.objective_ns or 0), 1)  # the ns rounding of objective and bound
        if abs(expected - s.gap) > slack:
            out.append(f"certificate gap {s.gap} is not the relative gap {expected:.6f} of objective "
                       f"{s.objective_ns} ns and bound {s.bound_ns} ns")
    if s.status in (Status.OPTIMAL, Status.GAP_REACHED) and s.bound_ns is None:
        out.append(f"certificate status {s.status} claims a proof but records no bound")
    return out


def _field_problems(recorded: PlanDocument, rebuilt: PlanDocument) -> list[str]:
    """One message per top-level field whose recorded value is not the re-derived one."""
    out = []
    for name in PlanDocument.model_fields:
        if name in ("digest", "generator"):
            continue
        a, b = getattr(recorded, name), getattr(rebuilt, name)
        if a != b:
            out.append(f"not reproducible: field {name!r} does not follow from the spec, the artifact and the "
                       "decisions: "
                       f"recorded {_short(a)}, re-derived {_short(b)}")
    return out


def _short(v, width: int = 160) -> str:
    text = repr(v.model_dump(mode="json")) if hasattr(v, "model_dump") else repr(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def _spec_inputs(plan, spec) -> list[str]:
    """The plan's spec input must name the spec, and its model/cluster inputs the spec's files."""
    want = {"spec": spec.path, "model": spec.model_path}
    if spec.cluster_path is not None:
        want["cluster"] = spec.cluster_path
    out = []
    for role, p in want.items():
        got = plan.input_path(role)
        if got is None or got != Path(p).resolve():
            out.append(f"input {role} is {got}, but the spec's {role} is {Path(p).resolve()}")
    return out


def check(path: str | Path, *, resolve: bool = False) -> CheckReport:
    """Check a plan against its spec and artifact (see the module docstring); ``resolve`` also re-solves."""
    from planmap.assemble import build_problem
    from planmap.evaluate import evaluate
    from planmap.plan.build import make_plan, to_solution
    from planmap.spec import load_spec

    path = Path(path)
    report = CheckReport(path)
    plan = load(path, verify_inputs=False)
    doc = plan.document
    if doc.digest is None:
        report.problems.append(f"the plan has no digest line (format {doc.format_version}); regenerate it with: "
                               f"{plan.regenerate_command()}")
    elif doc.digest != body_digest(doc):
        report.problems.append("the digest does not match the plan's contents: the plan was edited after it was "
                               f"written; regenerate it with: {plan.regenerate_command()}")
    for role, p, _, current in stale_inputs(plan):
        report.problems.append(f"stale: {role} input {p} {'is missing' if current is None else 'changed'}; "
                               f"regenerate with: {plan.regenerate_command()}")
    report.problems += [f"inconsistent certificate: {m}" for m in certificate_problems(doc)]
    blocking = [f"invalid decisions: {m}" for m in decision_problems(doc)]
    spec_path = plan.spec_path
    if spec_path is None:
        blocking.append("the plan records no spec input, so it cannot be checked")
    if blocking or spec_path is None or any(m.startswith("stale:") for m in report.problems):
        report.problems += blocking
        return report
    spec = load_spec(spec_path)
    swapped = _spec_inputs(plan, spec)
    if swapped:
        report.problems += [f"inputs differ from the spec's: {m}" for m in swapped]
        return report
    problem = build_problem(spec)
    try:
        solution = to_solution(problem, doc)
    except InputError as e:
        report.problems.append(f"decisions do not fit the model: {e}")
        return report
    throughput = problem.objective == "throughput"
    # schedule and microbatches follow from the spec, not from the plan (an SPMD plan has no pipeline schedule)
    pipelined = throughput and solution.shardings is None
    solution = replace(solution, schedule=problem.schedule if pipelined else None,
                       microbatches=problem.microbatches if throughput else 1)
    ev = evaluate(problem, solution)
    report.problems += [f"infeasible: {v}" for v in ev.violations]
    rebuilt = make_plan(problem, solution, ev, spec=spec, plan_path=path, name=doc.name)
    report.problems += _field_problems(doc, rebuilt.model_copy(update={"generator": doc.generator}))
    if resolve and report.ok:
        _resolve(report, plan, spec, problem, doc)
    return report


def _resolve(report: CheckReport, plan, spec, problem, doc: PlanDocument) -> None:
    """Solve the spec again with the spec's solver and the recorded limits; require identical bytes."""
    from planmap.plan.build import make_plan
    from planmap.problem import SolveOptions
    from planmap.solve import solve

    s, o = spec.spec.solver, doc.solver.options
    recorded = {k: kind(o[k]) for k, kind in (("time_limit", float), ("rel_gap", float), ("threads", int),
                                              ("seed", int), ("backend", str)) if k in o}
    opts = SolveOptions.from_spec(s, **recorded)
    result = solve(problem, s.name, opts)
    fresh = make_plan(problem, result.solution, result.evaluation, spec=spec, plan_path=plan.path, name=doc.name)
    fresh = fresh.model_copy(update={"generator": doc.generator})
    if render(fresh, []) != render(doc, []):
        what = "; ".join(_field_problems(doc, fresh)) or "the rendering differs"
        report.problems.append(f"not reproducible: solving the spec again with its solver {s.name!r} gives a "
                               f"different plan ({what}); regenerate with: {plan.regenerate_command()}")
    else:
        report.notes.append(f"re-solved with {s.name}: identical plan")


def verify(path: str | Path) -> None:
    """Raise StalePlanError (a changed input) or :class:`IntegrityError` unless :func:`check` accepts the plan."""
    load(path, verify_inputs=True)
    report = check(path)
    if report.ok:
        return
    text = "; ".join(report.problems[:3]) + (f" (and {len(report.problems) - 3} more)"
                                             if len(report.problems) > 3 else "")
    raise IntegrityError(f"{path}: refusing a plan that fails `planmap check`: {text}")

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

Findings come in two kinds, as in Terraform's detailed exit codes: ``stale`` (an input changed by
meaning, or an intact plan of another planmap version no longer reproduces: regenerate it; `check`
exits 2) and ``problems``
(a broken, tampered or unreadable plan, an input gone missing: `check` exits 1). Inputs are compared
by the hashes the plan's format recorded (spec and cluster by meaning from format 1.2 on; a 1.1
plan by bytes), and the re-derived document is written in the recorded format before comparing.

``planmap run`` and :func:`planmap.runtime.load` call :func:`verify`, which raises on any problem:
there is no way to execute a plan that ``check`` rejects except an explicit ``unchecked``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from planmap.errors import InputError, PlanmapError
from planmap.plan.certificate import certificate_rules
from planmap.plan.document import FORMAT_VERSION, PlanDocument, body_digest, render
from planmap.plan.files import load, stale_inputs

__all__ = ["CheckReport", "IntegrityError", "check", "verify", "certificate_problems", "decision_problems"]

_GAP_TOLERANCE = 1e-6  # the plan records the gap rounded to 6 decimals


@dataclass
class CheckReport:
    """What `planmap check` found; ``ok`` when nothing is wrong."""

    path: Path
    problems: list[str] = field(default_factory=list)  # broken, tampered or uncheckable: an error
    notes: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # out of date: regenerate the plan
    regenerate: str = ""  # the command that regenerates the plan

    @property
    def ok(self) -> bool:
        return not self.problems and not self.stale

    @property
    def status(self) -> str:
        """``ok``, ``stale`` (regenerate) or ``error`` (broken; wins over stale)."""
        return "error" if self.problems else "stale" if self.stale else "ok"

    @property
    def messages(self) -> list[str]:
        """Every finding, errors first."""
        return [*self.problems, *self.stale]


class IntegrityError(PlanmapError):
    """A plan failed its integrity check (see :func:`check`)."""

    code = "integrity"


def decision_problems(doc: PlanDocument) -> list[str]:
    """Structural faults of the decisions that need no spec: duplicate devices or stage ids, empty or
    reversed op ranges, a ZeRO stage that is not 0, 1 or 2 or that is set on an inference plan (ZeRO
    shards training state; stage 3 is written as parameter specs)."""
    out = []
    zero = doc.shardings.zero
    if zero not in (0, 1, 2):
        out.append(f"zero: {zero} is not a ZeRO stage planmap writes (0, 1 or 2; stage 3 is parameter specs)")
    elif zero and doc.mode != "training":
        out.append(f"zero: {zero} on an inference plan (ZeRO shards gradients and optimizer state: training only)")
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
    if s.status in (Status.OPTIMAL, Status.GAP_REACHED, Status.BOUNDED) and s.bound_ns is None:
        out.append(f"certificate status {s.status} claims a proof but records no bound")
    if s.status == Status.HEURISTIC and s.bound_ns is not None:
        out.append(f"certificate status {s.status} means no bound, but it records the bound {s.bound_ns} ns")
    return out


def mesh_problems(doc: PlanDocument, ev) -> list[str]:
    """A stage whose layout splits nothing runs the same on any shape of its devices: it must record its mesh
    in the canonical form the solver writes (:func:`planmap.sharding.solution.mesh_axes`: one axis ``a0`` over
    all its devices), so a reshaped mesh is not a second plan with the same evaluation. ``ev``: the plan's
    evaluation (whole-cluster stages carry their complete layouts; a one-stage SPMD plan records every op
    result's spec, so its recorded specs tell)."""
    from planmap.sharding.solution import REPLICATED_AXIS

    if ev.stages:
        flat = [(doc.stages[k], not any(dim for spec in se.layout.layout.values() for dim in spec))
                for k, se in enumerate(ev.stages) if k < len(doc.stages)]
    elif len(doc.stages) == 1 and doc.stages[0].mesh is not None and (doc.shardings.args or doc.shardings.values):
        entries = [*doc.shardings.args, *doc.shardings.values]
        flat = [(doc.stages[0], all(x is None for e in entries for x in e.spec))]
    else:
        return []
    out = []
    for st, replicated in flat:
        want = ([REPLICATED_AXIS], [len(st.devices)])
        if replicated and st.mesh is not None and (st.mesh.axis_names, st.mesh.axis_sizes) != want:
            out.append(f"stage {st.id} splits nothing, so its mesh is recorded as one axis {REPLICATED_AXIS} of its "
                       f"{len(st.devices)} devices (the canonical form), not {st.mesh.axis_names} "
                       f"{st.mesh.axis_sizes}")
    return out


def _field_problems(recorded: PlanDocument, rebuilt: PlanDocument, *, remarks: bool = False) -> list[str]:
    """One message per top-level field whose recorded value is not the re-derived one; the solver's remarks
    only with ``remarks`` (re-solved: nothing else can derive them)."""
    out = []
    for name in PlanDocument.model_fields:
        if name in ("digest", "generator"):
            continue
        a, b = getattr(recorded, name), getattr(rebuilt, name)
        if name == "solver" and not remarks:
            a, b = a.model_copy(update={"remarks": ""}), b.model_copy(update={"remarks": ""})
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


def _format(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def _as_recorded(recorded: PlanDocument, rebuilt: PlanDocument) -> PlanDocument:
    """The re-derived document in the recorded plan's terms: its format version, no canonical hashes when it
    recorded none (format 1.1), and the recorded byte hash of an input whose content hash still matches (a
    comment edit changes the bytes, not the meaning)."""
    old = {i.role: i for i in recorded.inputs}
    before_canonical = _format(recorded.format_version) < (1, 2)  # format 1.2 added canonical_sha256
    inputs = []
    for inp in rebuilt.inputs:
        was = old.get(inp.role)
        if before_canonical or (was is not None and was.canonical_sha256 is None):
            inp = inp.model_copy(update={"canonical_sha256": None})
        if was is not None and was.canonical_sha256 is not None and was.canonical_sha256 == inp.canonical_sha256:
            inp = inp.model_copy(update={"sha256": was.sha256})
        inputs.append(inp)
    return rebuilt.model_copy(update={"inputs": inputs, "format_version": recorded.format_version,
                                      "generator": recorded.generator})


def check(path: str | Path, *, resolve: bool = False) -> CheckReport:
    """Check a plan against its spec and artifact (see the module docstring); ``resolve`` also re-solves."""
    from planmap.assemble import build_problem, plan_remat
    from planmap.evaluate import evaluate
    from planmap.microbatching import as_planned
    from planmap.microbatching import pipelined as planned_pipeline
    from planmap.peak_memory import with_peak_memory
    from planmap.plan.build import SOLVER_INPUT_ROLES, make_plan, to_solution
    from planmap.spec import load_spec

    path = Path(path)
    report = CheckReport(path)
    plan = load(path, verify_inputs=False)
    report.regenerate = plan.regenerate_command()
    doc = plan.document
    if doc.digest is None:
        report.problems.append(f"the plan has no digest line (format {doc.format_version}); regenerate it with: "
                               f"{plan.regenerate_command()}")
    elif doc.digest != body_digest(doc):
        report.problems.append("the digest does not match the plan's contents: the plan was edited after it was "
                               f"written; regenerate it with: {plan.regenerate_command()}")
    for role, p, _, current in stale_inputs(plan):
        if current is None:
            report.problems.append(f"{role} input {p} is missing; restore it, or regenerate the plan with: "
                                   f"{plan.regenerate_command()}")
        else:
            report.stale.append(f"stale: {role} input {p} changed; regenerate with: {plan.regenerate_command()}")
    if _format(doc.format_version) > _format(FORMAT_VERSION):
        report.stale.append(f"the plan is in format {doc.format_version}, newer than this planmap writes "
                            f"({FORMAT_VERSION}), so its fields cannot all be checked: upgrade planmap")
    report.problems += [f"inconsistent certificate: {m}" for m in certificate_problems(doc)]
    blocking = [f"invalid decisions: {m}" for m in decision_problems(doc)]
    spec_path = plan.spec_path
    if spec_path is None:
        blocking.append("the plan records no spec input, so it cannot be checked")
    if blocking or spec_path is None or report.stale or any(" is missing;" in m for m in report.problems):
        report.problems += blocking
        return report
    spec = load_spec(spec_path)
    swapped = _spec_inputs(plan, spec)
    if swapped:
        report.problems += [f"inputs differ from the spec's: {m}" for m in swapped]
        return report
    problem = build_problem(spec, remat=plan_remat(spec, doc))
    wrong, old = certificate_rules(doc, spec, problem)
    report.stale += [f"{m}; regenerate with: {plan.regenerate_command()}" for m in old]
    if wrong:
        report.problems += [f"certificate does not follow from the spec: {m}" for m in wrong]
        return report
    try:
        solution = to_solution(problem, doc)
    except InputError as e:
        report.problems.append(f"decisions do not fit the model: {e}")
        return report
    throughput = problem.objective == "throughput"
    pipelined = planned_pipeline(problem, solution)
    choice = _choice_problems(problem, doc, pipelined)
    if choice:
        report.problems += choice
        return report
    # the plan's microbatches and schedule are decisions within the spec's sets (planmap.microbatching): the
    # predictions are re-derived with them (a one-stage SPMD plan has no pipeline schedule; latency: one sample)
    built, problem = problem, as_planned(problem, solution)
    solver_inputs = tuple((i.role, str(path.parent / i.path)) for i in doc.inputs if i.role in SOLVER_INPUT_ROLES)
    solution = replace(solution, schedule=problem.schedule if pipelined else None,
                       microbatches=problem.microbatches if throughput else 1,
                       certificate=replace(solution.certificate, inputs=solver_inputs))
    ev = with_peak_memory(problem, solution, evaluate(problem, solution))  # the memory verdict: the program model
    rebuilt = make_plan(problem, solution, ev, spec=spec, plan_path=path)  # the name is the spec's
    found = [f"infeasible: {v}" for v in ev.violations] + _field_problems(doc, _as_recorded(doc, rebuilt))
    found += [f"non-canonical mesh: {m}" for m in mesh_problems(doc, ev)]
    # an intact plan (digest matches) written by another planmap version that no longer follows from its inputs
    # is out of date (the cost model changed), not broken; from this very version it is forged
    intact = doc.digest is not None and doc.digest == body_digest(doc) and doc.generator != rebuilt.generator
    if found and intact:
        found[-1] += f"; regenerate with: {plan.regenerate_command()}"
    (report.stale if intact else report.problems).extend(found)
    if resolve and report.ok:
        _resolve(report, plan, spec, built, doc)  # solved as `solve` does: before the decisions
    return report


def _choice_problems(problem, doc: PlanDocument, pipelined: bool) -> list[str]:
    """The recorded microbatches and schedule must be in the spec's sets (a number, or ``auto``/a list of
    choices; a schedule, or ``auto``); the predictions then follow from them."""
    out = []
    allowed = problem.microbatch_candidates
    if problem.objective == "throughput" and doc.schedule.microbatches not in allowed:
        out.append(f"microbatches {doc.schedule.microbatches} is not one the spec allows "
                   f"({', '.join(map(str, allowed))})")
    kinds = [str(k) for k in problem.schedule_candidates]
    if pipelined and doc.schedule.kind not in kinds:
        out.append(f"schedule {doc.schedule.kind} is not one the spec allows ({', '.join(kinds)})")
    return [f"decisions outside the spec: {m}" for m in out]


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
    sol = result.solution
    if "remat" in o:  # remat: auto: per stage (the solve records it), or in older plans one choice, its problem
        options = {**sol.certificate.options, "remat": o["remat"]}
        sol = replace(sol, certificate=replace(sol.certificate, options=options))
    fresh = make_plan(result.problem, sol, result.evaluation, spec=spec, plan_path=plan.path)
    fresh = _as_recorded(doc, fresh)
    if render(fresh, []) != render(doc, []):
        what = "; ".join(_field_problems(doc, fresh, remarks=True)) or "the rendering differs"
        report.stale.append(f"not reproducible: solving the spec again with its solver {s.name!r} gives a "
                               f"different plan ({what}); regenerate with: {plan.regenerate_command()}")
    else:
        report.notes.append(f"re-solved with {s.name}: identical plan")


def verify(path: str | Path) -> None:
    """Raise StalePlanError (a changed input) or :class:`IntegrityError` unless :func:`check` accepts the plan."""
    load(path, verify_inputs=True)
    report = check(path)
    if report.ok:
        return
    found = report.messages
    text = "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")
    raise IntegrityError(f"{path}: refusing a plan that fails `planmap check`: {text}")

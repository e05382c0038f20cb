"""Plan reviews for people and CI: a diff as markdown (a PR comment) or JSON, a check as JSON or annotations.

`planmap diff` and `planmap check` speak to three readers: a person at a terminal, a pull request
(markdown comment, GitHub workflow annotations) and a program (JSON, with schemas in ``schemas/``
generated from the pydantic models below). Every output puts decisions first — which op ranges
moved (named by the common scope of their ops), which shardings and settings changed — and then
the predictions that changed, before → after with their ratio. Two plans with identical decisions
are one line, not a table of equal numbers. Nothing is shortened: long device lists are written out.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from planmap.frontend.namestack import scopes
from planmap.plan.diff import PlanDiff
from planmap.plan.integrity import CheckReport

__all__ = ["MovedRange", "PredictedChange", "DiffReport", "CheckResult", "CheckResults", "layer_label",
           "diff_report", "diff_markdown", "check_results", "check_github"]

_DECISION_SETTINGS = ("objective:", "mode:", "schedule:", "mesh:", "stages:", "stage ", "data_args:")


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MovedRange(_Out):
    ops: tuple[int, int] = Field(description="Half-open range [start, stop) of the artifact's op ids that moved.")
    layer: str = Field(description="Common scope of the range's ops (e.g. layer3/mlp); empty when unknown.")
    old: str = Field(description="Devices that ran the ops in the old plan, comma-separated.")
    new: str = Field(description="Devices that run the ops in the new plan, comma-separated.")


class PredictedChange(_Out):
    what: str = Field(description="The prediction (objective, step time, bytes moved, memory DEVICE, ...).")
    old: str = Field(description="Old value, rounded for reading (exact when rounding would hide the change).")
    new: str = Field(description="New value, displayed like ``old``.")
    old_value: int | None = Field(default=None, description="Old value in ns or bytes, when numeric.")
    new_value: int | None = Field(default=None, description="New value in ns or bytes, when numeric.")
    ratio: float | None = Field(default=None, description="new / old, when both are numeric and old is not 0.")


class DiffReport(_Out):
    """The JSON form of `planmap diff --format json`."""

    old: str = Field(description="Path of the old plan.")
    new: str = Field(description="Path of the new plan.")
    changed: bool = Field(description="Whether the plans differ in anything but the digest (exit status 2).")
    same_decisions: bool = Field(description="Whether every op runs where it ran, with the same shardings and "
                                             "settings (only predictions, certificate or generator differ).")
    moved: list[MovedRange] = Field(description="Moved op ranges, in op order.")
    only_old: int = Field(description="Ops placed only by the old plan.")
    only_new: int = Field(description="Ops placed only by the new plan.")
    shardings: list[str] = Field(description="Changed shardings: 'arg 0: OLD -> NEW' or 'op N result R: ...'.")
    settings: list[str] = Field(description="Other changed fields: objective, schedule, mesh, stages, inputs, "
                                            "certificate, generator.")
    predicted: list[PredictedChange] = Field(description="Predictions whose value changed.")


class CheckResult(_Out):
    path: str = Field(description="The plan file.")
    status: str = Field(description="ok, stale (regenerate the plan) or error (broken, tampered, unreadable).")
    errors: list[str] = Field(description="What makes the plan broken or uncheckable.")
    stale: list[str] = Field(description="What makes the plan out of date.")
    notes: list[str] = Field(description="Remarks (e.g. re-solved with the spec's solver: identical plan).")
    regenerate: str = Field(description="The command that regenerates the plan (empty when unknown).")


class CheckResults(_Out):
    """The JSON form of `planmap check --format json`."""

    exit_status: int = Field(description="0 every plan is up to date, 2 some plan is stale, 1 some plan is broken.")
    plans: list[CheckResult] = Field(description="One result per plan, in argument order.")


def layer_label(names: Sequence[str]) -> str:
    """A reader's name for a group of ops: the common scope of their name stacks without transform wrappers
    (``jit(f)``, ``transpose(jvp(…))``) and without the op itself, e.g. ``layer3/mlp``; when the ops span
    several scopes, the first and last (``layer0 … layer3``); empty when no op has a name."""
    stacks = [scopes(name) for name in names if name]
    if not stacks:
        return ""
    common = stacks[0]
    for parts in stacks[1:]:
        k = 0
        while k < min(len(common), len(parts)) and common[k] == parts[k]:
            k += 1
        common = common[:k]
    if common:
        return "/".join(common)
    tops = list(dict.fromkeys(p[0] for p in stacks if p))
    if not tops:
        return ""
    return tops[0] if len(tops) == 1 else f"{tops[0]} … {tops[-1]}"


def diff_report(d: PlanDiff, old: str, new: str, op_names: Sequence[str] | None) -> DiffReport:
    """The diff as a :class:`DiffReport` (moved ranges named by :func:`layer_label`, unchanged rows dropped)."""
    moved = [MovedRange(ops=(a, b), old=before, new=after, layer=layer_label(op_names[a:b]) if op_names else "")
             for a, b, before, after, _ in d.moved]
    predicted = []
    for what, a, b in d.predicted:
        va, vb = d.values.get(what, (None, None))
        if a == b and va == vb:
            continue
        ratio = vb / va if va and vb is not None else None
        predicted.append(PredictedChange(what=what, old=a, new=b, old_value=va, new_value=vb,
                                         ratio=None if ratio is None else round(ratio, 6)))
    same = not (d.moved or d.only_old or d.only_new or d.shardings
                or any(s.startswith(_DECISION_SETTINGS) for s in d.settings))
    return DiffReport(old=old, new=new, changed=d.changed, same_decisions=same, moved=moved, only_old=d.only_old,
                      only_new=d.only_new, shardings=list(d.shardings), settings=list(d.settings),
                      predicted=predicted)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def _ratio(r: float | None) -> str:
    return "" if r is None else f"{r:.2f}×"


def diff_markdown(r: DiffReport) -> str:
    """A pull-request comment: decisions first (moved layers, shardings, settings), then predictions."""
    lines = [f"### planmap diff: `{r.old}` → `{r.new}`", ""]
    if not r.changed:
        return "\n".join([*lines, "No differences."]) + "\n"
    if r.same_decisions:
        lines += ["Identical decisions: every op runs where it ran, with the same shardings.", ""]
    if r.moved:
        n_ops = sum(m.ops[1] - m.ops[0] for m in r.moved)
        lines += [f"**{n_ops} op(s) moved** in {len(r.moved)} range(s):", "",
                  "| layer | ops | from | to |", "|---|---|---|---|"]
        lines += [f"| {_cell(m.layer or '-')} | [{m.ops[0]}, {m.ops[1]}) | {_cell(m.old)} | {_cell(m.new)} |"
                  for m in r.moved]
        lines.append("")
    if r.only_old or r.only_new:
        lines += [f"Ops placed only in the old plan: {r.only_old}; only in the new plan: {r.only_new}.", ""]
    if r.shardings:
        lines += ["**Shardings**", "", *(f"- `{s}`" for s in r.shardings), ""]
    if r.settings:
        lines += ["**Settings**", "", *(f"- {s}" for s in r.settings), ""]
    if r.predicted:
        lines += ["**Predicted**", "", "| | before | after | ratio |", "|---|---|---|---|"]
        lines += [f"| {_cell(p.what)} | {_cell(p.old)} | {_cell(p.new)} | {_ratio(p.ratio)} |" for p in r.predicted]
    return "\n".join(lines).rstrip("\n") + "\n"


def check_results(reports: Sequence[CheckReport]) -> CheckResults:
    """Check reports as :class:`CheckResults`, with the exit status they give."""
    plans = [CheckResult(path=str(rep.path), status=rep.status, errors=list(rep.problems), stale=list(rep.stale),
                         notes=list(rep.notes), regenerate=rep.regenerate) for rep in reports]
    status = 1 if any(p.status == "error" for p in plans) else 2 if any(p.status == "stale" for p in plans) else 0
    return CheckResults(exit_status=status, plans=plans)


def _annotation_line(text: str, message: str) -> int:
    """The plan line a finding is about: the input it names, the field it names, the digest, else line 1."""
    import re

    lines = text.splitlines()
    m = re.search(r"\b(spec|cluster|model) input\b", message)
    f = re.search(r"field '(\w+)'", message)
    want = (f"  - {{role: {m.group(1)}," if m else f"{f.group(1)}:" if f
            else "digest:" if "digest" in message else None)
    if want is not None:
        for i, line in enumerate(lines, 1):
            if line.startswith(want):
                return i
    return 1


def _escape(message: str) -> str:
    return message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def check_github(reports: Sequence[CheckReport]) -> str:
    """GitHub workflow annotations: ``::error`` for a broken plan, ``::warning`` for a stale one, each on the
    plan line it concerns (the changed input, the field, the digest)."""
    out = []
    for rep in reports:
        try:
            text = rep.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        for kind, title, found in (("error", "broken plan", rep.problems), ("warning", "stale plan", rep.stale)):
            for msg in found:
                out.append(f"::{kind} file={rep.path},line={_annotation_line(text, msg)},"
                           f"title=planmap check: {title}::{_escape(msg)}")
    return "\n".join(out)

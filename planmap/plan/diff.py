"""Decision-level diff of two plans: which ops moved where, which shardings changed, what it costs.

A textual diff of two plan files already shows *that* something changed; this says *what it means*:
ops are compared by where they run (their stage's devices), moved ops are grouped into ranges and,
when the artifact is at hand, named by their layer (the name stack), and the predictions are put
side by side.

Equality is exact: display may round (``60.7 µs``), but two values that differ by 1 ns or 1 byte
are a difference, shown with their exact values when the rounded ones look alike. Any field the
sections above do not cover (data arguments, certificate bound and gap, stage sub-meshes, the
generator…) is still compared, so ``changed`` is false only for documents that are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planmap.errors import InputError
from planmap.frontend.namestack import common_scope
from planmap.plan.build import ranges_to_ids
from planmap.plan.document import PlanDocument

__all__ = ["PlanDiff", "diff_plans", "op_placement", "check_op_ids", "MAX_OPS"]

MAX_OPS = 100_000_000  # op ids a plan may name: far above any model, far below what would exhaust memory


@dataclass
class PlanDiff:
    moved: list[tuple[int, int, str, str, str]] = field(default_factory=list)  # (start, stop, old, new, label)
    only_old: int = 0  # ops placed only by the old plan
    only_new: int = 0
    shardings: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)  # objective, schedule, mesh, inputs
    predicted: list[tuple[str, str, str]] = field(default_factory=list)  # (what, old, new)
    values: dict[str, tuple[int, int]] = field(default_factory=dict)  # what -> exact (old, new) ns or bytes

    @property
    def changed(self) -> bool:
        return bool(self.moved or self.only_old or self.only_new or self.shardings or self.settings
                    or any(o != n for _, o, n in self.predicted))


def check_op_ids(doc: PlanDocument, where: str) -> int:
    """The plan's largest op id; an InputError when no model could have it (the placement array of
    a diff is that long, so ``[[0, 10**12]]`` would ask for terabytes)."""
    n = max((b for st in doc.stages for _, b in st.ops), default=0)
    if n > MAX_OPS:
        raise InputError(f"{where}: error[value]: the plan names op id {n:,}, more than the {MAX_OPS:,} ops "
                         "any model may have")
    return n


def op_placement(doc: PlanDocument) -> tuple[np.ndarray, list[str]]:
    """(placement index per op id or -1, list of placement labels "dev0,dev1")."""
    labels: list[str] = []
    index: dict[str, int] = {}
    n = check_op_ids(doc, "plan")
    place = np.full(n, -1, np.int64)
    for st in doc.stages:
        label = ",".join(st.devices)
        k = index.setdefault(label, len(labels))
        if k == len(labels):
            labels.append(label)
        place[ranges_to_ids(st.ops)] = k
    return place, labels


def _label(names: list[str] | None, a: int, b: int) -> str:
    if not names:
        return ""
    common = common_scope(names[a:b])
    return "/".join(common) if common else names[a]


def diff_plans(old: PlanDocument, new: PlanDocument, op_names: list[str] | None = None) -> PlanDiff:
    """Compare two plans' decisions and predictions. ``op_names`` (location names of the artifact's ops)
    label moved ranges by their layer."""
    d = PlanDiff()
    pa, la = op_placement(old)
    pb, lb = op_placement(new)
    n = max(len(pa), len(pb))
    pa = np.concatenate([pa, np.full(n - len(pa), -1)])
    pb = np.concatenate([pb, np.full(n - len(pb), -1)])
    da = np.array(la + [""], dtype=object)[pa]
    db = np.array(lb + [""], dtype=object)[pb]
    d.only_old = int(((pa >= 0) & (pb < 0)).sum())
    d.only_new = int(((pa < 0) & (pb >= 0)).sum())
    changed = (pa >= 0) & (pb >= 0) & (da != db)
    idx = np.flatnonzero(changed)
    if len(idx):
        start = prev = int(idx[0])
        for i in [*idx[1:].tolist(), None]:
            if i is not None and i == prev + 1 and da[i] == da[prev] and db[i] == db[prev]:
                prev = i
                continue
            d.moved.append((start, prev + 1, str(da[start]), str(db[start]), _label(op_names, start, prev + 1)))
            if i is not None:
                start = prev = i
    sa = {(e.arg, e.op, e.result): e.spec for e in old.shardings.args + old.shardings.values}
    sb = {(e.arg, e.op, e.result): e.spec for e in new.shardings.args + new.shardings.values}
    for key in sorted(set(sa) | set(sb), key=lambda k: tuple(-1 if x is None else x for x in k)):
        if sa.get(key) != sb.get(key):
            what = f"arg {key[0]}" if key[0] is not None else f"op {key[1]} result {key[2]}"
            d.shardings.append(f"{what}: {sa.get(key)} -> {sb.get(key)}")
    if old.shardings.zero != new.shardings.zero:  # which of the optimizer state and gradients are sharded
        d.shardings.append(f"ZeRO stage: {old.shardings.zero} -> {new.shardings.zero}")
    for what, a, b in (("objective", old.objective, new.objective), ("mode", old.mode, new.mode),
                       ("schedule", old.schedule, new.schedule), ("mesh", old.mesh, new.mesh),
                       ("stages", len(old.stages), len(new.stages))):
        if a != b:
            d.settings.append(f"{what}: {_short(a)} -> {_short(b)}")
    ia = {i.role: i for i in old.inputs}
    ib = {i.role: i for i in new.inputs}
    for role in sorted(set(ia) | set(ib)):
        in_a, in_b = ia.get(role), ib.get(role)
        if (in_a and in_a.content_hash) != (in_b and in_b.content_hash):
            d.settings.append(f"input {role}: different file contents")
        elif (in_a and in_a.path) != (in_b and in_b.path):
            d.settings.append(f"input {role}: {in_a and in_a.path} -> {in_b and in_b.path}")
    _predicted(d, old, new)
    _certificate(d, old.solver, new.solver)
    if old.data_args != new.data_args:
        d.settings.append(f"data_args: {old.data_args} -> {new.data_args}")
    meshes_a, meshes_b = [st.mesh for st in old.stages], [st.mesh for st in new.stages]
    if meshes_a != meshes_b:
        d.settings.append("stage sub-meshes differ")
    if [st.devices for st in old.stages] != [st.devices for st in new.stages] and not d.changed:
        d.settings.append("stage order differs")
    if not d.changed:  # the safety net: equal only when the documents are equal
        for name in type(old).model_fields:
            if name != "digest" and getattr(old, name) != getattr(new, name):
                d.settings.append(f"{name} differs")
    return d


def _pair(fmt, a: int, b: int, unit: str) -> tuple[str, str]:
    """Rounded displays of ``a`` and ``b``, exact ones when the rounded ones would hide a difference."""
    fa, fb = fmt(a), fmt(b)
    if a != b and fa == fb:
        return f"{fa} ({a} {unit})", f"{fb} ({b} {unit})"
    return fa, fb


def _predicted(d: PlanDiff, old: PlanDocument, new: PlanDocument) -> None:
    from planmap.units import format_bytes, format_duration

    def dur(v: int) -> str:
        return format_duration(v * 1e-9)

    def add(what: str, fmt, a: int, b: int, unit: str) -> None:
        d.predicted.append((what, *_pair(fmt, a, b, unit)))
        d.values[what] = (a, b)

    po, pn = old.predicted, new.predicted
    add("objective", dur, po.objective_ns, pn.objective_ns, "ns")
    add("step time", dur, po.step_time_ns, pn.step_time_ns, "ns")
    add("bytes moved", format_bytes, po.bytes_moved, pn.bytes_moved, "B")
    da = {x.device: x for x in po.devices}
    db = {x.device: x for x in pn.devices}
    for dev in sorted(set(da) | set(db)):
        a, b = da.get(dev), db.get(dev)
        if a is None or b is None:  # a device only one plan uses: its numbers, "-" on the other side
            x = a if a is not None else b
            assert x is not None  # dev comes from da or db
            for what, text in ((f"memory {dev}", format_bytes(x.memory)), (f"load {dev}", dur(x.load_ns))):
                d.predicted.append((what, "-", text) if a is None else (what, text, "-"))
            continue
        add(f"memory {dev}", format_bytes, a.memory, b.memory, "B")
        if a.load_ns != b.load_ns:
            add(f"load {dev}", dur, a.load_ns, b.load_ns, "ns")
        if a.capacity != b.capacity:
            def cap(c: int | None) -> str:
                return "unlimited" if c is None else format_bytes(c)

            d.predicted.append((f"capacity {dev}", cap(a.capacity), cap(b.capacity)))
    d.predicted.append(("solver", f"{old.solver.name} ({old.solver.status})",
                        f"{new.solver.name} ({new.solver.status})"))


def _certificate(d: PlanDiff, a, b) -> None:
    for key in ("objective_ns", "bound_ns", "gap", "backend", "version"):
        va, vb = getattr(a, key), getattr(b, key)
        if va != vb:
            d.settings.append(f"certificate {key}: {va} -> {vb}")


def _short(v) -> str:
    if hasattr(v, "model_dump"):
        return ", ".join(f"{k}={x}" for k, x in v.model_dump().items() if k != "devices")
    return str(v)

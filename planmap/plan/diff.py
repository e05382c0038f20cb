"""Decision-level diff of two plans: which ops moved where, which shardings changed, what it costs.

A textual diff of two plan files already shows *that* something changed; this says *what it means*:
ops are compared by where they run (their stage's devices), moved ops are grouped into ranges and,
when the artifact is at hand, named by their layer (the name stack), and the predictions are put
side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planmap.frontend.namestack import common_scope
from planmap.plan.build import ranges_to_ids
from planmap.plan.document import PlanDocument

__all__ = ["PlanDiff", "diff_plans", "op_placement"]


@dataclass
class PlanDiff:
    moved: list[tuple[int, int, str, str, str]] = field(default_factory=list)  # (start, stop, old, new, label)
    only_old: int = 0  # ops placed only by the old plan
    only_new: int = 0
    shardings: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)  # objective, schedule, mesh, inputs
    predicted: list[tuple[str, str, str]] = field(default_factory=list)  # (what, old, new)

    @property
    def changed(self) -> bool:
        return bool(self.moved or self.only_old or self.only_new or self.shardings or self.settings
                    or any(o != n for _, o, n in self.predicted))


def op_placement(doc: PlanDocument) -> tuple[np.ndarray, list[str]]:
    """(placement index per op id or -1, list of placement labels "dev0,dev1")."""
    labels: list[str] = []
    index: dict[str, int] = {}
    n = max((b for st in doc.stages for _, b in st.ops), default=0)
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
    for what, a, b in (("objective", old.objective, new.objective), ("mode", old.mode, new.mode),
                       ("schedule", old.schedule, new.schedule), ("mesh", old.mesh, new.mesh),
                       ("stages", len(old.stages), len(new.stages))):
        if a != b:
            d.settings.append(f"{what}: {_short(a)} -> {_short(b)}")
    ia = {i.role: i.sha256 for i in old.inputs}
    ib = {i.role: i.sha256 for i in new.inputs}
    for role in sorted(set(ia) | set(ib)):
        if ia.get(role) != ib.get(role):
            d.settings.append(f"input {role}: different file contents")
    from planmap.units import format_bytes, format_duration

    d.predicted.append(("objective", format_duration(old.predicted.objective_ns * 1e-9),
                        format_duration(new.predicted.objective_ns * 1e-9)))
    d.predicted.append(("step time", format_duration(old.predicted.step_time_ns * 1e-9),
                        format_duration(new.predicted.step_time_ns * 1e-9)))
    d.predicted.append(("bytes moved", format_bytes(old.predicted.bytes_moved),
                        format_bytes(new.predicted.bytes_moved)))
    ma = {x.device: x.memory for x in old.predicted.devices}
    mb = {x.device: x.memory for x in new.predicted.devices}
    for dev in sorted(set(ma) | set(mb)):
        d.predicted.append((f"memory {dev}", format_bytes(ma.get(dev, 0)), format_bytes(mb.get(dev, 0))))
    d.predicted.append(("solver", f"{old.solver.name} ({old.solver.status})",
                        f"{new.solver.name} ({new.solver.status})"))
    return d


def _short(v) -> str:
    if hasattr(v, "model_dump"):
        return ", ".join(f"{k}={x}" for k, x in v.model_dump().items() if k != "devices")
    return str(v)

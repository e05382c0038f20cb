"""The dynamic program over ideals (Tarnawski et al., ``throughput-dp/dp.cpp``), generalised.

State ``(c, I)``: the units of ideal ``I`` are placed on ``c`` devices (a count per device class,
and the number of stages when replication makes it differ), the value is the best bottleneck.
A transition appends the stage ``I \\ J`` on ``r`` devices of class ``t``. Ideals are those of
the *reversed* contiguity graph, so the DP builds the pipeline from its last stage: the stages
already placed are the ones after the new stage, which fixes its in-flight microbatches (1F1B)
and so its memory.

Beyond the paper: several device classes, replicated stages (load / r except kernel launches, + gradient all-reduce),
pipeline-schedule memory, the max-forward + max-backward objective (a Pareto set of
``(max fw, max bw)`` per state instead of one number), and pruning against a threshold ``T``:

* a candidate ``J`` for ``I`` must have ``W(I) - W(J) <= T * r_max`` (``W`` = least compute over
  classes, summed; ideals sorted by ``W``, so this is a slice), hold no unit ``I`` lacks, and be
  alive (some state of ``J`` has value ``<= T``);
* a stage costing more than ``T`` or exceeding the device's memory is never formed;
* a state is dropped when the units left cannot fit on the devices left at ``T`` each.

``remat: auto``: a stage's cost is its plain one where that fits the state's in-flight memory, else its
checkpointed one (:meth:`PipelineDP._choose`); the pruning keys use the plain (smaller) compute, so they
stay valid.

With ``T >=`` the optimum the result is exact; with ``T <`` the optimum the DP finds nothing,
which proves ``T`` is a lower bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError
from planmap.problem import Problem, Solution, Stage
from planmap.vocabulary import Mode, Schedule

from .ideals import unpack
from .stage_costs import StageCosts
from .stage_units import DeviceClasses, allreduce_times

__all__ = ["PipelineDP", "DPResult", "DPTimeout", "to_solution"]


class DPTimeout(PlanmapError):
    """The DP ran past its deadline."""

    code = "time-limit"


@dataclass(frozen=True)
class DPResult:
    value: float  # best objective found (inf: nothing within the threshold)
    stages: tuple[tuple[int, int, int, int], ...]  # (ideal I, ideal J, class, replicas), pipeline order
    pairs: int  # stage candidates evaluated


class PipelineDP:
    def __init__(self, problem: Problem, classes: DeviceClasses, costs: StageCosts, level: np.ndarray):
        self.problem, self.classes, self.costs = problem, classes, costs
        self.level = level
        T = classes.num_classes
        counts = classes.counts
        total = costs.unit_total
        supported = ~costs.unit_bad
        wmin = np.where(supported, total, np.inf).min(axis=1)
        if np.isinf(wmin).any():
            raise InfeasibleError(f"{problem.name}: some node can run on no device the pipeline may use")
        # W: least compute of an ideal's units over the classes (the key that slices candidate sub-ideals)
        self.W = np.concatenate([unpack(costs.bits[lo: lo + 4096], costs.U).astype(float) @ wmin
                                 for lo in range(0, costs.N, 4096)])
        self.W_total = float(wmin.sum())
        self.by_w = np.argsort(self.W, kind="stable")  # ideals in W order: candidate windows are slices
        self.w_sorted = self.W[self.by_w]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(supported & (total > 0), wmin[:, None] / total, 0.0)
        self.kappa = np.where(ratio.max(axis=0) > 0, ratio.max(axis=0), 1.0)  # W-capacity of one device per T
        # ---- states: devices used per class (+ stages when replication decouples them)
        # a replicated stage splits each microbatch over its replicas, so r must divide the batch
        b = problem.batch_size
        self.reps = [[r for r in range(1, int(c) + 1) if not b or b % r == 0] if problem.replication else [1]
                     for c in counts]
        inflight_varies = (problem.mode is Mode.TRAINING and problem.schedule is Schedule.ONE_F_ONE_B
                           and problem.microbatches > 1)
        self.need_s = problem.replication and (problem.max_stages is not None or inflight_varies)
        smax = int(counts.sum())
        if problem.max_stages is not None:
            smax = min(smax, problem.max_stages)
        dims = [int(c) + 1 for c in counts] + ([smax + 1] if self.need_s else [])
        grid = np.indices(dims).reshape(len(dims), -1).T
        used = grid[:, :T]
        stages = grid[:, T] if self.need_s else used.sum(axis=1)
        valid = np.ones(len(grid), bool)
        if problem.max_stages is not None:
            valid &= stages <= problem.max_stages
        self.S = len(grid)
        self.valid = valid
        self.stages_of = stages
        self.used = used
        strides = np.cumprod([1] + dims[::-1][:-1])[::-1]
        self.rem_cap = ((counts[None, :] - used) * self.kappa[None, :]).sum(axis=1)
        self.used_cap = (used * self.kappa[None, :]).sum(axis=1)
        self.inflight = np.array([problem.in_flight(0, int(s) + 1) for s in stages], float)
        self.infl_values, self.infl_index = np.unique(self.inflight, return_inverse=True)
        self.trans: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        for t in range(T):
            for r in self.reps[t]:
                step = strides[t] * r + (strides[T] if self.need_s else 0)
                a = np.flatnonzero(valid & (used[:, t] + r <= counts[t])
                                   & ((grid[:, T] < smax) if self.need_s else True))
                b = a + step
                ok = valid[b]
                self.trans.append((t, r, a[ok], b[ok]))
        self.r_max = max(max(r) for r in self.reps) if T else 1
        self.train_ar = problem.mode is Mode.TRAINING and problem.replication

    # ------------------------------------------------------------------------------------------
    def lower_bound(self) -> float:
        """No plan beats spreading the least compute perfectly over every device."""
        cap = float((self.classes.counts * self.kappa).sum())
        return self.W_total / cap if cap > 0 else 0.0

    def _loads(self, pc, t: int, r: int) -> tuple[np.ndarray, np.ndarray]:
        replicated = self.problem.cost.replicated
        fw = replicated(pc.fw[:, t], pc.launch_fw[:, t], r)
        bw = replicated(pc.bw[:, t], pc.launch_bw[:, t], r)
        if self.train_ar and r > 1:
            bw = bw + allreduce_times(self.problem, self.classes.devices[t][:r], pc.grad)
        bad = ~pc.ok[:, t]
        return np.where(bad, np.inf, fw), np.where(bad, np.inf, bw)

    def _fit_rows(self, pc) -> list[np.ndarray | None]:
        """Per class: (distinct in-flight counts, m) memory feasibility; None where memory is unlimited."""
        out: list[np.ndarray | None] = []
        for cap in self.classes.capacity.tolist():
            if not np.isfinite(cap):
                out.append(None)
            else:
                out.append(pc.mem[None, :] + pc.stash[None, :] * self.infl_values[:, None] <= cap * (1 + 1e-12))
        return out

    def _choose(self, pc, t: int, r: int, fits, fits_r, infl: np.ndarray, rows: np.ndarray):
        """``remat: auto``: per candidate ``rows`` (m') and in-flight index ``infl`` (s), the stage's forward load
        (s, m') — without recomputation where that fits, else with it where that fits, else inf (for a fixed
        split a stage's memory depends on its own choice only, and recomputing never makes it faster, so this
        is the best choice) — and whether it fits either way."""
        fw = self._loads(pc, t, r)[0][rows]
        fw_r = self._loads(pc.remat, t, r)[0][rows]
        plain = fits[t][infl][:, rows]
        again = fits_r[t][infl][:, rows]
        return np.where(plain, fw[None, :], np.where(again, fw_r[None, :], np.inf)), plain | again

    def ws_rule(self) -> tuple[float, float, float, float]:
        caps = self.classes.capacity[np.isfinite(self.classes.capacity)]
        if not len(caps):
            return (np.inf, -np.inf, 0.0, 0.0)  # no memory limit anywhere: never needed
        return (float(caps.min()), float(caps.max()), float(self.infl_values.min()), float(self.infl_values.max()))

    def _targets(self, i: int, threshold: float) -> np.ndarray:
        """States ``b`` at which ideal ``i`` can still lie on a plan within the threshold: its units fit
        the devices ``b`` used, and the rest fit the devices left (least compute, at ``T`` each)."""
        if not np.isfinite(threshold):
            return self.valid.copy()
        slack = 1e-9 * max(self.W_total, 1e-300)
        return (self.valid & (self.W[i] <= threshold * self.used_cap + slack)
                & (self.W_total - self.W[i] <= threshold * self.rem_cap + slack))

    def _candidates(self, i: int, reached: np.ndarray, threshold: float, preds: np.ndarray):
        """Sub-ideals ``J`` of ``i`` that can start the stage ``i \\ J``: compute within ``T * r_max``, and
        reached at a predecessor state of a state ``i`` can reach (``reached`` is (N, S), nonzero where
        the pass has a value: alive flags, or label counts in the Pareto pass)."""
        bits, W = self.costs.bits, self.W
        tol = 1e-9 * max(self.W_total, 1e-300)
        win = threshold * self.r_max
        floor = W[i] - win
        if np.isfinite(threshold):
            floor = max(floor, float((self.W_total - threshold * self.rem_cap[preds]).min()))
        lo = np.searchsorted(self.w_sorted, floor - tol) if np.isfinite(floor) else 0
        hi = np.searchsorted(self.w_sorted, W[i] + tol, side="right")
        cand = self.by_w[lo:hi]
        cand = cand[(self.level[cand] < self.level[i])]
        cand = cand[reached[np.ix_(cand, preds)].any(axis=1)]
        if len(cand):
            cand = cand[~((bits[cand] & ~bits[i][None, :]).any(axis=1))]
        return cand

    def _stage_ends(self, threshold: float, deadline: float | None, reached: np.ndarray):
        """The ideals ``i``, in order, at which a stage can end, with what both passes need first: the
        states the threshold leaves ``i``, the transitions into them, the sub-ideals that can start
        the stage, those stages' costs and memory fits. Yields (i, target states, transitions,
        candidates, pair costs, fits); checks the clock as it goes. ``reached`` is read lazily, so a
        pass sees the values it has filled in for the ideals before ``i``."""
        rule = self.ws_rule()
        for i in range(1, self.costs.N):
            # every ideal: one costs numpy work over candidates x devices, so a clock read is noise beside it,
            # and on thousands of devices 256 ideals between reads would overrun the limit by seconds
            if deadline is not None and time.perf_counter() > deadline:
                raise DPTimeout("the DP ran out of time")
            targets = self._targets(i, threshold)
            trans = [(k, t, r, a[targets[b]], b[targets[b]]) for k, (t, r, a, b) in enumerate(self.trans)]
            trans = [x for x in trans if len(x[3])]
            if not trans:
                continue
            preds = np.unique(np.concatenate([x[3] for x in trans]))
            cand = self._candidates(i, reached, threshold, preds)
            if not len(cand):
                continue
            pc = self.costs.pairs(i, cand, rule)
            fits_r = None if pc.remat is None else self._fit_rows(pc.remat)
            yield i, targets, trans, cand, pc, (self._fit_rows(pc), fits_r)

    def run(self, threshold: float, variant: str = "max-load", deadline: float | None = None,
            progress=None) -> DPResult:
        if variant == "max-fw-plus-max-bw":
            return self._run_pareto(threshold, deadline, progress)
        N, S = self.costs.N, self.S
        f = np.full((N, S), np.inf)  # f[ideal, state]: rows gathered per candidate set
        f[0, 0] = 0.0
        back_j = np.full((N, S), -1, np.int64)
        back_tr = np.full((N, S), -1, np.int64)
        alive = np.zeros((N, S), bool)
        alive[0, 0] = True
        full = N - 1
        pairs = 0
        finite = np.isfinite(threshold)
        for i, targets, trans, cand, pc, (fits, fits_r) in self._stage_ends(threshold, deadline, alive):
            pairs += len(cand)
            F = f[cand]
            best = f[i]
            bj, btr = back_j[i], back_tr[i]
            for k, t, r, a, b in trans:
                fw, bw = self._loads(pc, t, r)
                load = fw + bw
                use = np.flatnonzero(load <= threshold)
                if not len(use):
                    continue
                if fits_r is not None and fits[t] is not None:  # remat: auto: the stage's best choice per state
                    fw_c, _ = self._choose(pc, t, r, fits, fits_r, self.infl_index[a], use)
                    vals = np.maximum(F[use][:, a], (fw_c + bw[use][None, :]).T)
                else:
                    vals = np.maximum(F[use][:, a], load[use][:, None])
                    if fits[t] is not None:
                        vals[~fits[t][self.infl_index[a]][:, use].T] = np.inf
                arg = np.argmin(vals, axis=0)
                v = vals[arg, np.arange(len(a))]
                better = v < best[b]
                if better.any():
                    bb = b[better]
                    best[bb] = v[better]
                    bj[bb] = cand[use[arg[better]]]
                    btr[bb] = k
            if finite:
                best[~targets | (best > threshold)] = np.inf
            alive[i] = np.isfinite(best)
            if progress is not None and (i & 1023) == 0:
                progress(i, N)
        s_end = int(np.argmin(f[full]))
        value = float(f[full, s_end])
        if not np.isfinite(value):
            return DPResult(np.inf, (), pairs)
        stages = []
        s, i = s_end, full
        while i != 0:
            j, k = int(back_j[i, s]), int(back_tr[i, s])
            t, r, a, b = self.trans[k]
            stages.append((i, j, t, r))
            s = int(a[np.flatnonzero(b == s)[0]])
            i = j
        return DPResult(value, tuple(stages), pairs)

    # ------------------------------------------------------------------------------------------
    def _run_pareto(self, threshold: float, deadline: float | None, progress) -> DPResult:
        """Max forward load + max backward load: keep the non-dominated (max fw, max bw) per state.

        Labels live in flat growing arrays, appended ideal by ideal; ``start``/``count`` (N, S) locate
        the labels of each state. Label 0 is the empty placement."""
        N, S = self.costs.N, self.S
        labels = _Labels()
        start = np.zeros((N, S), np.int64)
        count = np.zeros((N, S), np.int64)
        count[0, 0] = 1
        pairs = 0
        finite = np.isfinite(threshold)
        for i, _, trans, cand, pc, (fits, fits_r) in self._stage_ends(threshold, deadline, count):
            pairs += len(cand)
            parts = []
            every = np.arange(len(cand))
            for k, t, r, a, b in trans:
                fw0, bw = self._loads(pc, t, r)
                use = fw0 + bw <= threshold
                if not use.any():
                    continue
                for sa, sb in zip(a.tolist(), b.tolist(), strict=True):
                    fw = fw0
                    if fits_r is not None and fits[t] is not None:  # remat: auto (see _choose)
                        fw_c, fit = self._choose(pc, t, r, fits, fits_r, self.infl_index[[sa]], every)
                        fw, ok = fw_c[0], use & fit[0]
                    else:
                        ok = use if fits[t] is None else use & fits[t][self.infl_index[sa]]
                    js = np.flatnonzero(ok)
                    c = count[cand[js], sa]
                    n = int(c.sum())
                    if not n:
                        continue
                    rep = np.repeat(np.arange(len(js)), c)
                    lab = start[cand[js], sa][rep] + (np.arange(n) - np.repeat(np.cumsum(c) - c, c))
                    x = np.maximum(labels.x[lab], fw[js][rep])
                    y = np.maximum(labels.y[lab], bw[js][rep])
                    keep = x + y <= threshold
                    kept = int(keep.sum())
                    parts.append((x[keep], y[keep], lab[keep], np.full(kept, k), np.full(kept, sb)))
            if not parts:
                continue
            x, y, par, trs, tgt = (np.concatenate(col) for col in zip(*parts, strict=True))
            if not len(x):
                continue
            order = np.lexsort((par, y, x, tgt))
            x, y, par, trs, tgt = x[order], y[order], par[order], trs[order], tgt[order]
            # Pareto filter per target state in one pass: offset y by state so a running minimum restarts
            offset = 4.0 * (threshold if finite else float(max(x.max() + y.max(), 1.0)))
            z = y - tgt * offset
            keep = z < np.concatenate([[np.inf], np.minimum.accumulate(z)[:-1]])
            x, y, par, trs, tgt = x[keep], y[keep], par[keep], trs[keep], tgt[keep]
            states, first, cnt = np.unique(tgt, return_index=True, return_counts=True)
            base = labels.append(x, y, par, trs, i)
            start[i, states] = base + first
            count[i, states] = cnt
            if progress is not None and (i & 1023) == 0:
                progress(i, N)
        full = N - 1
        ends = np.concatenate([np.arange(start[full, s], start[full, s] + count[full, s]) for s in range(S)])
        if not len(ends):
            return DPResult(np.inf, (), pairs)
        obj = labels.x[ends] + labels.y[ends]
        lab = int(ends[int(np.argmin(obj))])
        value = float(obj.min())
        stages = []
        while lab != 0:
            parent = int(labels.parent[lab])
            t, r, _, _ = self.trans[int(labels.trans[lab])]
            stages.append((int(labels.ideal[lab]), int(labels.ideal[parent]), t, r))
            lab = parent
        return DPResult(value, tuple(stages), pairs)


class _Labels:
    """Growing columns of Pareto labels (amortised doubling, so appends stay linear overall)."""

    def __init__(self) -> None:
        self.n = 1
        self._cols = {"x": np.zeros(1024), "y": np.zeros(1024), "parent": np.full(1024, -1, np.int64),
                      "trans": np.full(1024, -1, np.int64), "ideal": np.zeros(1024, np.int64)}

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("_cols")
        if cols is None or name not in cols:
            raise AttributeError(name)
        return cols[name][: self.n]

    def append(self, x, y, parent, trans, ideal: int) -> int:
        k = len(x)
        base = self.n
        cap = len(self._cols["x"])
        if base + k > cap:
            new = max(2 * cap, base + k)
            for key, col in self._cols.items():
                grown = np.zeros(new, col.dtype)
                grown[:base] = col[:base]
                self._cols[key] = grown
        for key, val in (("x", x), ("y", y), ("parent", parent), ("trans", trans)):
            self._cols[key][base: base + k] = val
        self._cols["ideal"][base: base + k] = ideal
        self.n += k
        return base


def to_solution(problem: Problem, unit_of: np.ndarray, bits: np.ndarray, classes: DeviceClasses,
                result: DPResult, certificate) -> Solution:
    """The plan of a DP result: stages in pipeline order, devices taken class by class in order."""
    U = bits.shape[1] * 64
    assignment = np.full(problem.graph.num_nodes, -1, np.int32)
    used = [0] * classes.num_classes
    stages = []
    for k, (i, j, t, r) in enumerate(result.stages):
        inside = unpack(bits[[i]] & ~bits[[j]], U)[0]
        assignment[inside[unit_of]] = k
        stages.append(Stage(classes.devices[t][used[t]: used[t] + r]))
        used[t] += r
    if (assignment < 0).any():
        raise AssertionError("the DP left nodes unplaced")
    return Solution(assignment, tuple(stages), certificate, schedule=problem.schedule,
                    microbatches=max(problem.microbatches, 1))

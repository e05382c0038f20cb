"""Exact load and memory of a stage ``I \\ J`` for one ideal ``I`` and many sub-ideals ``J`` at once.

The DP over ideals spends its time here, so nothing is recomputed per pair that can be kept per
ideal. Additive terms (compute per device class, state and stashed bytes, single-user
parameters) are prefix sums over ideals: stage = row ``I`` minus row ``J``. Transfers are not
additive — a value is charged once per receiving stage and once by its sender, whatever the
number of edges — but a value can only cross the border of ``S = I \\ J`` if it crosses the
border of ``I`` or of ``J``. With ``Cut(X)`` the values whose producer/consumer units lie on both
sides of ``X``:

    transfers(S) = Σ_{v ∈ Cut(I)} [charge(v; I, J) - b_J(v)] + B(J)

where ``b_J(v)`` is what ``v`` would cost if every unit it touches were inside ``I`` (a function of
``J`` alone), and ``B(J) = Σ_{v ∈ Cut(J)} b_J(v)`` is kept per ideal. Only the few values of
``Cut(I)`` (the frontier of ``I``) are looked at per pair. Parameters shared by several units and
the largest working set of the stage are handled the same way (frontier terms, and a first-set-bit
query on ideals re-encoded in descending working-set order).

The charges are exactly those of :func:`planmap.evaluate.evaluate`: receive once per value per
stage, send once per value at the (class-determined) charge, forward/backward split by the
producer, parameters counted once per stage, memory = parameters x factor + state + stash x
in-flight microbatches + the largest working set. With ``remat: auto`` a second set of prefix sums
holds the forward time, its launches and the stash of the same units recomputing their layers'
forward (``PairCosts.remat``); the rest of a stage's cost does not depend on the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.crossings import crossings
from planmap.problem import Problem

from .ideals import member, pack, unpack
from .stage_units import DeviceClasses, remat_problem, unit_memory

__all__ = ["StageCosts", "PairCosts"]

_CHUNK = 4096


@dataclass(frozen=True, eq=False)
class PairCosts:
    """Per candidate pair: ``fw``/``bw`` (m, T) seconds on one device of each class, ``ok`` (m, T)
    every node supported there, ``mem`` bytes without the stash, ``stash`` bytes per in-flight
    microbatch, ``grad`` distinct parameter bytes (for the all-reduce of replicated stages);
    ``launch_fw``/``launch_bw`` (m, T) the kernel-launch part of ``fw``/``bw`` (replicas do not share it);
    ``remat`` the same stage recomputing its layers' forward (``remat: auto``: its ``fw``, ``stash`` and
    ``launch_fw`` differ, the rest is shared), None when the problem has no such choice."""

    fw: np.ndarray
    bw: np.ndarray
    ok: np.ndarray
    mem: np.ndarray
    stash: np.ndarray
    grad: np.ndarray
    launch_fw: np.ndarray
    launch_bw: np.ndarray
    remat: PairCosts | None = None


def _csr_lists(keys: np.ndarray, vals: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((vals, keys))
    indptr = np.zeros(k + 1, np.int64)
    np.add.at(indptr, keys + 1, 1)
    return np.cumsum(indptr), vals[order]


class StageCosts:
    """Tables for the ideals ``bits`` (packed, over units numbered by ``unit_of``)."""

    def __init__(self, problem: Problem, unit_of: np.ndarray, num_units: int, classes: DeviceClasses,
                 bits: np.ndarray):
        g, cost = problem.graph, problem.cost
        U, T = num_units, classes.num_classes
        self.U, self.T, self.bits = U, T, bits
        uo = np.asarray(unit_of, np.int64)
        # ---- per-unit additive terms
        reps = [d[0] for d in classes.devices]
        ok_node = classes.allowed & np.isfinite(cost.device_compute[:, reps])
        back = g.backward
        unit_f, unit_lf = self._forward(cost, uo, U, reps, ok_node)
        unit_b, unit_lb = (np.zeros((U, T)) for _ in range(2))
        np.add.at(unit_lb, uo[back], np.where(ok_node, cost.device_launch[:, reps], 0.0)[back])
        bad = np.zeros((U, T))
        np.add.at(unit_b, uo[back], np.where(ok_node, cost.device_compute[:, reps], 0.0)[back])
        np.add.at(bad, uo, (~ok_node).astype(float))
        state, stash, ws = unit_memory(problem, uo, U)
        # remat: auto: the same additive terms with the stage recomputing (forward time and stash differ)
        self.has_remat = problem.remat_choice
        if self.has_remat:
            again = remat_problem(problem)
            unit_fr, unit_lfr = self._forward(again.cost, uo, U, reps, ok_node)
            stash_r = unit_memory(again, uo, U)[1]
        self.unit_total = unit_f + unit_b
        self.unit_bad = bad > 0
        # ---- parameters: single-unit ones are additive, shared ones are frontier terms
        pv, pn = cost.param_use
        self.factor = float(cost.param_factor)
        single = np.zeros(U)
        multi_users: list[np.ndarray] = []
        multi_bytes: list[float] = []
        if len(pv):
            pairs = np.unique(np.stack([pv, uo[pn]], 1), axis=0)
            vals, starts, counts = np.unique(pairs[:, 0], return_index=True, return_counts=True)
            for v, s0, c in zip(vals.tolist(), starts.tolist(), counts.tolist(), strict=True):
                if c == 1:
                    single[pairs[s0, 1]] += float(g.value_bytes[v])
                else:
                    multi_users.append(pairs[s0: s0 + c, 1])
                    multi_bytes.append(float(g.value_bytes[v]))
        # ---- values that can cross a stage border: producer unit p, distinct consumer units != p
        cross = crossings(g, uo)
        hval, hstart = cross.values, cross.starts
        H = len(hval)
        self.H = H
        self.h_prod = cross.producer_group[hstart]
        self.h_cons_ptr = np.append(hstart, len(cross)).astype(np.int64)
        self.h_cons = cross.consumer_group
        hb = g.backward[g.value_node[hval]].astype(np.int64) if H else np.zeros(0, np.int64)
        self.WR = np.zeros((H, 2 * T))
        self.WS = np.zeros((H, 2 * T))
        for t in range(T):
            self.WR[np.arange(H), 2 * t + hb] = classes.recv[t, hval]
            self.WS[np.arange(H), 2 * t + hb] = classes.send[t, hval]
        # ---- per-ideal tables
        N = len(bits)
        self.N = N
        self.CF = np.empty((N, T))
        self.CB = np.empty((N, T))
        self.LF = np.empty((N, T))
        self.LB = np.empty((N, T))
        self.NB = np.empty((N, T), np.int64)
        self.STATE = np.empty(N)
        self.STASH = np.empty(N)
        self.P1 = np.empty(N)
        if self.has_remat:
            self.CF_R, self.LF_R, self.STASH_R = np.empty((N, T)), np.empty((N, T)), np.empty(N)
        self.BJ = np.empty((N, 2 * T))
        self.PTOUCH = np.zeros(N)
        self.PFULL = np.zeros(N)
        self.rank_order = np.argsort(-ws, kind="stable")
        self.ws_sorted = ws[self.rank_order]
        self.rank_bits = np.empty_like(bits)
        ncons = np.diff(self.h_cons_ptr)
        counted = np.flatnonzero(ncons > 0)  # reduceat's runs: one per value with consumers, in order
        cut_rows, cut_cols = [], []
        multi_n = len(multi_users)
        cutp_rows, cutp_cols = [], []
        for lo in range(0, N, _CHUNK):
            hi = min(N, lo + _CHUNK)
            m = unpack(bits[lo:hi], U)
            mf = m.astype(np.float64)
            self.CF[lo:hi] = mf @ unit_f
            self.CB[lo:hi] = mf @ unit_b
            self.LF[lo:hi] = mf @ unit_lf
            self.LB[lo:hi] = mf @ unit_lb
            self.NB[lo:hi] = np.rint(mf @ bad).astype(np.int64)
            self.STATE[lo:hi] = mf @ state
            self.STASH[lo:hi] = mf @ stash
            self.P1[lo:hi] = mf @ single
            if self.has_remat:
                self.CF_R[lo:hi], self.LF_R[lo:hi], self.STASH_R[lo:hi] = mf @ unit_fr, mf @ unit_lfr, mf @ stash_r
            self.rank_bits[lo:hi] = pack(m[:, self.rank_order])
            if H:
                cnt = np.zeros((hi - lo, H), np.int64)  # consuming units of each value inside the ideal
                if len(counted):
                    cnt[:, counted] = np.add.reduceat(m[:, self.h_cons].astype(np.int64),
                                                      self.h_cons_ptr[counted], axis=1)
                p_in = m[:, self.h_prod]
                cut = (cnt + p_in > 0) & (cnt + p_in < ncons + 1)
                yr = p_in & (cnt < ncons)
                ys = ~p_in & (cnt > 0)
                self.BJ[lo:hi] = yr @ self.WR + ys @ self.WS
                r, c = np.nonzero(cut)
                cut_rows.append(r + lo)
                cut_cols.append(c)
            else:
                self.BJ[lo:hi] = 0.0
            for k in range(multi_n):
                inside = m[:, multi_users[k]]
                anyin, allin = inside.any(1), inside.all(1)
                self.PTOUCH[lo:hi] += multi_bytes[k] * anyin
                self.PFULL[lo:hi] += multi_bytes[k] * allin
                r = np.flatnonzero(anyin & ~allin)
                cutp_rows.append(r + lo)
                cutp_cols.append(np.full(len(r), k))
        cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
        self.cut_ptr, self.cut_h = _csr_lists(cat(cut_rows), cat(cut_cols), N)
        self.cutp_ptr, self.cutp_k = _csr_lists(cat(cutp_rows), cat(cutp_cols), N)
        self.multi_users = multi_users
        self.multi_bytes = np.asarray(multi_bytes)

    @staticmethod
    def _forward(cost, uo: np.ndarray, U: int, reps: list, ok_node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(U, T) forward seconds and their kernel-launch part per unit, on one device of each class."""
        fwd = ~cost.graph.backward
        f, lf = np.zeros((U, len(reps))), np.zeros((U, len(reps)))
        np.add.at(f, uo[fwd], np.where(ok_node, cost.device_compute[:, reps], 0.0)[fwd])
        np.add.at(lf, uo[fwd], np.where(ok_node, cost.device_launch[:, reps], 0.0)[fwd])
        return f, lf

    # ------------------------------------------------------------------------------------------
    def pairs(self, i: int, js: np.ndarray, ws_rule: tuple[float, float, float, float] | None = None) -> PairCosts:
        """Costs of the stages ``ideal i \\ ideal j`` for every ``j`` in ``js`` (each a strict subset).

        ``ws_rule`` = (least and largest finite capacity, least and largest in-flight count): the
        largest working set is then added only where it can change feasibility on some device;
        elsewhere ``mem`` leaves it out (the stage fits everywhere or nowhere either way)."""
        bits = self.bits
        comm = self.BJ[js].copy()
        hs = self.cut_h[self.cut_ptr[i]: self.cut_ptr[i + 1]]
        if len(hs):
            row_i = np.array([i])
            p = self.h_prod[hs]
            p_i = member(bits, row_i, p)[0]
            p_j = member(bits, js, p)
            lens = self.h_cons_ptr[hs + 1] - self.h_cons_ptr[hs]
            cons = self.h_cons[np.repeat(self.h_cons_ptr[hs] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
                               + np.arange(lens.sum())]
            owner = np.repeat(np.arange(len(hs)), lens)
            in_i = member(bits, row_i, cons)[0]
            cons, owner = cons[in_i], owner[in_i]
            n_in = np.bincount(owner, minlength=len(hs))
            out_i = lens > n_in  # some consumer outside I
            if len(cons):
                inc = np.zeros((len(cons), len(hs)), np.float32)
                inc[np.arange(len(cons)), owner] = 1.0
                cnt_j = member(bits, js, cons).astype(np.float32) @ inc
                some_s = cnt_j < n_in  # a consumer in I \ J
                some_j = cnt_j > 0  # a consumer in J
            else:
                some_s = some_j = np.zeros((len(js), len(hs)), bool)
            p_s = p_i & ~p_j
            xr = (~p_s & some_s).astype(np.float64) - (p_j & (out_i | some_s))
            xs = (p_s & (out_i | some_j)).astype(np.float64) - (~p_j & some_j)
            comm += xr @ self.WR[hs] + xs @ self.WS[hs]
        fw = self.CF[i] - self.CF[js] + comm[:, 0::2]
        bw = self.CB[i] - self.CB[js] + comm[:, 1::2]
        ok = (self.NB[i] - self.NB[js]) == 0
        params = self.P1[i] - self.P1[js]
        if len(self.multi_users):
            params = params + self.PTOUCH[i] - self.PFULL[js]
            for k in self.cutp_k[self.cutp_ptr[i]: self.cutp_ptr[i + 1]].tolist():
                users = self.multi_users[k]
                inside_i = users[member(bits, np.array([i]), users)[0]]
                params -= self.multi_bytes[k] * member(bits, js, inside_i).all(1)
        mem = self.factor * params + (self.STATE[i] - self.STATE[js])
        stash = self.STASH[i] - self.STASH[js]
        stash_r = self.STASH_R[i] - self.STASH_R[js] if self.has_remat else stash
        if ws_rule is None:
            mem = mem + self._max_ws(i, js)
        elif len(self.ws_sorted):
            cap_lo, cap_hi, f_lo, f_hi = ws_rule
            hi, lo = (np.maximum(stash, stash_r), np.minimum(stash, stash_r)) if self.has_remat else (stash, stash)
            need = (mem + hi * f_hi + self.ws_sorted[0] > cap_lo) & (mem + lo * f_lo <= cap_hi)
            if need.any():
                mem[need] += self._max_ws(i, js[need])
        lb = self.LB[i] - self.LB[js]
        again = None
        if self.has_remat:
            fw_r = self.CF_R[i] - self.CF_R[js] + comm[:, 0::2]
            again = PairCosts(fw_r, bw, ok, mem, stash_r, params, self.LF_R[i] - self.LF_R[js], lb)
        return PairCosts(fw, bw, ok, mem, stash, params, self.LF[i] - self.LF[js], lb, again)

    def _max_ws(self, i: int, js: np.ndarray) -> np.ndarray:
        """Largest working set among the units of ``I \\ J``: the first set bit of the ws-ranked difference."""
        d = self.rank_bits[i][None, :] & ~self.rank_bits[js]
        nz = d != 0
        w0 = np.argmax(nz, axis=1)
        x = d[np.arange(len(js)), w0]
        low = x & (~x + np.uint64(1))
        bit = np.log2(np.maximum(low, np.uint64(1)).astype(np.float64)).astype(np.int64)
        rank = np.minimum(w0 * 64 + bit, len(self.ws_sorted) - 1)
        return np.where(nz.any(1), self.ws_sorted[rank], 0.0)

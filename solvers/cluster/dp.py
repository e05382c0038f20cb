"""The stage DP (Alpa's inter-operator pass, eq. 3): layer ranges × submeshes, for a bound ``t_max``.

Given the time of every candidate stage — layer groups ``[i, j)`` on submesh ``k`` (an offset and a size
in a device order, :func:`~.space.submeshes`), per microbatch, for each number of microbatches it holds
in flight — the DP chooses contiguous ranges covering every group and disjoint submeshes laid out in
device order (devices may stay unused), minimising the step time

* ``formula="step"`` (what :func:`planmap.evaluate.evaluate` charges a pipeline): ``(S + M − 1) · t_max``,
* ``formula="alpa"`` (Alpa's eq. 3): ``Σ_k t_k + (M − 1) · t_max``,

where ``t_max`` is the slowest stage. Alpa's method: for each candidate ``t_max`` (the sorted distinct
stage times), a DP over (groups left, devices left) minimises ``Σ c_k`` over stages no slower than
``t_max`` (``c_k = t_k``, or ``t_max`` plus a tie-breaking ``1e-6 · t_k`` for the step formula); the
enumeration starts at a lower bound (the largest over groups of the cheapest stage holding the group)
and stops once ``M · t_max`` reaches the best step found (no later bound can win). Candidates are
processed in chunks, vectorised with numpy over the chunk and over the range end ``j``.

Memory is in the stage times: a stage that does not fit with ``f`` microbatches in flight has time
``inf`` in row ``f``. Under 1F1B (training) a stage holds ``min(M, stages after it + 1)`` microbatches,
so the DP runs from the last stage backwards and its state counts the stages placed after (capped at
``M − 1``); GPipe training holds ``M``, inference 1 (one row, no count).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["StageChoice", "DPResult", "stage_dp", "TIE_BREAK"]

TIE_BREAK = 1e-6  # step formula: among plans with as many stages, the one of least total stage time
CHUNK = 128  # t_max candidates per vectorised DP pass


@dataclass(frozen=True)
class StageChoice:
    """A stage of the DP's answer: groups ``[start, stop)`` on submesh ``sub`` with ``inflight``
    microbatches in flight (row ``row`` of the time table) and ``time`` seconds per microbatch."""

    start: int
    stop: int
    sub: int
    row: int
    time: float


@dataclass(frozen=True)
class DPResult:
    """The best plan (stages in pipeline order), its step time under the formula, and search counts."""

    stages: tuple[StageChoice, ...]
    step_time: float
    t_max: float
    candidates: int  # t_max values tried
    candidates_total: int  # distinct finite stage times
    states: int  # DP states evaluated (over all candidates)


def _pass(time: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, num_devices: int, tmax: np.ndarray,
          formula: str, record: bool):
    """One DP pass for the bounds ``tmax`` (K,): best Σc per bound, and (when ``record``) the choices.

    ``time`` (R, G+1, G+1, S): seconds of stage [i, j) on submesh s with the state-``r`` in-flight count;
    ``R`` > 1 only under 1F1B training (state r = stages after, capped at R − 1)."""
    R, G1, _, S = time.shape
    G = G1 - 1
    K = len(tmax)
    D = num_devices
    V = np.full((K, G + 1, D + 1, R), np.inf)
    V[:, G, :, 0] = 0.0  # nothing left to place; devices [o, D) unused
    arg = np.full((G + 1, D + 1, R, 3) if record else (0, 0, 0, 3), -1, np.int64)  # (j, sub, r_after); sub -1 = skip
    tm = tmax[:, None]
    states = 0
    for i in range(G - 1, -1, -1):
        js = np.arange(i + 1, G + 1)
        for s in range(S):
            o, size = int(offsets[s]), int(sizes[s])
            end = o + size
            for r in range(R):
                t = time[r, i, i + 1:, s]  # (len js,)
                if not np.isfinite(t).any():
                    continue
                ok = t[None, :] <= tm
                c = (t[None, :] if formula == "alpa" else tm + TIE_BREAK * t[None, :])
                total = np.where(ok, V[:, i + 1:, end, r] + c, np.inf)  # (K, len js)
                best_j = np.argmin(total, axis=1)
                best = total[np.arange(K), best_j]
                r2 = min(r + 1, R - 1)
                better = best < V[:, i, o, r2]
                V[:, i, o, r2] = np.where(better, best, V[:, i, o, r2])
                states += K * len(js)
                if record and better[0]:
                    arg[i, o, r2] = (int(js[best_j[0]]), s, r)
        for o in range(D - 1, -1, -1):  # device o left unused
            better = V[:, i, o + 1, :] < V[:, i, o, :]
            V[:, i, o, :] = np.where(better, V[:, i, o + 1, :], V[:, i, o, :])
            if record:
                for r in np.flatnonzero(better[0]).tolist():
                    arg[i, o, r] = (i, -1, r)
    return V[:, 0, 0, :], arg, states


def stage_dp(time: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, num_devices: int, microbatches: int, *,
             formula: str = "step", progress: Callable[[float, int], None] | None = None) -> DPResult | None:
    """The best pipeline (see the module doc), or None when no plan fits.

    ``time`` (R, G+1, G+1, S): seconds per microbatch of groups [i, j) on submesh s (``offsets[s]``,
    ``sizes[s]`` in the device order), ``inf`` where invalid or out of memory; row r is for a stage
    with r stages after it (1F1B, capped at R − 1), or the only row. ``progress(best, tried)`` is called
    after every chunk of candidates."""
    if formula not in ("step", "alpa"):
        raise ValueError(f"unknown formula {formula!r}; expected 'step' or 'alpa'")
    R, G1, _, S = time.shape
    G, M = G1 - 1, max(int(microbatches), 1)
    finite = time[np.isfinite(time)]
    total_cands = len(np.unique(finite))
    cands = np.unique(finite[finite >= _tmax_lower_bound(time)])
    best: tuple[float, float] | None = None  # (step, t_max)
    tried = states = 0
    for a in range(0, len(cands), CHUNK):
        chunk = cands[a:a + CHUNK]
        if best is not None:
            chunk = chunk[M * chunk < best[0]]
            if not len(chunk):
                break
        vals, _, n = _pass(time, offsets, sizes, num_devices, chunk, formula, record=False)
        tried += len(chunk)
        states += n
        total = vals.min(axis=1) + (M - 1) * chunk
        if formula == "step":  # Σ c = S·t_max + tie-break: the step is (S + M − 1)·t_max
            total = np.floor(vals.min(axis=1) / chunk + 1e-9) * chunk + (M - 1) * chunk
        k = int(np.argmin(total))
        if np.isfinite(total[k]) and (best is None or total[k] < best[0]):
            best = (float(total[k]), float(chunk[k]))
        if progress is not None and best is not None:
            progress(best[0], tried)
    if best is None:
        return None
    tmax = np.array([best[1]])
    vals, arg, n = _pass(time, offsets, sizes, num_devices, tmax, formula, record=True)
    states += n
    stages = _walk(arg, time, offsets, sizes, int(np.argmin(vals[0])), G)
    t_hi = max(s.time for s in stages)
    step = (len(stages) + M - 1) * t_hi if formula == "step" else sum(s.time for s in stages) + (M - 1) * t_hi
    return DPResult(tuple(stages), float(step), float(t_hi), tried, total_cands, states)


def _tmax_lower_bound(time: np.ndarray) -> float:
    """No plan's slowest stage is faster than this: every group lies in some stage, at best the cheapest
    stage (over ranges holding it, submeshes and rows) — candidates below it are infeasible."""
    R, G1, _, S = time.shape
    best = time.min(axis=(0, 3))  # (G+1, G+1): cheapest stage of each range
    lo = 0.0
    for g in range(G1 - 1):
        lo = max(lo, float(best[: g + 1, g + 1:].min()))
    return lo


def _walk(arg: np.ndarray, time: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, r0: int,
          G: int) -> list[StageChoice]:
    """The stages recorded in ``arg`` from state (0, 0, r0), in pipeline order."""
    out: list[StageChoice] = []
    i, o, r = 0, 0, r0
    while i < G:
        j, s, r_after = (int(x) for x in arg[i, o, r])
        if j < 0:
            raise RuntimeError(f"stage DP: no recorded choice at groups {i}, device {o}")
        if s < 0:
            o += 1
            continue
        out.append(StageChoice(i, j, s, r_after, float(time[r_after, i, j, s])))
        i, o, r = j, int(offsets[s] + sizes[s]), r_after
    return out

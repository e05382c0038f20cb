"""The stage DP against brute force on small random tables (both formulas, 1F1B rows, unused devices)."""

from __future__ import annotations

import numpy as np
import pytest

from planmap.solvers.cluster.dp import stage_dp


def brute(time, offsets, sizes, D, M, formula):
    R, G1, _, S = time.shape
    G = G1 - 1
    best = np.inf

    def rec(i, o, chosen):
        nonlocal best
        if i == G:
            n = len(chosen)
            ts = []
            for p, (a, b, s) in enumerate(chosen):
                r = min(n - 1 - p, R - 1)
                ts.append(time[r, a, b, s])
            if not np.all(np.isfinite(ts)):
                return
            t = max(ts)
            val = (n + M - 1) * t if formula == "step" else sum(ts) + (M - 1) * t
            best = min(best, val)
            return
        for j in range(i + 1, G + 1):
            for s in range(S):
                if offsets[s] >= o and offsets[s] + sizes[s] <= D:
                    rec(j, offsets[s] + sizes[s], [*chosen, (i, j, s)])

    rec(0, 0, [])
    return best


def random_table(rng, G, D, R):
    subs = [(o, s) for s in (1, 2, 4) for o in range(0, D - s + 1) if (o // 4) == ((o + s - 1) // 4)]
    offsets = np.array([o for o, _ in subs])
    sizes = np.array([s for _, s in subs])
    time = np.full((R, G + 1, G + 1, len(subs)), np.inf)
    base = rng.uniform(1, 3, G)
    for i in range(G):
        for j in range(i + 1, G + 1):
            for k, s in enumerate(sizes):
                t = base[i:j].sum() / s ** rng.uniform(0.5, 1.0)
                for r in range(R):
                    if rng.random() > 0.15 * r:  # more in flight, more often out of memory
                        time[r, i, j, k] = round(t, 3)
    return time, offsets, sizes


@pytest.mark.parametrize("formula", ["step", "alpa"])
@pytest.mark.parametrize("seed", range(6))
def test_dp_matches_brute_force(seed, formula):
    rng = np.random.default_rng(seed)
    G, D, M = 4, 6, 3
    R = 1 if seed % 2 else M
    time, offsets, sizes = random_table(rng, G, D, R)
    res = stage_dp(time, offsets, sizes, D, M, formula=formula)
    want = brute(time, offsets, sizes, D, M, formula)
    assert res is not None
    assert res.step_time == pytest.approx(want, rel=1e-9)
    # the stages cover every group in order on disjoint submeshes in device order
    assert res.stages[0].start == 0 and res.stages[-1].stop == G
    ends = [offsets[s.sub] + sizes[s.sub] for s in res.stages]
    assert all(offsets[b.sub] >= e for b, e in zip(res.stages[1:], ends, strict=False))
    assert all(a.stop == b.start for a, b in zip(res.stages, res.stages[1:], strict=False))
    assert res.candidates <= res.candidates_total


def test_dp_none_when_nothing_fits():
    time = np.full((1, 3, 3, 1), np.inf)
    assert stage_dp(time, np.array([0]), np.array([1]), 1, 2) is None


def test_fill_makes_fewer_stages_win_under_the_step_formula():
    # two groups; one device each costs 1.0 per group; a stage of both on 2 devices costs 1.2
    time = np.full((1, 3, 3, 3), np.inf)
    offsets, sizes = np.array([0, 1, 0]), np.array([1, 1, 2])
    time[0, 0, 1, 0] = time[0, 1, 2, 1] = 1.0
    time[0, 0, 2, 2] = 1.2
    res = stage_dp(time, offsets, sizes, 2, 2)
    assert len(res.stages) == 1 and res.step_time == pytest.approx(2 * 1.2)  # (1 + 2 - 1) x 1.2 < (2 + 1) x 1
    res = stage_dp(time, offsets, sizes, 2, 64)
    assert len(res.stages) == 2 and res.step_time == pytest.approx(65 * 1.0)

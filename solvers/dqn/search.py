"""The agent's own search at inference: a Q-ranked beam over the masked action sequence, then a Q-ordered
improvement pass, under a hard budget of ``evaluate`` calls and a time limit.

Auto-MAP searches with its Q-values too; here the Q-network ranks, ``evaluate`` judges. A partial plan's
score is the shaping reward so far plus the Q-value of its last action — the agent's estimate of the
episode's return, minus the plan's objective in ideal loads (:mod:`.env`) — capped by what the stages'
compute already costs (the objective is at least the largest per-replica compute of a stage). The beam
keeps the ``width`` best partial plans at each step (every valid action of each is a candidate; an SPMD
baseline at the first step is a complete candidate). The best complete candidates (a quarter of the
budget) are evaluated, pipelines first (an SPMD baseline can take seconds to lay out), each group best
first; then each evaluated pipeline, best first, is improved in turn:

* a descent without ``evaluate``: cut moves (one group earlier or later) while they lower the stages'
  compute loads (largest first), then one evaluation of where it ends;
* the neighbours (cut moves, a stage merged into the previous one, a group split off as a new stage, a
  stage on another submesh size, a stage on any submesh taking all later groups) — ranked by their
  compute loads, the best two dozen replayed through the masks (only plans the masks allow are judged)
  and ranked by the agent's score, evaluated in that order; the first better than the incumbent
  (objective, then device loads largest first: a tie-break on the plateaus of a bottleneck objective)
  replaces it.

The search stops when the budget or the time is spent. Everything is deterministic (stable sorts, ties
broken by the action sequence) except where the time limit cuts the search short, which the result says.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from planmap.problem import Solution

from .env import PlanEnv
from .space import CONTINUE, CPU, SIZES, Partial

__all__ = ["SearchResult", "search"]

Actions = tuple[int, ...]


@dataclass
class SearchResult:
    objective: float = math.inf
    actions: Actions = ()
    plan: Solution | None = None
    evaluations: int = 0
    candidates: int = 0  # complete plans the beam produced
    timed_out: bool = False
    seconds: float = 0.0
    history: list[float] = field(default_factory=list)  # best objective after each evaluate call


def _open_load(env: PlanEnv, s: Partial) -> float:
    """The open stage's compute per replica, in ideal loads (0 before the first stage)."""
    return s.compute / len(s.devices[-1]) / env.features.ideal if s.num_stages else 0.0


def _estimate(ret: float, q: float, closed: float, s: Partial, env: PlanEnv) -> float:
    """The agent's estimate of the return after an action: the rewards so far plus its Q-value, never above
    what the stages' compute already costs (minus the largest per-replica compute of a stage, closed or open:
    the objective is at least that)."""
    return min(ret + q, -max(closed, _open_load(env, s)))


def _beam(agent, env: PlanEnv, width: int) -> list[tuple[float, Actions]]:
    """Complete action sequences of a Q-ranked beam, best estimate first."""
    space, feats = env.space, env.features
    frontier: list[tuple[Partial, float, float, Actions]] = [(Partial(), 0.0, 0.0, ())]  # state, closed, ret, acts
    done: list[tuple[float, Actions]] = []
    while frontier:
        masks = [space.mask(s) for s, *_ in frontier]
        q = agent.q_batch(np.stack([feats.observe(s, m) for (s, *_), m in zip(frontier, masks, strict=True)]))
        children: list[tuple[float, Actions, Partial, float, float]] = []
        for i, ((s0, closed0, ret0, acts), m) in enumerate(zip(frontier, masks, strict=True)):
            for a in np.flatnonzero(m).tolist():
                if a > CPU:
                    done.append((ret0 + float(q[i, a]), (*acts, a)))
                    continue
                s = s0.copy()
                closed, r = env.advance(s, closed0, a)
                children.append((_estimate(ret0, float(q[i, a]), closed, s, env), (*acts, a), s, closed, ret0 + r))
        children.sort(key=lambda c: (-c[0], c[1]))
        frontier = []
        for score, acts, s, closed, ret in children[:width]:
            if s.next_group == space.num_groups:
                done.append((score, acts))
            else:
                frontier.append((s, closed, ret, acts))
    done.sort(key=lambda c: (-c[0], c[1]))
    return done


def _loads(env: PlanEnv, s: Partial) -> tuple[float, ...]:
    """Per-replica compute of every stage of a complete plan, largest first (a tie-break on the plateaus of
    a bottleneck objective: of two plans with the same largest load, the one with fewer stages near it)."""
    bounds = [*s.starts, env.space.num_groups]
    loads = [sum(float(env.space.compute[t, list(d)].max()) for t in range(a, b)) / len(d)
             for a, b, d in zip(bounds[:-1], bounds[1:], s.devices, strict=True)]
    return tuple(sorted(loads, reverse=True))


def _key(ev) -> tuple[float, tuple[float, ...]]:
    """Plans compare by objective, then by their devices' loads, largest first."""
    return ev.objective, tuple(np.sort(np.nan_to_num(ev.load, nan=0.0))[::-1].tolist())


def _better(a: tuple[float, tuple], b: tuple[float, tuple]) -> bool:
    if a[0] < b[0] * (1 - 1e-9):
        return True
    return a[0] <= b[0] * (1 + 1e-9) and a[1] < b[1]


class _Replayer:
    """Scores complete pipeline sequences by replaying them through the masks, reusing the states of the
    prefix they share with the sequence last given to :meth:`set_base`."""

    def __init__(self, agent, env: PlanEnv):
        self.agent, self.env = agent, env
        self.base: Actions = ()
        self.prefix: list[tuple[Partial, float, float]] = []  # before step k: state, closed, ret

    def set_base(self, acts: Actions) -> None:
        self.base, self.prefix = acts, []
        s, closed, ret = Partial(), 0.0, 0.0
        for a in acts:
            self.prefix.append((s.copy(), closed, ret))
            closed, r = self.env.advance(s, closed, a)
            ret += r

    def score(self, acts: Actions) -> tuple[float, tuple[float, ...]] | None:
        """The estimate of a complete sequence and its stages' compute loads (largest first) when the masks
        allow every step of it, else None."""
        k = next((i for i, (a, b) in enumerate(zip(acts, self.base, strict=False)) if a != b), len(self.base))
        if not self.prefix or len(acts) != len(self.base):
            return None
        s, closed, ret = self.prefix[min(k, len(self.prefix) - 1)]
        k = min(k, len(self.prefix) - 1)
        s = s.copy()
        space = self.env.space
        for i in range(k, len(acts)):
            m = space.mask(s)
            if not m[acts[i]]:
                return None
            if i == len(acts) - 1:
                q = float(self.agent.q_batch(self.env.features.observe(s, m)[None])[0, acts[i]])
                closed, _ = self.env.advance(s, closed, acts[i])
                return _estimate(ret, q, closed, s, self.env), _loads(self.env, s)
            closed, r = self.env.advance(s, closed, acts[i])
            ret += r
        return None


def _neighbours(acts: Actions, shifts_only: bool = False) -> list[Actions]:
    """Plans one edit away: a cut moved by one group, a stage merged or split, a stage's submesh size changed,
    a stage (on any submesh size) taking every group after it
    (``shifts_only``: only the cut moves, the cheap neighbourhood of :func:`_descend`)."""
    out: list[Actions] = []
    n = len(acts)
    for i, a in enumerate(acts):
        if a == CONTINUE:
            if shifts_only:
                continue
            out += [(*acts[:i], b, *acts[i + 1:]) for b in range(1, CPU + 1)]  # split a new stage off here
            continue
        if i > 0:
            if not shifts_only:
                out.append((*acts[:i], CONTINUE, *acts[i + 1:]))  # merge into the previous stage
            if acts[i - 1] == CONTINUE:
                out.append((*acts[:i - 1], a, CONTINUE, *acts[i + 1:]))  # cut one group earlier
        if i + 1 < n and acts[i + 1] == CONTINUE:
            out.append((*acts[:i], CONTINUE, a, *acts[i + 2:]))  # cut one group later
        if not shifts_only:
            out += [(*acts[:i], b, *acts[i + 1:]) for b in range(1, CPU + 1) if b != a]  # another submesh
            rest = (CONTINUE,) * (n - i - 1)
            out += [(*acts[:i], b, *rest) for b in range(1, CPU + 1)]  # this stage takes the rest of the groups
    return list(dict.fromkeys(out))


class _Loads:
    """The stages' compute loads of a complete pipeline sequence from prefix sums (one action per group: a
    cut at group ``i`` starts a stage there), without replaying it through the masks: cheap enough to rank
    every neighbour and to descend on."""

    def __init__(self, env: PlanEnv):
        self.space = env.space
        self.cum: dict[tuple[int, ...], np.ndarray] = {}

    def _prefix(self, devs: tuple[int, ...]) -> np.ndarray:
        if devs not in self.cum:
            per_group = self.space.compute[:, list(devs)].max(axis=1) / len(devs)
            self.cum[devs] = np.concatenate([[0.0], np.cumsum(per_group)])
        return self.cum[devs]

    def __call__(self, acts: Actions) -> tuple[float, ...] | None:
        """Largest first; None when a cut finds no devices."""
        sp = self.space
        ptr = cpus = 0
        stages: list[tuple[int, tuple[int, ...]]] = []
        for i, a in enumerate(acts):
            if a == CONTINUE:
                if not stages:
                    return None
                continue
            if a == CPU:
                if cpus >= len(sp.cpus):
                    return None
                devs: tuple[int, ...] = (sp.cpus[cpus],)
                cpus += 1
            else:
                block = sp.block(ptr, SIZES[a - 1])
                if block is None:
                    return None
                devs = block
                ptr += len(devs)
            stages.append((i, devs))
        ends = [i for i, _ in stages[1:]] + [len(acts)]
        loads = [float(self._prefix(d)[e] - self._prefix(d)[i]) for (i, d), e in zip(stages, ends, strict=True)]
        return tuple(sorted(loads, reverse=True))


def _descend(replayer: _Replayer, loads: _Loads, acts: Actions, steps: int) -> Actions:
    """Follow the cost model's compute downhill without evaluating: up to ``steps`` times, move to the cut
    move whose stages' compute loads (largest first) beat the current plan's most; the end point is kept
    only when the masks allow it (checked once, at the end)."""
    start, here = acts, loads(acts)
    for _ in range(steps):
        if here is None:
            break
        scored = [(sc, nb) for nb in _neighbours(acts, True) if (sc := loads(nb)) is not None]
        if not scored:
            break
        sc, nb = min(scored)
        if sc >= here:
            break
        acts, here = nb, sc
    if acts != start:
        replayer.set_base(start)
        if replayer.score(acts) is None:
            return start
    return acts


def search(agent, env: PlanEnv, evaluations: int = 32, width: int = 32, seconds: float = 10.0,
           descent: int = 64) -> SearchResult:
    """Beam, then improvement, within ``evaluations`` evaluate calls and ``seconds`` (see the module doc)."""
    t0 = time.perf_counter()
    res = SearchResult()
    seen: dict[Actions, tuple[float, tuple]] = {}

    def judge(acts: Actions) -> tuple[float, tuple]:
        if acts in seen:
            return seen[acts]
        if res.evaluations >= evaluations or (res.evaluations and time.perf_counter() - t0 > seconds):
            res.timed_out = res.evaluations < evaluations
            raise StopIteration
        before = env.evaluations
        env.reset()
        info: dict = {}
        for a in acts:
            _, _, done, _, info = env.step(a)
            if done:
                break
        res.evaluations += env.evaluations - before
        obj = float(info.get("objective", math.inf))
        seen[acts] = key = _key(env.evaluation) if math.isfinite(obj) else (math.inf, ())
        if obj < res.objective:
            res.objective, res.actions, res.plan = obj, acts, env.plan
        res.history.append(res.objective)
        return key

    try:
        ranked = _beam(agent, env, width)
        res.candidates = len(ranked)
        top = ranked[: max(1, evaluations // 4)]
        for acts in [a for _, a in top if a[-1] <= CPU] + [a for _, a in top if a[-1] > CPU]:
            judge(acts)  # pipelines first: an SPMD baseline can take seconds to lay out and judge
        starts = sorted((key, acts) for acts, key in seen.items() if acts[-1] <= CPU and math.isfinite(key[0]))
        replayer, loads = _Replayer(agent, env), _Loads(env)
        for incumbent, current in starts:
            _improve(judge, replayer, loads, seen, incumbent, current, descent)
    except StopIteration:
        pass
    res.seconds = time.perf_counter() - t0
    return res


def _improve(judge, replayer: _Replayer, loads: _Loads, seen: dict, incumbent: tuple, current: Actions,
             descent: int, shortlist: int = 24) -> None:
    """Hill-climb from ``current`` (see the module doc) until no neighbour on the shortlist is better."""
    while current:
        down = _descend(replayer, loads, current, descent)
        if down != current and down not in seen and _better(key := judge(down), incumbent):
            incumbent, current = key, down
            continue
        cheap = sorted((sc, nb) for nb in _neighbours(current) if nb not in seen and (sc := loads(nb)) is not None)
        replayer.set_base(current)
        scored = [(est, nb) for _, nb in cheap[:shortlist] if (est := replayer.score(nb)) is not None]
        scored.sort(key=lambda c: (-c[0][0], c[0][1], c[1]))
        current = ()
        for _, nb in scored:
            if _better(key := judge(nb), incumbent):
                incumbent, current = key, nb
                break

"""The agent's own search at inference: a Q-ranked beam over the masked action sequence, then a Q-ordered
improvement pass, under a hard budget of ``evaluate`` calls and a time limit.

Auto-MAP searches with its Q-values too; here the Q-network ranks, ``evaluate`` judges. A partial plan's
score is the shaping reward so far plus the Q-value of its last action — the agent's estimate of the
episode's return, minus the plan's objective in ideal loads (:mod:`.env`) — capped by what the stages'
compute already costs (the objective is at least the largest per-replica compute of a stage). The beam
keeps the ``width`` best partial plans at each step (every valid action of each is a candidate; an SPMD
baseline at the first step is a complete candidate). The best complete pipelines (a quarter of the budget)
are evaluated, best first — with ``greedy`` (a fine-tuned agent) the greedy episode first of all: the beam may
prune it on its estimates, and fine-tuning makes it the best plan found. :attr:`SearchResult.beam_objective` is
the best of these, what the DQN alone finds;
then each, best first, is improved in turn — in a finer grouping of the same graph (up to ``fine_groups``
groups, cut wherever the beam's grouping cuts, so the beam's plans carry over unchanged and a cut can land
between two of the coarse groups):

* a descent without ``evaluate``: cut moves (one group earlier or later) while they lower the stages' loads
  (largest first; compute per replica plus half the time to move what crosses each of the stage's cuts,
  from the cost model), then one evaluation of where it ends;
* the neighbours (cut moves, a stage merged into the previous one, a group split off as a new stage, a
  stage on another submesh size, a stage on any submesh taking all later groups) — the two dozen with the
  lowest loads replayed through the masks (only plans the masks allow are judged), evaluated in the order of
  their stages' compute loads, ties by the agent's score; the first better than the incumbent
  (objective, then device loads largest first: a tie-break on the plateaus of a bottleneck objective)
  replaces it.

A sixth of the pipelines' evaluations is kept for the last pass (:mod:`.polish`): single operations of the
best pipeline moved across its stage boundaries, which no grouping of the agent's fixed topological order can
express (the exact DP's plans of BERT and T5 interleave independent branches across cuts). It alternates with
the improvement pass in the finer grouping: unit moves up to the first better plan, then a few more of that
pass's evaluations (a sixteenth of the budget), again, until the budget is spent or neither finds a plan to
judge.

The SPMD baselines come last: the agent has no trained Q-values for them (pre-training graphs carry no
dimension maps) and laying one out takes seconds on a large model, so each beam-ranked baseline whose
predicted time (from the model's size) fits in half of ``seconds`` keeps an evaluation and its time for the
end. The improvement pass runs in the beam's grouping first (at most 3/4 of its evaluations), then in the finer
one. The search stops when the budget or the time is spent. Everything is deterministic
(stable sorts, ties broken by the action sequence) except where the time limit cuts the search short, which
the result says.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import numpy as np

from planmap.evaluate import Evaluation, evaluate
from planmap.problem import Problem, Solution

from .env import PlanEnv
from .polish import polish
from .space import BASELINE_ACTIONS, CONTINUE, CPU, SIZES, Partial

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
    beam_objective: float = math.inf  # the best of the beam's plans, before the improvement pass
    evaluation: Evaluation | None = None  # evaluate's verdict on ``plan``
    moved: int = 0  # units the last pass moved across stage boundaries (:mod:`.polish`)


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


def _greedy(agent, env: PlanEnv) -> Actions | None:
    """The greedy pipeline episode's actions (argmax Q among the valid pipeline actions), None at a dead end."""
    s, acts = Partial(), []
    while s.next_group < env.space.num_groups:
        m = env.space.mask(s)
        pipeline = m.copy()
        pipeline[CPU + 1:] = False  # the pipeline actions only (no SPMD baseline)
        if not pipeline.any():
            return None
        a = agent.act(env.features.observe(s, m), pipeline, eps=0.0)
        acts.append(a)
        env.space.apply(s, a)
    return tuple(acts)


def _loads(env: PlanEnv, s: Partial) -> tuple[float, ...]:
    """Per-replica compute of every stage of a complete plan, largest first (a tie-break on the plateaus of
    a bottleneck objective: of two plans with the same largest load, the one with fewer stages near it)."""
    bounds = [*s.starts, env.space.num_groups]
    loads = [float(env.space.slowest(d)[a:b].sum()) / len(d)
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
    """The stages' loads of a complete pipeline sequence — compute per replica from prefix sums, plus half the
    time to move what crosses each of its two cuts, per replica (one action per group: a cut at group ``i``
    starts a stage there) — without replaying it through the masks: cheap enough to rank every neighbour and
    to descend on."""

    def __init__(self, env: PlanEnv):
        self.space = env.space
        self.cum: dict[tuple[int, ...], np.ndarray] = {}
        ideal = env.features.ideal  # transfers across each group boundary, seconds (one end pays about half)
        self.cut = 0.5 * ideal * np.append(env.features.cut, 0.0)
        self.cut_cpu = 0.5 * ideal * np.append(env.features.cut_cpu, 0.0)

    def _prefix(self, devs: tuple[int, ...]) -> np.ndarray:
        if devs not in self.cum:
            self.cum[devs] = np.concatenate([[0.0], np.cumsum(self.space.slowest(devs) / len(devs))])
        return self.cum[devs]

    def __call__(self, acts: Actions) -> tuple[float, ...] | None:
        """Largest first; None when a cut finds no devices."""
        sp = self.space
        ptr = cpus = 0
        stages: list[tuple[int, tuple[int, ...]]] = []
        if not acts or acts[0] == CONTINUE:
            return None
        for i in [i for i, a in enumerate(acts) if a != CONTINUE]:
            a = acts[i]
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
        loads = []
        for (i, d), e in zip(stages, ends, strict=True):
            cut = self.cut_cpu if d[0] in sp.cpus else self.cut
            comm = (cut[i - 1] if i else 0.0) + (cut[e - 1] if e < len(acts) else 0.0)
            loads.append(float(self._prefix(d)[e] - self._prefix(d)[i]) + comm / len(d))
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
           descent: int = 64, fine_groups: int = 128, greedy: bool = False) -> SearchResult:
    """Beam, then improvement, within ``evaluations`` evaluate calls and ``seconds`` (see the module doc)."""
    t0 = time.perf_counter()
    res = SearchResult()
    seen: dict[Actions, tuple[float, tuple]] = {}
    limits = [evaluations, seconds]  # of the current phase: evaluate calls and seconds since t0
    ranked = _beam(agent, env, width)
    res.candidates = len(ranked)
    fine = _finer(env, fine_groups)

    def judge(acts: Actions) -> tuple[float, tuple]:
        if acts in seen:
            return seen[acts]
        if res.evaluations >= limits[0] or (res.evaluations and time.perf_counter() - t0 > limits[1]):
            res.timed_out = res.evaluations < limits[0]
            raise StopIteration
        before = fine.evaluations
        fine.reset()
        info: dict = {}
        for a in acts:
            _, _, done, _, info = fine.step(a)
            if done:
                break
        res.evaluations += fine.evaluations - before
        obj = float(info.get("objective", math.inf))
        seen[acts] = key = _key(fine.evaluation) if math.isfinite(obj) else (math.inf, ())
        if obj < res.objective:
            res.objective, res.actions, res.plan, res.evaluation = obj, acts, fine.plan, fine.evaluation
        res.history.append(res.objective)
        return key

    refine = _refiner(env, fine)
    coarse_seen: dict[Actions, tuple[float, tuple]] = {}

    def judge_coarse(acts: Actions) -> tuple[float, tuple]:
        if acts not in coarse_seen:
            coarse_seen[acts] = judge(refine(acts))
        return coarse_seen[acts]

    baselines = _affordable([a for _, a in ranked if a[-1] > CPU], env, seconds / 2)
    # the pipelines first, leaving the baselines their evaluations and their predicted time; the improvement
    # pass in the beam's grouping (at most 3/4 of the pipelines' evaluations), then in the finer one
    budget, limits[1] = evaluations - len(baselines), seconds - sum(c for _, c in baselines)
    levels = [(env, judge_coarse, coarse_seen)] + ([(fine, judge, seen)] if fine is not env else [])
    try:
        limits[0] = budget
        top = [a for _, a in ranked if a[-1] <= CPU]
        first = _greedy(agent, env) if greedy else None  # the beam may prune the argmax episode on its estimates
        top = ([first] + [a for a in top if a != first]) if first is not None else top
        for acts in top[: max(1, evaluations // 4)]:
            judge_coarse(acts)
    except StopIteration:
        pass
    res.beam_objective = res.objective
    share = budget - budget // 6  # a sixth of the pipelines' evaluations is kept for the unit moves
    for k, level in enumerate(levels):
        limits[0] = share if k == len(levels) - 1 else share * 3 // 4
        _improve_level(agent, level, descent)
    polish_judge = _plan_judge(env.problem, res, limits, t0)
    while res.evaluations < budget:  # unit moves up to a better plan, then a few more steps of the improvement pass
        before = res.evaluations
        _polish(env.problem, res, polish_judge, budget, limits)
        limits[0] = min(budget, res.evaluations + max(2, budget // 16))
        _improve_level(agent, levels[-1], descent)
        if res.evaluations == before:
            break
    try:
        limits[:] = [evaluations, seconds]
        for acts, _ in baselines:
            judge(acts)
    except StopIteration:
        pass
    res.seconds = time.perf_counter() - t0
    return res


def _improve_level(agent, level: tuple, descent: int) -> None:
    """The improvement pass in one grouping (``level``: its environment, judge and judged plans), from every plan
    judged there, best first, until the current limits stop it."""
    env, judge, seen = level
    starts = sorted((key, acts) for acts, key in seen.items() if math.isfinite(key[0]))
    replayer, loads = _Replayer(agent, env), _Loads(env)
    with contextlib.suppress(StopIteration):
        for incumbent, current in starts:
            _improve(judge, replayer, loads, seen, incumbent, current, descent)


def _finer(env: PlanEnv, fine_groups: int) -> PlanEnv:
    """The environment the improvement pass works in: up to ``fine_groups`` groups, cut wherever ``env`` cuts
    (so every plan of the beam is a plan here), or ``env`` itself when it is as fine already."""
    if fine_groups <= env.space.num_groups:
        return env
    fine = PlanEnv(env.problem, fine_groups, env.mask_actions, env.space.cut_positions)
    return fine if fine.space.num_groups > env.space.num_groups else env


def _refiner(coarse: PlanEnv, fine: PlanEnv):
    """Maps an action sequence of ``coarse`` to the same plan in ``fine`` (a cut starts the fine group where the
    coarse group starts; the fine groups inside a coarse one continue)."""
    if fine is coarse:
        return lambda acts: acts
    index = {pos: i for i, pos in enumerate(fine.space.group_start)}
    first = [index[pos] for pos in coarse.space.group_start]

    def refine(acts: Actions) -> Actions:
        if acts[-1] > CPU:
            return acts
        out = [CONTINUE] * fine.space.num_groups
        for k, a in enumerate(acts):
            out[first[k]] = a
        return tuple(out)

    return refine


# Seconds per operation of the original graph to lay out and judge an SPMD baseline on 2 shared cores (measured on
# the GPT and CNN example specs: 5-9 ms for data parallel, 4-6 ms for FSDP, 25-29 ms for Megatron)
SPMD_SECONDS_PER_OP = {"data-parallel": 0.01, "fsdp": 0.007, "megatron": 0.035}


def _affordable(candidates: list[Actions], env: PlanEnv, seconds: float) -> list[tuple[Actions, float]]:
    """The SPMD baselines to judge, in the beam's order, while their predicted time fits in ``seconds``: the agent
    has no trained Q-values for them (pre-training graphs carry no dim maps), and laying one out takes seconds on
    a large model, so they get a time share decided before the search (deterministically, from the model's size)."""
    ops = env.problem.original.num_nodes
    out, used = [], 0.0
    for acts in candidates:
        cost = ops * SPMD_SECONDS_PER_OP[BASELINE_ACTIONS[acts[-1] - 1 - CPU]]
        if used + cost <= seconds:
            out.append((acts, cost))
            used += cost
    return out


def _improve(judge, replayer: _Replayer, loads: _Loads, seen: dict, incumbent: tuple, current: Actions,
             descent: int, shortlist: int = 8) -> None:
    """Hill-climb from ``current`` (see the module doc) until no neighbour on the shortlist is better."""
    while current:
        down = _descend(replayer, loads, current, descent)
        if down != current and down not in seen and _better(key := judge(down), incumbent):
            incumbent, current = key, down
            continue
        cheap = sorted((sc, nb) for nb in _neighbours(current) if nb not in seen and (sc := loads(nb)) is not None)
        replayer.set_base(current)
        scored = [(est, nb) for _, nb in cheap[:shortlist] if (est := replayer.score(nb)) is not None]
        scored.sort(key=lambda c: (c[0][1], -c[0][0], c[1]))  # the loads, then the agent's score
        current = ()
        for _, nb in scored:
            if _better(key := judge(nb), incumbent):
                incumbent, current = key, nb
                break


def _plan_judge(problem: Problem, res: SearchResult, limits: list, t0: float):
    """Judges a plan (a Solution) for :func:`.polish.polish` under the same budget as the action sequences."""
    cache: dict[bytes, tuple[tuple[float, tuple], np.ndarray | None]] = {}

    def judge(sol: Solution) -> tuple[tuple[float, tuple], np.ndarray | None]:
        name = sol.assignment.tobytes() + repr([s.devices for s in sol.stages]).encode()
        if name not in cache:
            cache[name] = _judge_plan(sol)
        return cache[name]

    def _judge_plan(sol: Solution) -> tuple[tuple[float, tuple], np.ndarray | None]:
        if res.evaluations >= limits[0] or (res.evaluations and time.perf_counter() - t0 > limits[1]):
            res.timed_out = res.evaluations < limits[0]
            raise StopIteration
        ev = evaluate(problem, sol)
        res.evaluations += 1
        if not ev.feasible or not math.isfinite(ev.objective):
            res.history.append(res.objective)
            return (math.inf, ()), None
        if ev.objective < res.objective:
            res.objective, res.plan, res.evaluation = ev.objective, sol, ev
            res.moved += 1
        res.history.append(res.objective)
        return _key(ev), ev.load

    return judge


def _polish(problem: Problem, res: SearchResult, judge, budget: int, limits: list) -> None:
    """Unit moves across the stage boundaries of the best pipeline (:mod:`.polish`) with what the budget leaves."""
    if res.plan is None or res.evaluation is None:
        return
    limits[0] = budget
    with contextlib.suppress(StopIteration):
        polish(problem, res.plan, _key(res.evaluation), res.evaluation.load, judge, rounds=1)

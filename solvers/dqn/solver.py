"""``dqn``: the Auto-MAP-style planner — a pre-trained Double-DQN agent decides the plan group by group.

Inference loads the shipped checkpoint (or ``passthrough["checkpoint"]``), optionally fine-tunes on the
target for ``finetune`` seconds (within the time limit), then rolls out the greedy policy and, up to
``rollouts`` episodes in all, deviations: every other first action, and the runner-up action at one
later step of the greedy episode (the least sure steps first, by Q margin), then at two steps, … —
every plan scored by ``evaluate``. The best plan is answered, re-scored by ``evaluate``; when ``exact``
is set (default: off) the ``dp`` solver runs in what is left of the time limit and the certificate
gives the gap to its bound. The certificate's options hold the checkpoint's sha256 (a plan input:
another checkpoint gives another plan file), the reward and the number of evaluations.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.vocabulary import ObjectiveKind

from . import checkpoint
from .env import PlanEnv

__all__ = ["DQN", "plan_with_agent"]

VERSION = "1"


Alternatives = list[list[tuple[float, int]]]


def _episode(agent, env: PlanEnv, forced: dict[int, int]) -> tuple[float, Solution | None, Alternatives]:
    """A greedy episode with ``forced`` actions at some steps; returns (objective, plan, per step the
    alternatives as (Q margin to the best, action): every other valid action at the first step — so each
    first decision, a pipeline or an SPMD baseline, gets its episode — and the runner-up at later ones)."""
    obs, info = env.reset()
    mask = info["action_mask"]
    alternatives: Alternatives = []
    done, step = False, 0
    info = {}
    while not done and mask.any():
        valid = np.flatnonzero(mask)
        q = agent.q(obs)[valid]
        rank = np.argsort(-q, kind="stable")
        others = rank[1:] if step == 0 else rank[1:2]
        alternatives.append([(float(q[rank[0]] - q[j]), int(valid[j])) for j in others])
        a = forced.get(step, int(valid[rank[0]]))
        obs, _, done, _, info = env.step(a)
        mask = info.get("action_mask", np.zeros_like(mask))
        step += 1
    obj = float(info.get("objective", math.inf))
    return obj, env.plan if math.isfinite(obj) else None, alternatives


def plan_with_agent(agent, problem: Problem, rollouts: int = 16, max_groups: int = 32,
                    deadline: float | None = None) -> tuple[float, Solution | None, int, PlanEnv]:
    """Search guided by the agent: the greedy episode, then episodes that deviate from it at one step (every
    first action; the runner-up later, least sure steps first: the smallest Q margin), then at two, …,
    ``rollouts`` episodes in all."""
    import heapq

    env = PlanEnv(problem, max_groups)
    best_obj, best = math.inf, None
    queue: list[tuple[int, float, int, tuple[tuple[int, int], ...]]] = [(0, 0.0, 0, ())]
    tried, pushed = 0, 1
    while queue and tried < rollouts and (deadline is None or tried == 0 or time.perf_counter() < deadline):
        _, _, _, forced = heapq.heappop(queue)
        obj, sol, alternatives = _episode(agent, env, dict(forced))
        tried += 1
        if sol is not None and obj < best_obj:
            best_obj, best = obj, sol
        last = max((s for s, _ in forced), default=-1)
        for s, alts in enumerate(alternatives):
            if s <= last:
                continue
            for m, alt in alts:
                heapq.heappush(queue, (len(forced) + 1, m, pushed, (*forced, (s, alt))))
                pushed += 1
    return best_obj, best, env.evaluations, env


class DQN:
    """A pre-trained Double-DQN agent (see the module doc). Options (``passthrough``): ``checkpoint`` (path),
    ``rollouts`` (default 16), ``finetune`` (seconds, default 0), ``exact`` (run ``dp`` for the gap, default
    false), ``max_groups`` (default 32)."""

    name = "dqn"
    objectives = frozenset({ObjectiveKind.THROUGHPUT})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        pt = dict(options.passthrough)
        path = pt.get("checkpoint")
        agent, _meta = checkpoint.load(path, seed=options.seed)
        sha = checkpoint.sha256(path or checkpoint.shipped_path())
        limit = options.time_limit if options.time_limit and options.time_limit > 0 else math.inf
        tune = min(float(pt.get("finetune", 0.0)), 0.5 * limit)
        groups = int(pt.get("max_groups", 32))
        evals = 0
        if tune > 0:
            from .train import train

            log = train(agent, problem, seconds=tune, seed=options.seed, max_groups=groups)
            evals += log.evaluations
        obj, sol, n, _env = plan_with_agent(agent, problem, int(pt.get("rollouts", 16)), groups, t0 + limit)
        evals += n
        if sol is None:
            raise InfeasibleError(f"{problem.name}: the DQN agent found no plan that fits "
                                  f"({evals} evaluations; its masks rule out every way on for the groups left)")
        ev = evaluate(problem, sol)
        bound, status, note = None, Status.HEURISTIC, ""
        if pt.get("exact", False):
            bound, note = self._exact(problem, options, t0 + limit)
        opts = {"checkpoint_sha256": sha, "rollouts": int(pt.get("rollouts", 16)), "finetune_s": tune}
        tuned = f"fine-tuned {tune:.0f}s, " if tune else ""
        msg = (f"DQN agent ({VERSION}): reward {-ev.objective:.6g}s (minus the objective), {evals} evaluations, "
               f"{tuned}checkpoint sha256 {sha[:12]}{note}")
        cert = Certificate(status, self.name, objective=ev.objective, bound=bound, version=VERSION, message=msg,
                           options=opts, wall_time=time.perf_counter() - t0)
        return replace(sol, certificate=cert)

    @staticmethod
    def _exact(problem: Problem, options: SolveOptions, deadline: float) -> tuple[float | None, str]:
        """The exact DP's bound when it finishes (proven) in the time left."""
        from planmap.solvers.pipeline.dp import ThroughputDP

        left = deadline - time.perf_counter()
        if left <= 1:
            return None, "; exact DP not run (no time left)"
        try:
            sol = ThroughputDP().solve(problem, replace(options, time_limit=left, passthrough={}, progress=None))
        except PlanmapError as e:
            return None, f"; exact DP did not answer ({str(e).splitlines()[0][:80]})"
        c = sol.certificate
        if c.bound is None:
            return None, f"; exact DP gave no bound ({c.status.value})"
        return float(c.bound), f"; gap to the exact DP's bound {c.bound:.6g}s"

"""``dqn``: the Auto-MAP-style planner — a pre-trained Double-DQN agent decides the plan group by group.

Inference loads the shipped checkpoint (or ``passthrough["checkpoint"]``), optionally fine-tunes on the
target for ``finetune`` seconds (within the time limit), then searches with its Q-values
(:mod:`.search`: a Q-ranked beam of ``width`` partial plans, then a Q-ordered improvement pass) within
``evaluations`` calls of ``evaluate`` (default 32) and ``seconds`` (default 10, and never past the time
limit). The best plan is answered, re-scored by ``evaluate``; when ``exact``
is set (default: off) the ``dp`` solver runs in what is left of the time limit and the certificate
gives the gap to its bound. The checkpoint is a plan input (``Certificate.inputs``: the plan records its
path and sha256, so ``planmap check`` reports the plan stale when the checkpoint changes); the
certificate's options also hold its sha256, and the message the reward and the number of evaluations.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from planmap.errors import InfeasibleError, PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import Certificate, Problem, Solution, SolveOptions, Status
from planmap.vocabulary import ObjectiveKind

from . import checkpoint
from .env import PlanEnv
from .search import SearchResult, search

__all__ = ["DQN", "plan_with_agent"]

VERSION = "4"


def plan_with_agent(agent, problem: Problem, evaluations: int = 32, max_groups: int = 32, seconds: float = 10.0,
                    width: int = 32, fine_groups: int = 128, greedy: bool = False) -> tuple[SearchResult, PlanEnv]:
    """The agent's search (:func:`.search.search`) on ``problem``: at most ``evaluations`` evaluate calls and
    ``seconds`` (``greedy``: a fine-tuned agent, its greedy episode judged first); the result holds the best plan
    (``plan``: None when nothing fits)."""
    env = PlanEnv(problem, max_groups)
    return search(agent, env, evaluations=evaluations, width=width, seconds=seconds, fine_groups=fine_groups,
                  greedy=greedy), env


class DQN:
    """A pre-trained Double-DQN agent (see the module doc). Options (``passthrough``): ``checkpoint`` (path),
    ``evaluations`` (default 32), ``seconds`` (search time, default 10), ``width`` (beam, default 32),
    ``finetune`` (seconds, default 0), ``exact`` (run ``dp`` for the gap, default false), ``max_groups``
    (default 32), ``fine_groups`` (the improvement pass's grouping, default 128)."""

    name = "dqn"
    objectives = frozenset({ObjectiveKind.THROUGHPUT})

    def solve(self, problem: Problem, options: SolveOptions) -> Solution:
        t0 = time.perf_counter()
        pt = dict(options.passthrough)
        path = pt.get("checkpoint")
        agent, meta = checkpoint.load(path, seed=options.seed)
        ck_path = Path(path) if path else checkpoint.shipped_path()
        sha = checkpoint.sha256(ck_path)
        limit = options.time_limit if options.time_limit and options.time_limit > 0 else math.inf
        tune = min(float(pt.get("finetune", 0.0)), 0.5 * limit)
        groups = int(pt.get("max_groups", 32))
        evals = 0
        if tune > 0:
            from .finetune import finetune

            log = finetune(agent, problem, tune, seed=options.seed, max_groups=groups)
            evals += log.evaluations
        budget, width = int(pt.get("evaluations", 32)), int(pt.get("width", 32))
        seconds = max(0.0, min(float(pt.get("seconds", 10.0)), limit - (time.perf_counter() - t0)))
        res, _env = plan_with_agent(agent, problem, budget, groups, seconds, width, int(pt.get("fine_groups", 128)),
                                    greedy=tune > 0 or "finetuned_on" in meta)
        evals += res.evaluations
        sol = res.plan
        if sol is None:
            raise InfeasibleError(f"{problem.name}: the DQN agent found no plan that fits "
                                  f"({evals} evaluations; its masks rule out every way on for the groups left)")
        ev = evaluate(problem, sol)
        bound, status, note = None, Status.HEURISTIC, ""
        if pt.get("exact", False):
            bound, note = self._exact(problem, options, t0 + limit)
        opts = {"checkpoint_sha256": sha, "evaluations": budget, "width": width, "finetune_s": tune}
        tuned = f"fine-tuned {tune:.0f}s, " if tune else ""
        stopped = ", stopped by the time limit" if res.timed_out else ""
        msg = (f"DQN agent ({VERSION}): reward {-ev.objective:.6g}s (minus the objective), {evals} evaluations "
               f"(budget {budget}{stopped}), {tuned}checkpoint sha256 {sha[:12]}{note}")
        cert = Certificate(status, self.name, objective=ev.objective, bound=bound, version=VERSION, message=msg,
                           options=opts, wall_time=time.perf_counter() - t0,
                           inputs=(("checkpoint", str(ck_path.resolve())),))
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

"""Evaluate policies on held-out tasks, compare them with statistics, promote a checkpoint."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from prefect import task
from pydantic import BaseModel

from knowlyr.store import Manifest, Store
from knowlyr.train.evaluation import EvalResult
from knowlyr.train.promotion import (
    champion_json,
    compare_and_record,
    decide_promotion,
    evaluate_checkpoint,
    record_promotion,
)
from tasks._artifacts import publish_table, republish_cached
from tasks._cache import STAGE_CACHE
from tasks.collect import TaskSample
from tasks.train import Checkpoint, checkpoint_path

__all__ = [
    "ComparisonSummary",
    "Decision",
    "EvalSummary",
    "compare_policies",
    "current_champion",
    "evaluate_policy",
    "merge_summaries",
    "promote_checkpoint",
]


class EvalSummary(BaseModel):
    """Per-episode results of one policy on the held-out tasks (small: numbers only)."""

    policy: str
    checkpoint: str | None
    env_id: str
    task_ids: list[str]
    successes: list[bool]
    rewards: list[float]
    steps: list[int]

    @property
    def success_rate(self) -> float:
        return sum(self.successes) / len(self.successes) if self.successes else 0.0


class ComparisonSummary(BaseModel):
    """The candidate against the baseline (and the leaderboard of every evaluated policy)."""

    candidate: str
    baseline: str
    leaderboard: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    alpha: float
    evaluations: Manifest | None = None

    def of(self, policy: str) -> dict[str, Any]:
        """The comparison row of ``policy`` against the baseline."""
        return next(c for c in self.comparisons if c["agent"] == policy)

    def success(self, policy: str) -> float:
        """Held-out success rate of ``policy``."""
        return float(next(r for r in self.leaderboard if r["agent"] == policy)["success_rate"])


class Decision(BaseModel):
    """Whether the candidate checkpoint was promoted, and why (recorded in the store)."""

    promoted: bool
    reason: str
    candidate: Checkpoint
    baseline: str
    success_before: float
    success_after: float
    p_value: float
    promotions: Manifest


def merge_summaries(policy: str, parts: list[EvalSummary]) -> EvalSummary:
    """One policy's evaluations on several task sources as one (episodes in order; the env
    ids joined with ``+``)."""
    return EvalSummary(
        policy=policy,
        checkpoint=parts[0].checkpoint if parts else None,
        env_id="+".join(dict.fromkeys(e.env_id for e in parts)),
        task_ids=[t for e in parts for t in e.task_ids],
        successes=[x for e in parts for x in e.successes],
        rewards=[x for e in parts for x in e.rewards],
        steps=[x for e in parts for x in e.steps],
    )


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="evaluate-{policy}-{env_id}-{heldout.split}-{n_episodes}ep",
)
def evaluate_policy(
    policy: str,
    checkpoint: Checkpoint,
    heldout: TaskSample,
    env_id: str,
    n_episodes: int,
    seed: int,
    max_steps: int = 3,
    max_new_tokens: int = 96,
    temperature: float = 0.0,
) -> EvalSummary:
    """Run a checkpoint on the held-out tasks (greedily, or sampled at ``temperature``) and
    keep success / reward per episode."""
    res = evaluate_checkpoint(
        checkpoint_path(checkpoint),
        env_id,
        heldout.task_ids,
        n_episodes,
        name=policy,
        max_steps=max_steps,
        seed=seed,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
    )
    return EvalSummary(
        policy=policy,
        checkpoint=checkpoint.blob,
        env_id=env_id,
        task_ids=res.task_ids,
        successes=res.successes,
        rewards=res.rewards,
        steps=res.steps,
    )


def evaluation_rows(leaderboard: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leaderboard as the UI's table: one narrow row per policy, rates as percentages."""
    return [
        {
            "rank": r["rank"],
            "policy": r["agent"],
            "episodes": r["episodes"],
            "success": f"{r['success_rate']:.1%}",
            "95% CI": f"{r['success_ci_low']:.1%} – {r['success_ci_high']:.1%}",
            "mean reward": round(r["mean_reward"], 3),
            "p vs baseline": ""
            if r.get("vs_baseline_p_adj") is None
            else f"{r['vs_baseline_p_adj']:.2g}",
            "significant": ""
            if r.get("significant") is None
            else ("yes" if r["significant"] else "no"),
        }
        for r in leaderboard
    ]


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="compare-{candidate}-vs-{baseline}",
    on_completion=[republish_cached],
)
def compare_policies(
    store_url: str, evals: list[EvalSummary], candidate: str, baseline: str, alpha: float = 0.01
) -> ComparisonSummary:
    """Compare every policy with the baseline (Fisher, Welch, Mann-Whitney, bootstrap, Bonferroni)."""
    eval_id = hashlib.sha256(
        orjson.dumps([e.model_dump() for e in evals], option=orjson.OPT_SORT_KEYS)
    ).hexdigest()[:16]
    results = [
        EvalResult(
            agent=e.policy,
            env_id=e.env_id,
            task_ids=e.task_ids,
            successes=e.successes,
            rewards=e.rewards,
            steps=e.steps,
            checkpoint=e.checkpoint,
        )
        for e in evals
    ]
    rec = compare_and_record(
        Store.open(store_url), results, baseline=baseline, eval_id=eval_id, alpha=alpha
    )
    publish_table(
        "evaluation",
        evaluation_rows(rec.leaderboard),
        f"Held-out evaluation: {candidate} vs {baseline} (p: Fisher, Bonferroni-adjusted)",
    )
    return ComparisonSummary(
        candidate=candidate,
        baseline=baseline,
        leaderboard=rec.leaderboard,
        comparisons=rec.comparisons,
        alpha=alpha,
        evaluations=rec.evaluations,
    )


def current_champion(store_url: str, *, excluding: str | None = None) -> Checkpoint | None:
    """The newest promoted checkpoint in the store's ``promotions`` table (not ``excluding``)."""
    found = champion_json(Store.open(store_url), excluding=excluding)
    return None if found is None else Checkpoint.model_validate_json(found)


@task(cache_policy=STAGE_CACHE, task_run_name="promote-{candidate.name}-if-better")
def promote_checkpoint(
    store_url: str,
    candidate: Checkpoint,
    comparison: ComparisonSummary,
    min_improvement: float = 0.0,
    first_champion: bool = False,
) -> Decision:
    """Promote the candidate only on a significant improvement (the ``first_champion``, the
    warm-up policy against the untrained model, too); record the decision."""
    evaluations = comparison.evaluations
    d = record_promotion(
        Store.open(store_url),
        decide_promotion(
            comparison.of(comparison.candidate),
            alpha=comparison.alpha,
            min_improvement=min_improvement,
            first_champion=first_champion,
        ),
        checkpoint=candidate.blob,
        checkpoint_json=candidate.model_dump_json(),
        baseline=comparison.baseline,
        dataset=candidate.dataset,
        evaluations_version=evaluations.version if evaluations else None,
        min_improvement=min_improvement,
    )
    return Decision(
        promoted=d.promoted,
        reason=d.reason,
        candidate=candidate,
        baseline=comparison.baseline,
        success_before=d.success_before,
        success_after=d.success_after,
        p_value=d.p_value,
        promotions=d.promotions,
    )

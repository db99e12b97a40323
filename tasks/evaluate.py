"""Evaluate policies on held-out tasks, compare them with statistics, promote a checkpoint."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from typing import Any

import orjson
from prefect import task
from pydantic import BaseModel

from knowlyr.store import Manifest, Store
from tasks._artifacts import publish_table
from tasks._cache import STAGE_CACHE
from tasks.collect import TaskSample
from tasks.train import MODEL_LOAD_LOCK, Checkpoint, checkpoint_path

__all__ = [
    "ComparisonSummary",
    "Decision",
    "EvalSummary",
    "compare_policies",
    "current_champion",
    "evaluate_policy",
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
    max_new_tokens: int = 48,
) -> EvalSummary:
    """Run a checkpoint greedily on the held-out tasks and keep success / reward per episode."""
    from knowlyr.agents.inference import AgentInference
    from knowlyr.train.evaluation import evaluate_agent

    with MODEL_LOAD_LOCK:
        bridge = AgentInference.from_pretrained(
            checkpoint_path(checkpoint), max_new_tokens=max_new_tokens
        )
    res = evaluate_agent(
        env_id,
        bridge.create_agent(name=policy),
        heldout.task_ids,
        n_episodes,
        max_steps=max_steps,
        seed=seed,
        name=policy,
        keep_trajectories=False,
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


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, tuple):
            v = [None if isinstance(x, float) and not math.isfinite(x) else x for x in v]
        out[k] = v
    return out


@task(cache_policy=STAGE_CACHE, task_run_name="compare-{candidate}-vs-{baseline}")
def compare_policies(
    store_url: str, evals: list[EvalSummary], candidate: str, baseline: str, alpha: float = 0.01
) -> ComparisonSummary:
    """Compare every policy with the baseline (Fisher, Welch, Mann-Whitney, bootstrap, Bonferroni)."""
    from knowlyr.train.evaluation import EvalResult, compare_agents

    results = [
        EvalResult(
            agent=e.policy,
            env_id=e.env_id,
            task_ids=e.task_ids,
            successes=e.successes,
            rewards=e.rewards,
            steps=e.steps,
        )
        for e in evals
    ]
    report = compare_agents(results, baseline=baseline, alpha=alpha)
    eval_id = hashlib.sha256(
        orjson.dumps([e.model_dump() for e in evals], option=orjson.OPT_SORT_KEYS)
    ).hexdigest()[:16]
    now = datetime.now(UTC)
    rows = [
        {"eval_id": eval_id, "task_id": tid, "agent": e.policy, "seed": i,
         "checkpoint": e.checkpoint, "success": ok, "score": r, "n_steps": n,
         "metrics": orjson.dumps({"baseline": baseline, "env_id": e.env_id}).decode(),
         "created_at": now}
        for e in evals
        for i, (tid, ok, r, n) in enumerate(zip(e.task_ids, e.successes, e.rewards, e.steps, strict=True))
    ]  # fmt: skip
    manifest = Store.open(store_url).append("evaluations", rows)
    board = [_clean(r) for r in report.leaderboard]
    publish_table("evaluation", board, f"Held-out evaluation: {candidate} vs {baseline}")
    return ComparisonSummary(
        candidate=candidate,
        baseline=baseline,
        leaderboard=board,
        comparisons=[_clean(c.to_dict()) for c in report.comparisons],
        alpha=alpha,
        evaluations=manifest,
    )


def current_champion(store_url: str, *, excluding: str | None = None) -> Checkpoint | None:
    """The newest promoted checkpoint in the store's ``promotions`` table (not ``excluding``)."""
    import polars as pl

    store = Store.open(store_url)
    if store.version("promotions") is None:
        return None
    rows = store.read("promotions", filter=pl.col("promoted"))
    if excluding:
        rows = rows.filter(pl.col("checkpoint") != excluding)
    if rows.height == 0:
        return None
    best = rows.sort("created_at").row(-1, named=True)
    return Checkpoint.model_validate_json(best["checkpoint_json"])


@task(cache_policy=STAGE_CACHE, task_run_name="promote-{candidate.name}-if-better")
def promote_checkpoint(
    store_url: str,
    candidate: Checkpoint,
    comparison: ComparisonSummary,
    min_improvement: float = 0.0,
) -> Decision:
    """Promote the candidate only on a significant improvement; record the decision."""
    c = comparison.of(comparison.candidate)
    diff, p = float(c["success_diff"]), c["fisher_p_adj"]
    p = 1.0 if p is None else float(p)
    promoted = bool(c["significant"]) and diff > min_improvement
    if promoted:
        reason = f"success {c['baseline_success_rate']:.1%} -> {c['success_rate']:.1%}, p={p:.2g} < {comparison.alpha}"
    elif diff <= min_improvement:
        reason = f"no improvement: success diff {diff:+.1%} <= {min_improvement:.1%}"
    else:
        reason = f"not significant: p={p:.2g} >= {comparison.alpha} (diff {diff:+.1%})"
    store = Store.open(store_url)
    row = {
        "promotion_id": f"{candidate.blob[:16]}-{comparison.evaluations.version if comparison.evaluations else 0}",
        "checkpoint": candidate.blob,
        "checkpoint_json": candidate.model_dump_json(),
        "promoted": promoted,
        "reason": reason,
        "baseline": comparison.baseline,
        "success_before": float(c["baseline_success_rate"]),
        "success_after": float(c["success_rate"]),
        "p_value": p,
        "dataset": candidate.dataset,
        "created_at": datetime.now(UTC),
    }
    manifest = store.append("promotions", [row], key="promotion_id")
    store.record_run(
        "promote",
        inputs={
            "checkpoint": candidate.blob,
            **({"evaluations": comparison.evaluations.version} if comparison.evaluations else {}),
        },
        outputs={"promotions": manifest.version},
        params={"promoted": promoted, "reason": reason, "min_improvement": min_improvement},
    )
    return Decision(
        promoted=promoted,
        reason=reason,
        candidate=candidate,
        baseline=comparison.baseline,
        success_before=row["success_before"],
        success_after=row["success_after"],
        p_value=p,
        promotions=manifest,
    )

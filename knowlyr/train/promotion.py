"""Held-out evaluation of checkpoints, statistical comparison, and promotion in the store.

- :func:`evaluate_checkpoint`: a local checkpoint run greedily on held-out tasks;
- :func:`compare_and_record`: compare every policy with a baseline and append the episodes
  to the store's ``evaluations`` table;
- :func:`decide_promotion` / :func:`record_promotion`: promote a candidate only on a
  significant improvement, and record the decision in ``promotions`` and the lineage;
- :func:`champion_json`: the newest promoted checkpoint.

Usable without any orchestrator: the Prefect evaluate tasks are thin wrappers around these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from knowlyr.train.evaluation import ComparisonReport, EvalResult

if TYPE_CHECKING:
    from knowlyr.store import Manifest, Store

__all__ = [
    "PromotionDecision",
    "RecordedComparison",
    "champion_json",
    "compare_and_record",
    "decide_promotion",
    "evaluate_checkpoint",
    "json_safe",
    "record_promotion",
]


def evaluate_checkpoint(
    path: str,
    env_id: str,
    task_ids: Sequence[str],
    n_episodes: int,
    *,
    name: str,
    max_steps: int = 3,
    seed: int = 0,
    max_new_tokens: int = 48,
    temperature: float = 0.0,
    concurrency: int = 32,
) -> EvalResult:
    """Run the checkpoint folder ``path`` on ``task_ids`` (no trajectories kept): greedily, or
    sampled at ``temperature`` with turn seeds derived from ``seed`` (reproducible).
    ``concurrency`` episodes run at once, their turns decoded as one batch.

    Example:
        >>> res = evaluate_checkpoint("runs/sft/final", "knowlyr/conversation", ids, 8,
        ...                           name="sft")  # doctest: +SKIP
        >>> res.success_rate  # doctest: +SKIP
    """
    from knowlyr.agents.inference import AgentInference
    from knowlyr.train.evaluation import evaluate_agent

    bridge = AgentInference.from_pretrained(
        path, max_new_tokens=max_new_tokens, temperature=temperature, max_batch=concurrency
    )
    try:
        return evaluate_agent(
            env_id,
            lambda: bridge.create_agent(name=name, seed=seed),
            list(task_ids),
            n_episodes,
            max_steps=max_steps,
            seed=seed,
            name=name,
            keep_trajectories=False,
            concurrency=min(concurrency, n_episodes),
        )
    finally:
        bridge.close()


def json_safe(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with non-finite floats (also inside tuples, which become lists) as None.

    Example:
        >>> json_safe({"p": float("nan"), "ci": (0.1, float("inf"))})
        {'p': None, 'ci': [0.1, None]}
    """
    out = {}
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, tuple):
            v = [None if isinstance(x, float) and not math.isfinite(x) else x for x in v]
        out[k] = v
    return out


@dataclass
class RecordedComparison:
    """What :func:`compare_and_record` computed and wrote.

    Attributes:
        report: the full comparison report.
        leaderboard: its leaderboard rows, JSON-safe.
        comparisons: each policy against the baseline, JSON-safe.
        evaluations: the ``evaluations`` table version holding the episodes.
    """

    report: ComparisonReport
    leaderboard: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    evaluations: Manifest


def compare_and_record(
    store: Store,
    results: Sequence[EvalResult],
    *,
    baseline: str,
    eval_id: str,
    alpha: float = 0.01,
) -> RecordedComparison:
    """Compare every policy with ``baseline`` and append all episodes to ``evaluations``.

    Statistics as :func:`knowlyr.train.evaluation.compare_agents` (Fisher, Welch,
    Mann-Whitney, bootstrap, Bonferroni). One row per episode: ``seed`` is the episode's
    index, ``checkpoint`` each result's checkpoint, ``metrics`` the baseline and env id.

    Example:
        >>> rec = compare_and_record(store, [sft, base], baseline="base", eval_id="e1")  # doctest: +SKIP
        >>> rec.comparisons[0]["fisher_p_adj"]  # doctest: +SKIP
    """
    import orjson

    from knowlyr.train.evaluation import compare_agents

    report = compare_agents(list(results), baseline=baseline, alpha=alpha)
    now = datetime.now(UTC)
    rows = [
        {"eval_id": eval_id, "task_id": tid, "agent": e.agent, "seed": i,
         "checkpoint": e.checkpoint, "success": ok, "score": r, "n_steps": n,
         "metrics": orjson.dumps({"baseline": baseline, "env_id": e.env_id}).decode(),
         "created_at": now}
        for e in results
        for i, (tid, ok, r, n) in enumerate(zip(e.task_ids, e.successes, e.rewards, e.steps, strict=True))
    ]  # fmt: skip
    manifest = store.append("evaluations", rows)
    return RecordedComparison(
        report=report,
        leaderboard=[json_safe(r) for r in report.leaderboard],
        comparisons=[json_safe(c.to_dict()) for c in report.comparisons],
        evaluations=manifest,
    )


@dataclass
class PromotionDecision:
    """Whether a candidate is promoted and why.

    Attributes:
        promoted: significant and better than ``min_improvement``.
        reason: one human line.
        success_before: the baseline's success rate.
        success_after: the candidate's success rate.
        p_value: the adjusted p-value of the success test (McNemar's on paired outcomes, else
            Fisher's; 1.0 when there is none).
        promotions: the ``promotions`` version the decision was written to (after
            :func:`record_promotion`).
    """

    promoted: bool
    reason: str
    success_before: float
    success_after: float
    p_value: float
    promotions: Manifest | None = None


def success_p(comparison: dict[str, Any]) -> float | None:
    """The adjusted p-value of the success test a comparison decided with (McNemar's when
    paired, Fisher's otherwise; Fisher's for comparisons recorded before the paired test)."""
    p = comparison.get("success_p_adj")
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return comparison.get("fisher_p_adj")
    return p


def success_test_name(comparison: dict[str, Any]) -> str:
    """``"McNemar p"`` (paired outcomes) or ``"Fisher p"``: how the success p-value was got."""
    return "McNemar p" if comparison.get("success_test") == "mcnemar" else "Fisher p"


def decide_promotion(
    comparison: dict[str, Any],
    *,
    alpha: float,
    min_improvement: float = 0.0,
    first_champion: bool = False,
) -> PromotionDecision:
    """Promote only on a significant improvement of the success rate over ``min_improvement``.

    The ``first_champion`` (the warm-up policy, compared with the untrained model) is held to
    the same test: a warm-up that is right barely more often than nothing would give the
    loop's later nights almost no successes to learn from, so it is not promoted and the next
    night warms up again. The flag only words the reason.

    Args:
        comparison: the candidate's row of :attr:`RecordedComparison.comparisons`
            (``success_diff``, ``success_p_adj`` or ``fisher_p_adj``, ``significant``,
            ``success_rate``, ``baseline_success_rate``).
        alpha: the significance level the comparison used (for the reason).
        min_improvement: the success-rate difference to beat.

    Example:
        >>> decide_promotion({"success_diff": 0.4, "fisher_p_adj": 0.001, "significant": True,
        ...                   "success_rate": 0.9, "baseline_success_rate": 0.5}, alpha=0.01).reason
        'success 50.0% -> 90.0%, p=0.001 < 0.01'
    """
    c = comparison
    diff, p = float(c["success_diff"]), success_p(c)
    p = 1.0 if p is None else float(p)
    test = "McNemar p" if c.get("success_test") == "mcnemar" else "p"
    promoted = bool(c["significant"]) and diff > min_improvement
    if promoted and first_champion:
        reason = (
            f"first champion (warm-up): success {c['baseline_success_rate']:.1%} -> "
            f"{c['success_rate']:.1%}, {test}={p:.2g} < {alpha}"
        )
    elif promoted:
        reason = (
            f"success {c['baseline_success_rate']:.1%} -> {c['success_rate']:.1%}, "
            f"{test}={p:.2g} < {alpha}"
        )
    elif diff <= min_improvement:
        reason = f"no improvement: success diff {diff:+.1%} <= {min_improvement:.1%}"
    else:
        reason = f"not significant: {test}={p:.2g} >= {alpha} (diff {diff:+.1%})"
    if first_champion and not promoted:
        reason = f"warm-up not promoted (the untrained model is the baseline): {reason}"
    return PromotionDecision(
        promoted=promoted,
        reason=reason,
        success_before=float(c["baseline_success_rate"]),
        success_after=float(c["success_rate"]),
        p_value=p,
    )


def record_promotion(
    store: Store,
    decision: PromotionDecision,
    *,
    checkpoint: str,
    checkpoint_json: str,
    baseline: str,
    dataset: str | None = None,
    evaluations_version: int | None = None,
    min_improvement: float = 0.0,
) -> PromotionDecision:
    """Append ``decision`` to ``promotions`` and record a ``promote`` run; returns it with
    :attr:`PromotionDecision.promotions` set.

    Args:
        store: the store.
        decision: from :func:`decide_promotion`.
        checkpoint: the candidate's archive digest.
        checkpoint_json: the candidate's description, given back by :func:`champion_json`.
        baseline: the baseline's name.
        dataset: the dataset the candidate was trained on.
        evaluations_version: the ``evaluations`` version the decision rests on.
        min_improvement: recorded with the run.
    """
    row = {
        "promotion_id": f"{checkpoint[:16]}-{evaluations_version or 0}",
        "checkpoint": checkpoint,
        "checkpoint_json": checkpoint_json,
        "promoted": decision.promoted,
        "reason": decision.reason,
        "baseline": baseline,
        "success_before": decision.success_before,
        "success_after": decision.success_after,
        "p_value": decision.p_value,
        "dataset": dataset,
        "created_at": datetime.now(UTC),
    }
    manifest = store.append("promotions", [row], key="promotion_id")
    store.record_run(
        "promote",
        inputs={
            "checkpoint": checkpoint,
            **({"evaluations": evaluations_version} if evaluations_version is not None else {}),
        },
        outputs={"promotions": manifest.version},
        params={
            "promoted": decision.promoted,
            "reason": decision.reason,
            "min_improvement": min_improvement,
        },
    )
    decision.promotions = manifest
    return decision


def champion_json(store: Store, *, excluding: str | None = None) -> str | None:
    """The ``checkpoint_json`` of the newest promoted checkpoint (not ``excluding``), or None.

    Example:
        >>> champion_json(Store.open("./store"))  # doctest: +SKIP
    """
    import polars as pl

    if store.version("promotions") is None:
        return None
    rows = store.read("promotions", filter=pl.col("promoted"))
    if excluding:
        rows = rows.filter(pl.col("checkpoint") != excluding)
    if rows.height == 0:
        return None
    return rows.sort("created_at").row(-1, named=True)["checkpoint_json"]

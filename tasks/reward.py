"""Reward: score the store's unscored trajectories with the reward engine; preference pairs."""

from __future__ import annotations

from typing import Any

from prefect import task
from pydantic import BaseModel, Field

from knowlyr.store import Manifest, Store, TableRef
from tasks._artifacts import publish_table, reward_stats
from tasks._cache import STAGE_CACHE

__all__ = ["RewardParams", "RewardSummary", "build_preference_pairs", "score_trajectories"]


class RewardParams(BaseModel):
    """How trajectories are scored (see :class:`knowlyr.reward.RewardEngine`)."""

    profile: str | None = Field(
        None, description="DomainProfile (default: each trajectory's domain)"
    )
    layers: list[str] = Field(["rules"], description="'rules' and/or 'judge'")
    judge: str | None = Field(None, description="judge spec, e.g. 'anthropic:MODEL' (judge layer)")
    outcome_weight: float = Field(0.5, ge=0, le=1, description="weight of success in the total")
    shards: int = Field(1, gt=0, description="scoring tasks fanned out (judge calls)")


class RewardSummary(BaseModel):
    """What one scoring task wrote: the rewards version and statistics of the new totals."""

    rewards: Manifest | None
    trajectories: TableRef
    scored: int
    config_hashes: list[str]
    stats: dict[str, Any]
    totals: list[float] = Field(default_factory=list, description="new totals (for plots)")


def _engine(domain: str, params: RewardParams) -> Any:
    from knowlyr.core.profile import get_profile
    from knowlyr.reward.engine import RewardEngine

    try:
        profile = get_profile(params.profile or domain or "generic")
    except (KeyError, ValueError):  # a domain with no profile of its own
        profile = get_profile("generic")
    return RewardEngine(
        profile, params.layers, judge=params.judge, outcome_weight=params.outcome_weight
    )


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="reward-{trajectories.table}@{trajectories.version}-s{shard}",
    retries=2,
    retry_delay_seconds=10,
)
def score_trajectories(
    trajectories: TableRef, params: RewardParams, shard: int = 0, n_shards: int = 1
) -> RewardSummary:
    """Score the trajectories at this version that have no reward under the config yet."""
    import polars as pl

    store = Store.open(trajectories.store)
    frame = store.read("trajectories", version=trajectories.version, columns=["id", "domain"])
    if n_shards > 1:
        frame = frame.filter(pl.col("id").hash() % n_shards == shard)
    engines = {d: _engine(d, params) for d in frame["domain"].unique().to_list()}
    scored = store.read("rewards", columns=["trajectory_id", "config_hash"])
    done = set(zip(scored["trajectory_id"].to_list(), scored["config_hash"].to_list(), strict=True))
    rewards, manifest = [], None
    for domain, engine in engines.items():
        ids = frame.filter(pl.col("domain") == domain)["id"].to_list()
        todo = [i for i in ids if (i, engine.config_hash) not in done]
        if todo:
            batch = engine.score(store.read_trajectories(version=trajectories.version, ids=todo))
            manifest = engine.save(store, batch)
            rewards += batch
    totals = [r.total for r in rewards if r.total is not None]
    stats = reward_stats(totals)
    publish_table(
        "reward-stats",
        [{"trajectories": str(trajectories), "shard": shard, **stats}],
        "Rewards of the newly scored trajectories",
    )
    return RewardSummary(
        rewards=manifest,
        trajectories=trajectories,
        scored=len(rewards),
        config_hashes=sorted({e.config_hash for e in engines.values()}),
        stats=stats,
        totals=[round(t, 4) for t in totals],
    )


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="preferences-{trajectories.table}@{trajectories.version}",
)
def build_preference_pairs(
    trajectories: TableRef, rewards: list[RewardSummary], min_margin: float = 0.05
) -> Manifest | None:
    """Pair trajectories of the same task whose rewards differ by ``min_margin`` or more."""
    import polars as pl

    from knowlyr.reward.engine import TrajectoryReward
    from knowlyr.reward.preferences import build_preferences, preferences_frame

    store = Store.open(trajectories.store)
    hashes = sorted({h for r in rewards for h in r.config_hashes})
    ids = store.read("trajectories", version=trajectories.version, columns=["id"])
    rows = store.read("rewards", filter=pl.col("config_hash").is_in(hashes)).join(
        ids, left_on="trajectory_id", right_on="id", how="semi"
    )
    scored = [
        TrajectoryReward(
            trajectory_id=r["trajectory_id"],
            task_id=r["task_id"],
            agent=r["agent"] or "",
            model=r["model"],
            total=r["total"],
            total_raw=r["total_raw"],
            step_rewards=[],
            rubric_scores={},
            step_rubrics=[],
            config_hash=r["config_hash"],
            success=r["success"],
        )
        for r in rows.iter_rows(named=True)
    ]
    pairs = build_preferences(scored, min_margin=min_margin)
    return store.append("preferences", preferences_frame(pairs)) if pairs else None

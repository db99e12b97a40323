"""Reward: score the store's unscored trajectories with the reward engine; preference pairs."""

from __future__ import annotations

from typing import Any

from prefect import task
from pydantic import BaseModel, ConfigDict, Field

from knowlyr.reward.store_io import load_calibration, preferences_from_store, score_unscored
from knowlyr.store import Manifest, Store, TableRef
from knowlyr.view.links import highlights_markdown
from tasks._artifacts import in_run, publish_markdown, publish_table, republish_cached, reward_stats
from tasks._cache import STAGE_CACHE

__all__ = ["RewardParams", "RewardSummary", "build_preference_pairs", "score_trajectories"]


class RewardParams(BaseModel):
    """How trajectories are scored (see :class:`knowlyr.reward.RewardEngine`)."""

    model_config = ConfigDict(extra="forbid")

    profile: str | None = Field(
        None, description="DomainProfile (default: each trajectory's domain)"
    )
    layers: list[str] = Field(["rules"], description="'rules' and/or 'judge'")
    judge: str | None = Field(None, description="judge spec, e.g. 'anthropic:MODEL' (judge layer)")
    outcome_weight: float | None = Field(
        None, ge=0, le=1, description="weight of success in the total (None: the profile's)"
    )
    shards: int = Field(1, gt=0, description="scoring tasks fanned out (judge calls)")
    calibration: str | None = Field(
        None,
        description="id of a calibration stored in the trajectories' store (`knowlyr reward "
        "calibrate --outcomes ... --store`): P(success | facets) goes into the totals",
    )


class RewardSummary(BaseModel):
    """What one scoring task wrote: the rewards version and statistics of the new totals."""

    rewards: Manifest | None
    trajectories: TableRef
    scored: int
    config_hashes: list[str]
    stats: dict[str, Any]
    totals: list[float] = Field(default_factory=list, description="new totals (for plots)")


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="reward-{trajectories.table}@{trajectories.version}-s{shard}",
    on_completion=[republish_cached],
    retries=2,
    retry_delay_seconds=10,
)
def score_trajectories(
    trajectories: TableRef, params: RewardParams, shard: int = 0, n_shards: int = 1
) -> RewardSummary:
    """Score the trajectories at this version that have no reward under the config yet."""
    store = Store.open(trajectories.store)
    res = score_unscored(
        store,
        trajectories_version=trajectories.version,
        **params.model_dump(exclude={"shards", "calibration"}),
        calibration=load_calibration(params.calibration, store=store)
        if params.calibration
        else None,
        shard=shard,
        n_shards=n_shards,
    )
    stats = reward_stats(res.totals)
    publish_table(
        "reward-stats",
        [{"trajectories": str(trajectories), "shard": shard, **stats}],
        "Rewards of the newly scored trajectories",
    )
    if res.rewards and in_run():
        publish_markdown(
            "reward-trajectories",
            highlights_markdown(store, [r.trajectory_id for r in res.rewards]),
            "Viewer pages of the best, worst and most-changed newly scored trajectories",
        )
    return RewardSummary(
        rewards=res.manifest,
        trajectories=trajectories,
        scored=len(res.rewards),
        config_hashes=res.config_hashes,
        stats=stats,
        totals=[round(t, 4) for t in res.totals],
    )


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="preferences-{trajectories.table}@{trajectories.version}",
)
def build_preference_pairs(
    trajectories: TableRef, rewards: list[RewardSummary], min_margin: float = 0.05
) -> Manifest | None:
    """Pair trajectories of the same task whose rewards differ by ``min_margin`` or more."""
    return preferences_from_store(
        Store.open(trajectories.store),
        trajectories_version=trajectories.version,
        reward_config_hashes=[h for r in rewards for h in r.config_hashes],
        min_margin=min_margin,
    )

"""``reward``: score the store's unscored trajectories (rules, judge), optionally build pairs."""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows._common import resolve_store, run_namer, task_runner
from knowlyr.errors import NotFoundError
from knowlyr.store import Manifest, Store, TableRef
from tasks.reward import RewardParams, RewardSummary, build_preference_pairs, score_trajectories

__all__ = ["RewardFlowParams", "RewardReport", "reward", "run_reward"]


class RewardFlowParams(BaseModel):
    """Parameters of :func:`reward`."""

    model_config = ConfigDict(extra="forbid")

    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")
    version: int | None = Field(None, description="trajectories version (default: latest)")
    reward: RewardParams = Field(default_factory=RewardParams)
    preferences: bool = Field(False, description="also build preference pairs")
    min_margin: float = Field(0.05, ge=0, description="preference pair reward margin")


class RewardReport(BaseModel):
    rewards: list[RewardSummary]
    preferences: Manifest | None = None


def latest_ref(store_url: str, version: int | None = None) -> TableRef:
    """The ``trajectories`` table at ``version`` (latest by default) as a task input."""
    store = Store.open(store_url)
    v = store.version("trajectories") if version is None else version
    if v is None:
        raise NotFoundError(f"the store {store_url} has no trajectories yet: run ingest or collect")
    return TableRef(
        store=store.url,
        table="trajectories",
        version=v,
        rows=store.count("trajectories", version=v),
    )


def run_reward(trajectories: TableRef, p: RewardParams) -> list[RewardSummary]:
    """Score in ``p.shards`` tasks fanned out through the task runner (judge calls)."""
    futures = [
        score_trajectories.submit(trajectories, p, shard=i, n_shards=p.shards)
        for i in range(p.shards)
    ]
    return [f.result() for f in futures]


def _describe(p) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    v = get("version")
    return f"trajectories@{'latest' if v is None else v}"


@flow(name="reward", flow_run_name=run_namer("reward", _describe), task_runner=task_runner())
def reward(params: RewardFlowParams = RewardFlowParams()) -> RewardReport:
    """Score unscored trajectories of a store version and optionally build preference pairs."""
    ref = latest_ref(resolve_store(params.store_url), params.version)
    summaries = run_reward(ref, params.reward)
    pairs = (
        build_preference_pairs(ref, summaries, params.min_margin) if params.preferences else None
    )
    get_run_logger().info(f"scored {sum(s.scored for s in summaries)} trajectories of {ref}")
    return RewardReport(rewards=summaries, preferences=pairs)

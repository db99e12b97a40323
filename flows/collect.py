"""``collect``: sample tasks -> rollout in the env (fanned out) -> record -> dedup -> reward."""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from flows._common import resolve_store, run_namer
from knowlyr.store import Manifest
from tasks.collect import TaskSample, collect_episodes, dedup_trajectories, sample_tasks

__all__ = ["CollectParams", "CollectReport", "collect", "run_collect"]


class CollectParams(BaseModel):
    """Parameters of :func:`collect`."""

    env_id: str = Field("knowlyr/conversation", description="registered environment id")
    suite: str = Field("conversation", description="task suite the episodes are drawn from")
    family: str | None = Field("order_status", description="task family (None: all families)")
    split: Literal["train", "heldout"] | None = Field("train", description="task split")
    agent: str = Field(
        "expert",
        description="expert | noisy[:p] | random | checkpoint:<path> | openai:<model>[@<base_url>]"
        " | anthropic:<model> (see knowlyr.agents.spec.agent_factory)",
    )
    episodes: int = Field(64, gt=0, description="episodes to run (one per sampled task)")
    shards: int = Field(2, gt=0, description="rollout tasks fanned out through the task runner")
    seed: int = Field(0, description="task sampling and episode seed")
    max_steps: int | None = Field(None, gt=0, description="step limit (default: the env's)")
    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")


class CollectReport(BaseModel):
    """What a collect did: the task sample, episodes and the trajectories version."""

    store_url: str
    sample: TaskSample
    episodes: int
    successes: int
    trajectories: Manifest


def run_collect(p: CollectParams, store_url: str) -> CollectReport:
    """The collect stages, submitted from the calling flow (``collect`` or ``iterate``)."""
    sample = sample_tasks(p.suite, p.episodes, p.seed, split=p.split, family=p.family)
    ids = sample.task_ids
    size = -(-len(ids) // p.shards)
    shards = [ids[i : i + size] for i in range(0, len(ids), size)]
    futures = [
        collect_episodes.submit(
            store_url,
            p.env_id,
            p.agent,
            chunk,
            len(chunk),
            p.seed + i * size,
            shard=i,
            max_steps=p.max_steps,
        )
        for i, chunk in enumerate(shards)
    ]
    manifest = dedup_trajectories(store_url, futures, stage="collect", n_shards=len(futures))
    staged = [f.result() for f in futures]
    return CollectReport(
        store_url=store_url,
        sample=sample,
        episodes=sum(s.episodes for s in staged),
        successes=sum(s.successes for s in staged),
        trajectories=manifest,
    )


def _describe(p) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    return f"{get('env_id', 'knowlyr/conversation')}-{get('episodes', 64)}ep"


@flow(name="collect", flow_run_name=run_namer("collect", _describe))
def collect(params: CollectParams = CollectParams()) -> CollectReport:
    """Run an agent in an environment and add the episodes to the store."""
    store_url = resolve_store(params.store_url)
    report = run_collect(params, store_url)
    get_run_logger().info(
        f"collected {report.episodes} episodes ({report.successes} successful) of "
        f"{params.agent} in {params.env_id}: {report.trajectories.new} new -> "
        f"trajectories@{report.trajectories.version}"
    )
    return report

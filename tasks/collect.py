"""Collect: sample tasks, run episodes in an environment, dedup them into the store."""

from __future__ import annotations

from typing import Any

from prefect import task
from pydantic import BaseModel

from knowlyr.agents.spec import agent_factory
from knowlyr.store import Manifest, Store
from knowlyr.store.staging import StagedBlob, add_staged, stage_trajectories
from tasks._artifacts import counts_table, publish_table, republish_cached
from tasks._cache import STAGE_CACHE

__all__ = [
    "Staged",
    "TaskSample",
    "agent_factory",
    "collect_episodes",
    "dedup_trajectories",
    "sample_tasks",
]


class TaskSample(BaseModel):
    """Task ids drawn from a suite with a seed (small: ids only)."""

    suite: str
    split: str | None
    family: str | None
    seed: int
    task_ids: list[str]


class Staged(BaseModel):
    """Episodes written to the store as one raw JSONL blob, not yet in the trajectories table."""

    store: str
    blob: str
    episodes: int
    successes: int
    env_id: str
    agent: str


@task(cache_policy=STAGE_CACHE, task_run_name="sample-{suite}-{split}-{n}")
def sample_tasks(
    suite: str, n: int, seed: int, split: str | None = None, family: str | None = None
) -> TaskSample:
    """Draw ``n`` task ids from a suite with a seeded RNG."""
    from knowlyr.taskset import sample

    tasks = sample(suite, n, seed=seed, split=split, family=family, replace=False)
    ids = [t.task_id for t in tasks]
    return TaskSample(suite=suite, split=split, family=family, seed=seed, task_ids=ids)


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="collect-{env_id}-{agent}-{n_episodes}ep-s{shard}",
    retries=1,
)
def collect_episodes(
    store_url: str,
    env_id: str,
    agent: str,
    task_ids: list[str],
    n_episodes: int,
    seed: int,
    shard: int = 0,
    max_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    temperature: float = 0.0,
    concurrency: int = 1,
) -> Staged:
    """Run ``n_episodes`` episodes of ``agent`` in ``env_id`` and stage them as a raw log blob
    (a checkpoint agent samples at ``temperature``, seeded by ``seed``; ``concurrency``
    episodes at once, a checkpoint's turns decoded as one batch)."""
    from knowlyr.rollout import collect

    factory = agent_factory(agent, seed=seed, temperature=temperature)
    try:
        trajs = collect(
            env_id,
            factory,
            n_episodes,
            tasks=task_ids or None,
            seed=seed,
            max_steps=max_steps,
            env_kwargs=with_store(env_id, store_url, env_kwargs),
            concurrency=max(1, min(concurrency, n_episodes)),
        )
    finally:
        getattr(factory, "close", lambda: None)()
    blob = stage_trajectories(Store.open(store_url), trajs)
    ok = sum(bool(t.outcome.success) for t in trajs)
    return Staged(
        store=store_url, blob=blob, episodes=len(trajs), successes=ok, env_id=env_id, agent=agent
    )


def with_store(env_id: str, store_url: str, env_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``env_kwargs`` plus ``store=store_url`` for an env that keeps blobs in a store (the
    browser's screenshots), so they land in the store the episodes go to."""
    import inspect

    from knowlyr.core.registry import spec
    from knowlyr.errors import UnknownEnvError

    kwargs = dict(env_kwargs or {})
    if "://" in env_id:  # an env server's URL: the server's envs have their own settings
        return kwargs
    try:
        takes_store = "store" in inspect.signature(spec(env_id).load()).parameters
    except (UnknownEnvError, TypeError, ValueError):  # no such env, or no signature
        return kwargs
    if takes_store:
        kwargs.setdefault("store", store_url)
    return kwargs


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="dedup-{stage}-{n_shards}-shards",
    on_completion=[republish_cached],
)
def dedup_trajectories(
    store_url: str, staged: list[Staged], stage: str = "collect", n_shards: int = 1
) -> Manifest:
    """Add staged episodes to the trajectories table; known content hashes are duplicates."""
    res = add_staged(
        Store.open(store_url),
        [StagedBlob(s.blob, f"{stage}:{s.env_id}:{s.agent}") for s in staged],
        stage=stage,
    )
    m = res.trajectories
    row = counts_table(
        stage,
        incoming=sum(s.episodes for s in staged),
        new=m.new,
        duplicates=m.duplicates,
        rejected=len(res.rejected),
        version=m.version,
        table="trajectories",
    )
    publish_table(f"{stage}-counts", [row], "Episodes in, new, duplicate and rejected")
    return m

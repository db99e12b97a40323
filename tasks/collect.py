"""Collect: sample tasks, run episodes in an environment, dedup them into the store."""

from __future__ import annotations

from typing import Any

import orjson
from prefect import task
from pydantic import BaseModel

from knowlyr.store import Manifest, Store
from tasks._artifacts import counts_table, publish_table
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


def agent_factory(agent: str, *, seed: int = 0) -> Any:
    """A zero-argument factory for the policy named by ``agent``.

    ``expert`` (the suite's scripted expert), ``noisy`` or ``noisy:<p>`` (an expert that
    fumbles a fraction ``p`` of its steps, default 0.3), ``random``, or
    ``checkpoint:<path>`` (a local Hugging Face checkpoint through the inference bridge).
    """
    from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent

    kind, _, arg = agent.partition(":")
    if kind == "expert":
        return ExpertAgent
    if kind == "noisy":
        noise = float(arg) if arg else 0.3
        return lambda: NoisyExpert(noise, seed=seed)
    if kind == "random":
        return lambda: RandomAgent(seed=seed)
    if kind == "checkpoint" and arg:
        from knowlyr.agents.inference import AgentInference

        return lambda: AgentInference.from_pretrained(arg, max_new_tokens=96).create_agent()
    raise ValueError(
        f"agent must be 'expert', 'noisy[:p]', 'random' or 'checkpoint:<path>', got {agent!r}"
    )


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
) -> Staged:
    """Run ``n_episodes`` episodes of ``agent`` in ``env_id`` and stage them as a raw log blob."""
    from knowlyr.rollout import collect

    trajs = collect(
        env_id,
        agent_factory(agent, seed=seed),
        n_episodes,
        tasks=task_ids or None,
        seed=seed,
        max_steps=max_steps,
        env_kwargs=env_kwargs,
    )
    raw = b"".join(orjson.dumps(t.model_dump(mode="json")) + b"\n" for t in trajs)
    blob = Store.open(store_url).put_blob(raw)
    ok = sum(bool(t.outcome.success) for t in trajs)
    return Staged(
        store=store_url, blob=blob, episodes=len(trajs), successes=ok, env_id=env_id, agent=agent
    )


@task(cache_policy=STAGE_CACHE, task_run_name="dedup-{stage}-{n_shards}-shards")
def dedup_trajectories(
    store_url: str, staged: list[Staged], stage: str = "collect", n_shards: int = 1
) -> Manifest:
    """Add staged episodes to the trajectories table; known content hashes are duplicates."""
    from knowlyr.trajectory import Trajectory

    store = Store.open(store_url)
    trajs: list[Trajectory] = []
    rejected: list[dict[str, Any]] = []
    for s in staged:
        for line_no, line in enumerate(store.get_blob(s.blob).splitlines(), 1):
            try:
                t = Trajectory.model_validate_json(line)
            except ValueError as e:  # a bad record is kept with its reason, the batch goes on
                reason = f"invalid trajectory: {str(e).splitlines()[0][:300]}"
                rejected.append(
                    {"raw_blob": store.put_blob(line), "reason": reason, "line": line_no}
                )
                continue
            t.source.blob, t.source.line = s.blob, line_no
            t.source.path = t.source.path or f"{stage}:{s.env_id}:{s.agent}"
            trajs.append(t)
    m = store.add_trajectories(trajs)
    if rejected:
        store.append("rejected", rejected)
    store.record_run(
        stage,
        outputs={"trajectories": m.version},
        params={"raw_blobs": [s.blob for s in staged], "episodes": len(trajs)},
    )
    row = counts_table(
        stage,
        incoming=sum(s.episodes for s in staged),
        new=m.new,
        duplicates=m.duplicates,
        rejected=len(rejected),
        version=m.version,
        table="trajectories",
    )
    publish_table(f"{stage}-counts", [row], "Episodes in, new, duplicate and rejected")
    return m

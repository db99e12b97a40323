"""``collect``: sample tasks -> rollout in the envs (fanned out) -> record -> dedup.

One collect draws from one task source (an env, its suite and optionally a family) or from a
mix of them (:attr:`CollectParams.mix`), with ``attempts`` episodes per task: a sampling policy
(``temperature`` > 0) tries each task several times, which is what rejection sampling and
preference pairs are built from.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows._common import resolve_store, run_namer, task_runner
from knowlyr.store import Manifest
from knowlyr.train.curriculum import split_by_weight
from tasks.collect import TaskSample, collect_episodes, dedup_trajectories, sample_tasks

__all__ = [
    "CollectParams",
    "CollectReport",
    "CollectSettings",
    "TaskSource",
    "collect",
    "run_collect",
]


class TaskSource(BaseModel):
    """Where tasks come from: an environment, its task suite and optionally one family."""

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field(..., description="registered environment id")
    suite: str = Field(..., description="task suite of that environment")
    family: str | None = Field(None, description="task family (None: all families)")
    weight: float = Field(
        1.0,
        gt=0,
        description="the source's share of a collection's tasks, relative to the others' "
        "(iterate's frontier curriculum sets it; evaluations split evenly)",
    )

    def __str__(self) -> str:
        return f"{self.suite}/{self.family}" if self.family else self.suite


class CollectSettings(BaseModel):
    """What to collect and how, without the seed and the store (``iterate`` sets those)."""

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field("knowlyr/conversation", description="registered environment id")
    suite: str = Field("conversation", description="task suite the episodes are drawn from")
    family: str | None = Field("order_status", description="task family (None: all families)")
    split: Literal["train", "heldout"] | None = Field("train", description="task split")
    mix: list[TaskSource] = Field(
        default_factory=list,
        description="several task sources, episodes split by their weights, evenly by default "
        "(non-empty: replaces env_id / suite / family)",
    )
    agent: str = Field(
        "expert",
        description="expert | noisy[:p] | random | checkpoint:<path> | openai:<model>[@<base_url>]"
        " | anthropic:<model> (see knowlyr.agents.spec.agent_factory) | champion (the store's "
        "last promoted checkpoint)",
    )
    episodes: int = Field(64, gt=0, description="episodes to run (attempts x sampled tasks)")
    attempts: int = Field(1, ge=1, description="episodes per sampled task (k attempts)")
    temperature: float = Field(
        0.0, ge=0, description="a checkpoint's sampling temperature (0: greedy)"
    )
    shards: int = Field(2, gt=0, description="rollout tasks fanned out through the task runner")
    concurrency: int = Field(
        16,
        gt=0,
        description="episodes in flight per rollout task (a checkpoint's turns are decoded as "
        "one batch; the same episodes at any value)",
    )
    max_steps: int | None = Field(None, gt=0, description="step limit (default: the env's)")

    def sources(self) -> list[TaskSource]:
        """The task sources: :attr:`mix`, or the one of ``env_id`` / ``suite`` / ``family``."""
        return self.mix or [TaskSource(env_id=self.env_id, suite=self.suite, family=self.family)]


class CollectParams(CollectSettings):
    """Parameters of :func:`collect`."""

    seed: int = Field(0, description="task sampling and episode seed")
    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")


class CollectReport(BaseModel):
    """What a collect did: the task sample, episodes and the trajectories version."""

    store_url: str
    samples: list[TaskSample]
    episodes: int
    successes: int
    trajectories: Manifest


def run_collect(p: CollectParams, store_url: str) -> CollectReport:
    """The collect stages, submitted from the calling flow (``collect`` or ``iterate``).

    ``p.episodes // p.attempts`` tasks are drawn, split over the task sources in proportion to
    their :attr:`TaskSource.weight` (evenly by default); each
    runs ``attempts`` times in a row (episode seeds differ, so a sampling policy's attempts
    differ). Each source's episodes are cut into ``p.shards`` rollout tasks.
    """
    agent = resolve_agent(p.agent, store_url)
    sources = p.sources()
    n_tasks = max(1, p.episodes // p.attempts)
    samples, futures = [], []
    for j, (src, n) in enumerate(
        zip(sources, split_by_weight(n_tasks, [s.weight for s in sources]), strict=True)
    ):
        if n == 0:
            continue
        sample = sample_tasks(src.suite, n, p.seed + j, split=p.split, family=src.family)
        samples.append(sample)
        ids = [tid for tid in sample.task_ids for _ in range(p.attempts)]
        size = -(-len(ids) // p.shards)
        for i in range(0, len(ids), size):
            futures.append(
                collect_episodes.submit(
                    store_url,
                    src.env_id,
                    agent,
                    ids[i : i + size],
                    len(ids[i : i + size]),
                    p.seed + 100_000 * j + i,
                    shard=len(futures),
                    max_steps=p.max_steps,
                    temperature=p.temperature,
                    concurrency=p.concurrency,
                )
            )
    manifest = dedup_trajectories(store_url, futures, stage="collect", n_shards=len(futures))
    staged = [f.result() for f in futures]
    return CollectReport(
        store_url=store_url,
        samples=samples,
        episodes=sum(s.episodes for s in staged),
        successes=sum(s.successes for s in staged),
        trajectories=manifest,
    )


def resolve_agent(agent: str, store_url: str) -> str:
    """``agent``, with ``champion`` replaced by ``checkpoint:<folder>`` of the store's last
    promoted checkpoint.

    Raises:
        ValueError: ``champion`` and nothing was promoted in the store yet.
    """
    if agent != "champion":
        return agent
    from tasks.evaluate import current_champion
    from tasks.train import checkpoint_path

    champ = current_champion(store_url)
    if champ is None:
        raise ValueError(
            f"agent 'champion': no checkpoint was promoted in {store_url} yet; run iterate "
            "(its first night trains the warm-up policy) or pass checkpoint:<folder>"
        )
    return f"checkpoint:{checkpoint_path(champ)}"


def _describe(p) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    where = "mix" if get("mix") else get("env_id", "knowlyr/conversation")
    return f"{where}-{get('episodes', 64)}ep"


@flow(name="collect", flow_run_name=run_namer("collect", _describe), task_runner=task_runner())
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

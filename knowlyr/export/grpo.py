"""GRPO export: trajectories grouped per task, with rewards, advantages and step advantages.

One row per task: the ``prompt`` (system and user turns, what a policy is asked), the
``tools``, the ``task_id`` (so an online trainer can reset an env on it), and for the group of
trajectories collected on that task their ``rewards``, group-relative ``advantages``
(``(r - mean) / (std + eps)``), per-step rewards and **step-level advantages**: the
trajectory's advantage spread over its steps in proportion to their step rewards
(:func:`step_advantages`).

Example:
    >>> result = export_grpo(trajectories, min_group_size=2)  # doctest: +SKIP
    >>> row = result.dataset[0]  # doctest: +SKIP
    >>> len(row["rewards"]) == len(row["advantages"]) == len(row["step_advantages"])  # doctest: +SKIP
    True
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from knowlyr.agents.action_format import trajectory_messages_json
from knowlyr.errors import ExportError
from knowlyr.export.common import (
    DEFAULT_SYSTEM_PROMPT,
    DatasetCard,
    ExportResult,
    as_trajectories,
    infer_tool_schemas,
    normalized_step_weights,
    reward_stats,
    trajectory_reward,
)
from knowlyr.export.sft import json_list_array
from knowlyr.trajectory import Trajectory

__all__ = ["export_grpo", "group_advantages", "step_advantages"]


def group_advantages(rewards: list[float], *, eps: float = 1e-4, scale: bool = True) -> list[float]:
    """GRPO's group-relative advantages: ``r - mean``, divided by the std when ``scale``."""
    if not rewards:
        return []
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    return [(r - mean) / (std + eps) if scale else r - mean for r in rewards]


def step_advantages(
    advantage: float, step_rewards: list[float | None], *, mix: float = 1.0
) -> list[float]:
    """A trajectory advantage weighted per step by the step rewards.

    ``advantage * w_t`` with ``w`` from :func:`~knowlyr.export.common.normalized_step_weights`
    (mean 1, so the mean step advantage equals the trajectory advantage). With ``mix=1`` a
    step whose reward is 0 gets no credit and the steps that earned the reward get it all;
    when no step has a reward every step gets the trajectory advantage (plain GRPO).
    """
    return [advantage * w for w in normalized_step_weights(step_rewards, mix=mix)]


def export_grpo(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    tools: list[dict[str, Any]] | None = None,
    rewards: Mapping[str, float] | None = None,
    min_group_size: int = 1,
    scale_advantages: bool = True,
    step_mix: float = 1.0,
) -> ExportResult:
    """Export trajectories grouped per task for GRPO.

    Args:
        trajectories: trajectories, several per task for meaningful advantages.
        system_prompt: system message of the prompt (``None``: none).
        tools: OpenAI function schemas (inferred from the calls when ``None``).
        rewards: trajectory id -> reward overriding the stored rewards.
        min_group_size: tasks with fewer trajectories are left out (listed in ``rejected``).
        scale_advantages: divide by the group std (GRPO) or only centre (Dr. GRPO style).
        step_mix: how much step advantages follow the step rewards (see :func:`step_advantages`).
    """
    import pyarrow as pa
    from datasets import Dataset

    if min_group_size < 1:
        raise ExportError(f"min_group_size must be at least 1, got {min_group_size}")
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in as_trajectories(trajectories):
        groups[t.task.task_id].append(t)
    all_trajs = [t for g in groups.values() for t in g]
    if tools is None:
        tools = infer_tool_schemas(all_trajs)
    tools_json = [orjson.dumps(t) for t in tools]
    prompts: list[list[bytes]] = []
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "task_id",
            "instruction",
            "trajectory_ids",
            "rewards",
            "advantages",
            "success",
            "step_rewards",
            "step_advantages",
        )
    }
    rejected: list[tuple[str, str]] = []
    all_rewards: list[float] = []
    for task_id, group in groups.items():
        if len(group) < min_group_size:
            rejected.append((task_id, f"group of {len(group)} < min_group_size {min_group_size}"))
            continue
        rs = [trajectory_reward(t, rewards) for t in group]
        adv = group_advantages(rs, scale=scale_advantages)
        head = 2 if system_prompt else 1
        prompts.append(
            trajectory_messages_json(group[0], system_prompt=system_prompt, steps=[])[:head]
        )
        cols["task_id"].append(task_id)
        cols["instruction"].append(group[0].task.instruction)
        cols["trajectory_ids"].append([t.id for t in group])
        cols["rewards"].append(rs)
        cols["advantages"].append(adv)
        cols["success"].append([bool(t.outcome.success) for t in group])
        step_r = [[s.reward for s in t.steps] for t in group]
        cols["step_rewards"].append([[0.0 if r is None else r for r in srs] for srs in step_r])
        cols["step_advantages"].append(
            [step_advantages(a, srs, mix=step_mix) for a, srs in zip(adv, step_r, strict=True)]
        )
        all_rewards.extend(rs)
    table = pa.table(
        {
            "prompt": json_list_array(prompts),
            "tools": json_list_array([tools_json] * len(prompts)),
            "task_id": pa.array(cols["task_id"], pa.string()),
            "instruction": pa.array(cols["instruction"], pa.string()),
            "trajectory_ids": pa.array(cols["trajectory_ids"], pa.list_(pa.string())),
            "rewards": pa.array(cols["rewards"], pa.list_(pa.float64())),
            "advantages": pa.array(cols["advantages"], pa.list_(pa.float64())),
            "success": pa.array(cols["success"], pa.list_(pa.bool_())),
            "step_rewards": pa.array(cols["step_rewards"], pa.list_(pa.list_(pa.float64()))),
            "step_advantages": pa.array(cols["step_advantages"], pa.list_(pa.list_(pa.float64()))),
        }
    )
    ds = Dataset(table)
    card = DatasetCard(
        kind="grpo",
        rows=len(ds),
        trajectories=sum(len(x) for x in cols["trajectory_ids"]),
        tasks=len(ds),
        rejected={"small group": len(rejected)} if rejected else {},
        reward=reward_stats(all_rewards),
        params={
            "min_group_size": min_group_size,
            "scale_advantages": scale_advantages,
            "step_mix": step_mix,
            "system_prompt": system_prompt,
        },
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected)

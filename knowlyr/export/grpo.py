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

from knowlyr._arrow import table_fingerprint
from knowlyr.agents.action_format import messages_json
from knowlyr.errors import ExportError
from knowlyr.export.common import (
    DEFAULT_SYSTEM_PROMPT,
    CallShapes,
    DatasetCard,
    ExportResult,
    add_call_shapes,
    normalized_step_weights,
    reward_of,
    reward_stats,
    schemas_of_shapes,
    step_rewards_of,
    trajectory_fields,
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
    validated: bool = False,
) -> ExportResult:
    """Export trajectories grouped per task for GRPO.

    Args:
        trajectories: trajectories, several per task for meaningful advantages: models, or
            their JSON documents (dicts), validated as the model validates them and read
            without building models.
        system_prompt: system message of the prompt (``None``: none).
        tools: OpenAI function schemas (inferred from the calls when ``None``).
        rewards: trajectory id -> reward overriding the stored rewards.
        min_group_size: tasks with fewer trajectories are left out (listed in ``rejected``).
        scale_advantages: divide by the group std (GRPO) or only centre (Dr. GRPO style).
        step_mix: how much step advantages follow the step rewards (see :func:`step_advantages`).
        validated: the documents are validated already (the store's, or
            :func:`~knowlyr.export.sft_parallel.jsonl_documents`'): not checked again.
    """
    import pyarrow as pa
    from datasets import Dataset

    if min_group_size < 1:
        raise ExportError(f"min_group_size must be at least 1, got {min_group_size}")
    # per task: its first instruction, then per trajectory (id, success, reward, step rewards);
    # nothing else of a trajectory is kept. Tool schemas are inferred in group order (a task's
    # call shapes, tasks in order of first appearance), as from the grouped trajectories.
    groups: dict[str, tuple[str, list[tuple[str, bool, float, list[float | None]]]]] = {}
    task_shapes: dict[str, CallShapes] = defaultdict(dict)
    for td, task, outcome in trajectory_fields(trajectories, validated):
        tid, steps = td["id"], td.get("steps") or []
        step_r = step_rewards_of(steps)
        if rewards is not None and tid in rewards:
            reward = float(rewards[tid])
        else:
            reward = reward_of(step_r, outcome)
        task_id = task["task_id"]
        group = groups.get(task_id)
        if group is None:
            group = groups[task_id] = (task["instruction"], [])
        group[1].append((tid, bool(outcome.get("success")), reward, step_r))
        if tools is None:
            add_call_shapes(task_shapes[task_id], steps)
    if tools is None:
        shapes: CallShapes = {}
        for task_id in groups:
            for shape, params in task_shapes[task_id].items():
                shapes.setdefault(shape, params)
        tools = schemas_of_shapes(shapes)
    del task_shapes
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
    head = 2 if system_prompt else 1
    for task_id, (instruction, group) in groups.items():
        if len(group) < min_group_size:
            rejected.append((task_id, f"group of {len(group)} < min_group_size {min_group_size}"))
            continue
        rs = [r for _, _, r, _ in group]
        adv = group_advantages(rs, scale=scale_advantages)
        prompts.append(messages_json(instruction, [], system_prompt=system_prompt)[:head])
        cols["task_id"].append(task_id)
        cols["instruction"].append(instruction)
        cols["trajectory_ids"].append([tid for tid, _, _, _ in group])
        cols["rewards"].append(rs)
        cols["advantages"].append(adv)
        cols["success"].append([ok for _, ok, _, _ in group])
        step_r = [srs for _, _, _, srs in group]
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
    ds = Dataset(table, fingerprint=table_fingerprint(table))
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
            "input_trajectories": sum(len(g) for _, g in groups.values()),
        },
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected)

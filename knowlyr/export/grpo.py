"""GRPO export: trajectories grouped per task, with rewards, advantages and step advantages.

One row per task: the ``prompt`` (system and user turns, what a policy is asked; the system
message is the agent's own when its log kept it), the ``tools`` (those the group's agents
had), the ``task_id`` (so an online trainer can reset an env on it), and for the group of
trajectories collected on that task their ``rewards``, group-relative ``advantages``
(``(r - mean) / (std + eps)``), per-step rewards and **step-level advantages**: the
trajectory's advantage spread over its steps in proportion to their step rewards
(:func:`step_advantages`). A trajectory given twice is in its group once (the duplicates are
counted in the card); invalid actions (replies the harness could not parse) have no step
entries: they are no target (the trajectory's reward still counts them).

Example:
    >>> result = export_grpo(trajectories, min_group_size=2)  # doctest: +SKIP
    >>> row = result.dataset[0]  # doctest: +SKIP
    >>> len(row["rewards"]) == len(row["advantages"]) == len(row["step_advantages"])  # doctest: +SKIP
    True
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from knowlyr._arrow import table_fingerprint
from knowlyr.errors import ExportError
from knowlyr.export.common import (
    DEFAULT_SYSTEM_PROMPT,
    DatasetCard,
    ExportResult,
    ToolSets,
    add_call_shapes,
    normalized_step_weights,
    reward_of,
    reward_stats,
    step_rewards_of,
    trajectory_fields,
)
from knowlyr.export.messages import is_invalid, messages_json, system_prompt_of
from knowlyr.export.rewards import reward_source_of
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
    keep_agent_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    rewards: Mapping[str, float] | None = None,
    reward_source: Mapping[str, Any] | None = None,
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
        system_prompt: system message of the prompt (``None``: none), unless the group's
            agent's own is kept.
        keep_agent_prompt: a group whose first trajectory's log kept its agent's system prompt
            (``metadata["system_prompt"]``) has that one.
        tools: OpenAI function schemas every row declares; ``None``: the tools of the group's
            agents (see :class:`~knowlyr.export.common.ToolSets`).
        rewards: trajectory id -> reward overriding the stored rewards.
        reward_source: where the rewards come from (the card's ``params.rewards``; see
            :func:`~knowlyr.export.rewards.reward_source_of`).
        min_group_size: tasks with fewer distinct trajectories are left out (listed in
            ``rejected``).
        scale_advantages: divide by the group std (GRPO) or only centre (Dr. GRPO style).
        step_mix: how much step advantages follow the step rewards (see :func:`step_advantages`).
        validated: the documents are validated already (the store's, or
            :func:`~knowlyr.export.sft_parallel.jsonl_documents`'): not checked again.
    """
    import pyarrow as pa
    from datasets import Dataset

    if min_group_size < 1:
        raise ExportError(f"min_group_size must be at least 1, got {min_group_size}")
    # per task: its first instruction and system prompt, the keys of its agents' tool sets,
    # then per trajectory (id, success, reward, step rewards of its valid steps); nothing else
    # of a trajectory is kept
    groups: dict[str, tuple[str, str | None, dict[str, None], list[_Member]]] = {}
    seen: set[str] = set()
    duplicates: list[tuple[str, str]] = []
    sets = ToolSets(tools)
    invalid = {"steps": 0, "trajectories": 0}
    for td, task, outcome in trajectory_fields(trajectories, validated):
        tid, steps = td["id"], td.get("steps") or []
        if tid in seen:  # one trajectory twice would skew its group's advantages
            duplicates.append((tid, "duplicate trajectory"))
            continue
        seen.add(tid)
        step_r = step_rewards_of(steps)
        if rewards is not None and tid in rewards:
            reward = float(rewards[tid])
        else:
            reward = reward_of(step_r, outcome)
        n_invalid = sum(is_invalid(_fields(s).get("action")) for s in steps)
        if n_invalid:
            invalid["steps"] += n_invalid
            invalid["trajectories"] += 1
            step_r = [r for s, r in zip(steps, step_r, strict=True)
                      if not is_invalid(_fields(s).get("action"))]  # fmt: skip
        task_id = task["task_id"]
        group = groups.get(task_id)
        if group is None:
            prompt = system_prompt_of(td, system_prompt, keep_agent_prompt=keep_agent_prompt)
            group = groups[task_id] = (task["instruction"], prompt, {}, [])
        key, infer = sets.key(td)
        group[2][key] = None
        if infer:
            add_call_shapes(sets.shapes.setdefault(key, {}), steps)
        group[3].append((tid, bool(outcome.get("success")), reward, step_r))
    schemas = sets.schemas()
    prompts: list[list[bytes]] = []
    row_tools: list[list[bytes]] = []
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
    for task_id, (instruction, prompt, keys, group) in groups.items():
        if len(group) < min_group_size:
            rejected.append((task_id, f"group of {len(group)} < min_group_size {min_group_size}"))
            continue
        rs = [r for _, _, r, _ in group]
        adv = group_advantages(rs, scale=scale_advantages)
        prompts.append(messages_json(instruction, [], system_prompt=prompt))
        row_tools.append([orjson.dumps(t) for t in ToolSets.union(schemas[k] for k in keys)])
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
            "tools": json_list_array(row_tools),
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
        rejected={
            **({"small group": len(rejected)} if rejected else {}),
            **({"duplicate trajectory": len(duplicates)} if duplicates else {}),
        },
        reward=reward_stats(all_rewards),
        params={
            "min_group_size": min_group_size,
            "scale_advantages": scale_advantages,
            "step_mix": step_mix,
            "system_prompt": system_prompt,
            "keep_agent_prompt": keep_agent_prompt,
            "input_trajectories": len(seen) + len(duplicates),
            "rewards": reward_source_of(reward_source, rewards),
        },
        invalid_actions=invalid if invalid["steps"] else {},
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected + duplicates)


#: A group member: trajectory id, success, reward, the step rewards of its valid steps.
_Member = tuple[str, bool, float, list[float | None]]


def _fields(step: Any) -> dict[str, Any]:
    return step if type(step) is dict else step.__dict__

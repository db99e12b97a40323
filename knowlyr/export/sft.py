"""SFT export: multi-turn tool-calling conversations in the format TRL's SFTTrainer takes.

Each row holds ``messages`` (system, user task, then per step an assistant turn with the thought
and one tool call, and the tool's answer) and ``tools`` (OpenAI function schemas, one schema
for the whole dataset), plus ``step_weights`` for the step-weighted loss and bookkeeping
columns (``trajectory_id``, ``task_id``, ``reward``, ``success``, ``n_steps``, ``chunk``).
Nothing is truncated: long trajectories are split at step boundaries when asked
(``max_steps_per_row``), never cut inside a message.

Example:
    >>> result = export_sft(trajectories, min_reward=0.5)  # doctest: +SKIP
    >>> result.dataset[0]["messages"][2]["tool_calls"][0]["function"]["name"]  # doctest: +SKIP
    'query_stats'
    >>> result.save("out/sft")  # doctest: +SKIP
"""

from __future__ import annotations

import gc
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
    reward_stats,
    step_weights,
    trajectory_reward,
)
from knowlyr.trajectory import Trajectory

__all__ = ["chunk_steps", "export_sft", "json_list_array"]


def chunk_steps(n_steps: int, max_steps: int, overlap: int) -> list[tuple[int, int, int]]:
    """Split ``range(n_steps)`` into chunks of at most ``max_steps`` trained steps.

    Returns ``(context_start, start, end)`` per chunk: steps ``[context_start, start)`` are
    repeated from the previous chunk as context (weight 0, not trained again) and steps
    ``[start, end)`` are trained. Every step is trained exactly once.
    """
    if max_steps < 1:
        raise ExportError(f"max_steps_per_row must be at least 1, got {max_steps}")
    if overlap < 0:
        raise ExportError(f"chunk_overlap must be >= 0, got {overlap}")
    out = []
    for start in range(0, max(n_steps, 1), max_steps):
        out.append((max(0, start - overlap), start, min(start + max_steps, n_steps)))
    return out


def json_list_array(rows: list[list[bytes]]) -> Any:
    """A pyarrow ``list<json>`` array from per-row lists of JSON-encoded items."""
    import numpy as np
    import pyarrow as pa

    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = [item for r in rows for item in r]
    values = pa.ExtensionArray.from_storage(
        pa.json_(), pa.array(flat, pa.binary()).cast(pa.string())
    )
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def export_sft(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    tools: list[dict[str, Any]] | None = None,
    only_success: bool = True,
    min_reward: float | None = None,
    rewards: Mapping[str, float] | None = None,
    max_steps_per_row: int | None = None,
    chunk_overlap: int = 1,
    step_weight_mix: float = 0.5,
) -> ExportResult:
    """Export trajectories as an SFT ``datasets.Dataset`` of conversations with a tools column.

    Args:
        trajectories: Trajectory objects (or their dicts).
        system_prompt: system message of every conversation (``None``: none).
        tools: OpenAI function schemas for the ``tools`` column; inferred from the calls
            (:func:`~knowlyr.export.common.infer_tool_schemas`) when ``None``.
        only_success: keep only trajectories whose ``outcome.success`` is true.
        min_reward: keep only trajectories whose reward (see
            :func:`~knowlyr.export.common.trajectory_reward`) is at least this.
        rewards: trajectory id -> reward, overriding the rewards stored on the trajectories.
        max_steps_per_row: split longer trajectories into rows of at most this many trained
            steps, at step boundaries (``None``: one row per trajectory).
        chunk_overlap: steps of the previous chunk repeated as context (weight 0).
        step_weight_mix: how much the ``step_weights`` column follows the step rewards
            (see :func:`~knowlyr.export.common.normalized_step_weights`).

    Returns:
        An :class:`ExportResult`; rejected trajectories are listed with the reason.
    """
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of short-lived bytes objects: cyclic GC passes would dominate the export
    try:
        return _export_sft(
            trajectories,
            system_prompt=system_prompt,
            tools=tools,
            only_success=only_success,
            min_reward=min_reward,
            rewards=rewards,
            max_steps_per_row=max_steps_per_row,
            chunk_overlap=chunk_overlap,
            step_weight_mix=step_weight_mix,
        )
    finally:
        if gc_was_on:
            gc.enable()


def _export_sft(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    system_prompt: str | None,
    tools: list[dict[str, Any]] | None,
    only_success: bool,
    min_reward: float | None,
    rewards: Mapping[str, float] | None,
    max_steps_per_row: int | None,
    chunk_overlap: int,
    step_weight_mix: float,
) -> ExportResult:
    import pyarrow as pa
    from datasets import Dataset

    kept: list[tuple[Trajectory, float]] = []
    rejected: list[tuple[str, str]] = []
    n_in = 0
    for traj in as_trajectories(trajectories):
        n_in += 1
        reward = trajectory_reward(traj, rewards)
        if not traj.steps:
            rejected.append((traj.id, "no steps"))
        elif only_success and not traj.outcome.success:
            rejected.append((traj.id, "not successful"))
        elif min_reward is not None and reward < min_reward:
            rejected.append((traj.id, f"reward {reward:.4g} < min_reward {min_reward}"))
        else:
            kept.append((traj, reward))
    if tools is None:
        tools = infer_tool_schemas(t for t, _ in kept)
    tools_json = [orjson.dumps(t) for t in tools]

    messages: list[list[bytes]] = []
    cols: dict[str, list[Any]] = {
        "trajectory_id": [],
        "task_id": [],
        "reward": [],
        "success": [],
        "n_steps": [],
        "chunk": [],
        "step_weights": [],
    }
    for traj, reward in kept:
        weights = step_weights(traj, mix=step_weight_mix)
        n = len(traj.steps)
        spans = [(0, 0, n)] if max_steps_per_row is None or n <= max_steps_per_row else None
        if spans is None:
            spans = chunk_steps(n, max_steps_per_row, chunk_overlap)  # type: ignore[arg-type]
        for c, (ctx, start, end) in enumerate(spans):
            steps = traj.steps if (ctx, end) == (0, n) else traj.steps[ctx:end]
            messages.append(
                trajectory_messages_json(
                    traj,
                    system_prompt=system_prompt,
                    steps=steps,
                    include_final_observation=end < n,
                )
            )
            cols["trajectory_id"].append(traj.id)
            cols["task_id"].append(traj.task.task_id)
            cols["reward"].append(reward)
            cols["success"].append(traj.outcome.success)
            cols["n_steps"].append(end - start)
            cols["chunk"].append(c)
            cols["step_weights"].append([0.0] * (start - ctx) + weights[start:end])
    table = pa.table(
        {
            "messages": json_list_array(messages),
            "tools": json_list_array([tools_json] * len(messages)),
            **{k: pa.array(v) for k, v in cols.items()},
        }
    )
    if not messages:  # keep the column types stable for an empty export
        table = table.cast(
            pa.schema(
                [
                    pa.field("messages", pa.list_(pa.json_())),
                    pa.field("tools", pa.list_(pa.json_())),
                    pa.field("trajectory_id", pa.string()),
                    pa.field("task_id", pa.string()),
                    pa.field("reward", pa.float64()),
                    pa.field("success", pa.bool_()),
                    pa.field("n_steps", pa.int64()),
                    pa.field("chunk", pa.int64()),
                    pa.field("step_weights", pa.list_(pa.float64())),
                ]
            )
        )
    ds = Dataset(table, fingerprint=_fingerprint(cols["trajectory_id"], system_prompt, tools_json))
    reasons: dict[str, int] = {}
    for _, why in rejected:
        key = why.split(" ")[0] if why.startswith("reward") else why
        reasons[key] = reasons.get(key, 0) + 1
    card = DatasetCard(
        kind="sft",
        rows=len(ds),
        trajectories=len(kept),
        tasks=len({t.task.task_id for t, _ in kept}),
        rejected=reasons,
        reward=reward_stats([r for _, r in kept]),
        params={
            "input_trajectories": n_in,
            "only_success": only_success,
            "min_reward": min_reward,
            "max_steps_per_row": max_steps_per_row,
            "chunk_overlap": chunk_overlap,
            "step_weight_mix": step_weight_mix,
            "tools": [t.get("function", t).get("name") for t in tools],
            "system_prompt": system_prompt,
        },
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected)


def _fingerprint(ids: list[str], system_prompt: str | None, tools_json: list[bytes]) -> str:
    import hashlib

    h = hashlib.sha256(orjson.dumps([ids, system_prompt, [t.decode() for t in tools_json]]))
    return h.hexdigest()[:32]

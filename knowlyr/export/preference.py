"""DPO export: conversational ``prompt`` / ``chosen`` / ``rejected`` from preference pairs.

``prompt`` is the system and user turns; ``chosen`` and ``rejected`` are the two
trajectories' assistant and tool turns (the format TRL's DPOTrainer takes, with a ``tools``
column). Pairs come from the reward stage (objects or dicts with ``chosen_id`` and
``rejected_id``, e.g. :class:`knowlyr.reward.preferences.PreferencePair`) or are built here
from trajectories of the same task with :func:`pairs_from_trajectories`.

Example:
    >>> result = export_dpo(trajectories)  # pairs built per task  # doctest: +SKIP
    >>> sorted(result.dataset.column_names)[:3]  # doctest: +SKIP
    ['chosen', 'chosen_id', 'chosen_reward']
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
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
    reward_of,
    reward_stats,
    schemas_of_shapes,
    step_rewards_of,
    trajectory_fields,
    trajectory_reward,
)
from knowlyr.export.sft import json_list_array
from knowlyr.trajectory import Trajectory

__all__ = ["export_dpo", "pairs_from_trajectories"]


def pairs_from_trajectories(
    trajectories: Sequence[Trajectory],
    *,
    rewards: Mapping[str, float] | None = None,
    min_margin: float = 0.1,
    max_pairs_per_task: int = 4,
) -> list[dict[str, Any]]:
    """Preference pairs within each task: better reward beats worse by at least ``min_margin``.

    A successful trajectory always beats a failed one whatever the rewards. Pairs are taken
    best-vs-worst first, at most ``max_pairs_per_task`` per task, each trajectory at most once
    per side.
    """
    return _pairs(
        [
            (t.id, t.task.task_id, bool(t.outcome.success), trajectory_reward(t, rewards))
            for t in trajectories
        ],
        min_margin,
        max_pairs_per_task,
    )


def _pairs(
    entries: list[tuple[str, str, bool, float]], min_margin: float, max_pairs_per_task: int
) -> list[dict[str, Any]]:
    """:func:`pairs_from_trajectories` of each trajectory's (id, task id, success, reward)."""
    by_task: dict[str, list[tuple[str, str, bool, float]]] = defaultdict(list)
    for e in entries:
        by_task[e[1]].append(e)
    pairs = []
    for task_id, group in by_task.items():
        scored = sorted(
            ((ok, r, tid) for tid, _, ok, r in group), key=lambda x: (x[0], x[1]), reverse=True
        )
        used_c: set[str] = set()
        used_r: set[str] = set()
        n = 0
        for ok_c, r_c, c in scored:
            for ok_r, r_r, r in reversed(scored):
                if n >= max_pairs_per_task:
                    break
                if c == r or c in used_c or r in used_r:
                    continue
                if (ok_c and not ok_r) or (ok_c == ok_r and r_c - r_r >= min_margin):
                    pairs.append(
                        {
                            "task_id": task_id,
                            "chosen_id": c,
                            "rejected_id": r,
                            "chosen_reward": r_c,
                            "rejected_reward": r_r,
                            "margin": r_c - r_r,
                        }
                    )
                    used_c.add(c)
                    used_r.add(r)
                    n += 1
                    break
    return pairs


class _StepSpill:
    """The steps of the documents :func:`export_dpo` reads, kept as their JSON in an unnamed
    temporary file until the pairs are known: (offset, length) per trajectory in memory, the
    steps parsed again for the trajectories that are paired."""

    def __init__(self) -> None:
        self._file: Any = None
        self._at = 0

    def put(self, data: bytes) -> tuple[int, int]:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="knowlyr-dpo-")  # noqa: SIM115 (closed by close())
        self._file.write(data)
        at, self._at = self._at, self._at + len(data)
        return at, len(data)

    def get(self, kept: list[Any] | tuple[int, int]) -> list[Any]:
        """The steps kept as ``kept``: a list as it is, a range read back."""
        if type(kept) is not tuple:
            return kept
        self._file.flush()
        return orjson.loads(os.pread(self._file.fileno(), kept[1], kept[0]))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _get(pair: Any, key: str) -> Any:
    return pair[key] if isinstance(pair, Mapping) else getattr(pair, key)


def export_dpo(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    pairs: Iterable[Any] | None = None,
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    tools: list[dict[str, Any]] | None = None,
    rewards: Mapping[str, float] | None = None,
    min_margin: float = 0.1,
    max_pairs_per_task: int = 4,
    validated: bool = False,
) -> ExportResult:
    """Export preference pairs as a conversational DPO ``datasets.Dataset``.

    Args:
        trajectories: every trajectory the pairs refer to: models, or their JSON documents
            (dicts), validated as the model validates them and read without building models.
        pairs: objects or dicts with ``chosen_id`` and ``rejected_id`` (and optionally
            ``margin``); ``None`` builds them with :func:`pairs_from_trajectories`.
        system_prompt: system message of the prompt (``None``: none).
        tools: OpenAI function schemas (inferred from the calls when ``None``).
        rewards, min_margin, max_pairs_per_task: see :func:`pairs_from_trajectories`.
        validated: the documents are validated already (the store's, or
            :func:`~knowlyr.export.sft_parallel.jsonl_documents`'): not checked again.

    A pair whose trajectories are missing, belong to different tasks or have no steps is
    left out and listed in ``rejected`` with the reason.
    """
    import pyarrow as pa
    from datasets import Dataset

    # per trajectory what pairing needs, and its instruction and steps for the messages of
    # the pairs it is in: a model's steps by reference (the caller holds them), a document's
    # spilled as JSON to a temporary file (see _StepSpill): memory holds no document
    entries: list[tuple[str, str, bool, float]] = []
    by_id: dict[str, tuple[str, str, list[Any] | tuple[int, int]]] = {}
    spill = _StepSpill()
    shapes: CallShapes = {}
    for td, task, outcome in trajectory_fields(trajectories, validated):
        tid, steps = td["id"], td.get("steps") or []
        if rewards is not None and tid in rewards:
            reward = float(rewards[tid])
        else:
            reward = reward_of(step_rewards_of(steps), outcome)
        entries.append((tid, task["task_id"], bool(outcome.get("success")), reward))
        kept: list[Any] | tuple[int, int] = steps
        if steps and type(steps[0]) is dict:
            try:
                data = orjson.dumps(steps)
            except orjson.JSONEncodeError:  # a dict given with values JSON has no form for:
                pass  # kept as it is (rendering it fails only if it is paired)
            else:
                kept = spill.put(data)
        by_id[tid] = (task["task_id"], task["instruction"], kept)
        if tools is None:
            add_call_shapes(shapes, steps)
    if pairs is None:
        pairs = _pairs(entries, min_margin, max_pairs_per_task)
    n_in, reward_by_id = len(entries), {tid: r for tid, _, _, r in entries}
    del entries
    if tools is None:
        tools = schemas_of_shapes(shapes)
    tools_json = [orjson.dumps(t) for t in tools]
    prompts: list[list[bytes]] = []
    chosen: list[list[bytes]] = []
    rejected_msgs: list[list[bytes]] = []
    cols: dict[str, list[Any]] = {k: [] for k in ("task_id", "chosen_id", "rejected_id", "margin")}
    rejected: list[tuple[str, str]] = []
    head = 2 if system_prompt else 1
    for i, p in enumerate(pairs):
        try:
            cid, rid = _get(p, "chosen_id"), _get(p, "rejected_id")
        except (KeyError, AttributeError) as e:
            raise ExportError(f"pair {i} needs chosen_id and rejected_id: {e}") from e
        c, r = by_id.get(cid), by_id.get(rid)
        key = f"{cid}>{rid}"
        if c is None or r is None:
            rejected.append((key, f"trajectory {cid if c is None else rid} not given"))
            continue
        if c[0] != r[0]:
            rejected.append((key, "chosen and rejected are different tasks"))
            continue
        if not c[2] or not r[2]:
            rejected.append((key, "a trajectory has no steps"))
            continue
        c_msgs = messages_json(c[1], spill.get(c[2]), system_prompt=system_prompt)
        prompts.append(c_msgs[:head])
        chosen.append(c_msgs[head:])
        r_msgs = messages_json(r[1], spill.get(r[2]), system_prompt=system_prompt)
        rejected_msgs.append(r_msgs[head:])
        cols["task_id"].append(c[0])
        cols["chosen_id"].append(cid)
        cols["rejected_id"].append(rid)
        margin = p.get("margin") if isinstance(p, Mapping) else getattr(p, "margin", None)
        cols["margin"].append(
            float(margin) if margin is not None else reward_by_id[cid] - reward_by_id[rid]
        )
    spill.close()
    table = pa.table(
        {
            "prompt": json_list_array(prompts),
            "chosen": json_list_array(chosen),
            "rejected": json_list_array(rejected_msgs),
            "tools": json_list_array([tools_json] * len(prompts)),
            "task_id": pa.array(cols["task_id"], pa.string()),
            "chosen_id": pa.array(cols["chosen_id"], pa.string()),
            "rejected_id": pa.array(cols["rejected_id"], pa.string()),
            "margin": pa.array(cols["margin"], pa.float64()),
        }
    )
    ds = Dataset(table, fingerprint=table_fingerprint(table))
    reasons: dict[str, int] = {}
    for _, why in rejected:
        key = "trajectory not given" if why.startswith("trajectory") else why
        reasons[key] = reasons.get(key, 0) + 1
    card = DatasetCard(
        kind="dpo",
        rows=len(ds),
        trajectories=len({*cols["chosen_id"], *cols["rejected_id"]}),
        tasks=len(set(cols["task_id"])),
        rejected=reasons,
        reward={f"margin_{k}": v for k, v in reward_stats(cols["margin"]).items()},
        params={
            "min_margin": min_margin,
            "max_pairs_per_task": max_pairs_per_task,
            "system_prompt": system_prompt,
            "input_trajectories": n_in,
        },
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected)

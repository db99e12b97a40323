"""DPO export: conversational ``prompt`` / ``chosen`` / ``rejected`` from preference pairs.

``prompt`` is the system and user turns (the system message is the chosen agent's own when
its log kept it); ``chosen`` and ``rejected`` are the two trajectories' assistant and tool
turns, with call ids, without invalid actions (replies the harness could not parse: cut with
the harness's answers, see :mod:`knowlyr.export.messages`), in the format TRL's DPOTrainer
takes, and ``tools`` declares the tools the two agents had. Pairs come from the reward stage (objects or dicts with ``chosen_id`` and
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
from knowlyr.errors import ExportError
from knowlyr.export.common import (
    DEFAULT_SYSTEM_PROMPT,
    DatasetCard,
    ExportResult,
    ToolSets,
    add_call_shapes,
    reward_of,
    reward_stats,
    step_rewards_of,
    trajectory_fields,
    trajectory_reward,
)
from knowlyr.export.messages import is_invalid, messages_json, system_prompt_of
from knowlyr.export.rewards import reward_source_of
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
    keep_agent_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    rewards: Mapping[str, float] | None = None,
    reward_source: Mapping[str, Any] | None = None,
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
        system_prompt: system message of the prompt (``None``: none), unless the chosen
            agent's own is kept.
        keep_agent_prompt: a pair whose chosen trajectory's log kept its agent's system prompt
            (``metadata["system_prompt"]``) has that one.
        tools: OpenAI function schemas every row declares; ``None``: the tools of the two
            trajectories' agents (see :class:`~knowlyr.export.common.ToolSets`).
        rewards, min_margin, max_pairs_per_task: see :func:`pairs_from_trajectories`.
        reward_source: where the rewards come from (the card's ``params.rewards``; see
            :func:`~knowlyr.export.rewards.reward_source_of`).
        validated: the documents are validated already (the store's, or
            :func:`~knowlyr.export.sft_parallel.jsonl_documents`'): not checked again.

    A pair whose trajectories are missing, belong to different tasks or have no valid steps
    is left out and listed in ``rejected`` with the reason; when the pairs are built here, a
    trajectory with no valid steps is left out (and listed) before pairing, so it does not use
    up its task's pairs. A trajectory given twice is read
    once (the duplicates are counted in the card).
    """
    import pyarrow as pa
    from datasets import Dataset

    # per trajectory what pairing needs, and its instruction and steps for the messages of
    # the pairs it is in: a model's steps by reference (the caller holds them), a document's
    # spilled as JSON to a temporary file (see _StepSpill): memory holds no document
    entries: list[tuple[str, str, bool, float]] = []
    by_id: dict[str, tuple[str, str, list[Any] | tuple[int, int], str | None, str]] = {}
    spill = _StepSpill()
    sets = ToolSets(tools)
    duplicates: list[tuple[str, str]] = []
    unpaired: list[tuple[str, str]] = []  # left out before pairing (pairs built here)
    for td, task, outcome in trajectory_fields(trajectories, validated):
        tid, steps = td["id"], td.get("steps") or []
        if tid in by_id:  # one trajectory twice: read once
            duplicates.append((tid, "duplicate trajectory"))
            continue
        if rewards is not None and tid in rewards:
            reward = float(rewards[tid])
        else:
            reward = reward_of(step_rewards_of(steps), outcome)
        if pairs is None and _count_invalid(steps) == len(steps):
            # nothing of it can be trained on: it would only use up its task's pairs
            unpaired.append((tid, "a trajectory has no valid steps"))
            continue
        entries.append((tid, task["task_id"], bool(outcome.get("success")), reward))
        kept: list[Any] | tuple[int, int] = steps
        if steps and type(steps[0]) is dict:
            try:
                data = orjson.dumps(steps)
            except orjson.JSONEncodeError:  # a dict given with values JSON has no form for:
                pass  # kept as it is (rendering it fails only if it is paired)
            else:
                kept = spill.put(data)
        prompt = system_prompt_of(td, system_prompt, keep_agent_prompt=keep_agent_prompt)
        key, infer = sets.key(td)
        if infer:
            add_call_shapes(sets.shapes.setdefault(key, {}), steps)
        by_id[tid] = (task["task_id"], task["instruction"], kept, prompt, key)
    if pairs is None:
        pairs = _pairs(entries, min_margin, max_pairs_per_task)
    n_in, reward_by_id = len(entries) + len(unpaired), {tid: r for tid, _, _, r in entries}
    del entries
    schemas = sets.schemas()
    prompts: list[list[bytes]] = []
    row_tools: list[list[bytes]] = []
    invalid: dict[str, int] = {}  # paired trajectory id -> its invalid actions
    chosen: list[list[bytes]] = []
    rejected_msgs: list[list[bytes]] = []
    cols: dict[str, list[Any]] = {k: [] for k in ("task_id", "chosen_id", "rejected_id", "margin")}
    rejected: list[tuple[str, str]] = list(unpaired)
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
        c_steps, r_steps = spill.get(c[2]) if c[2] else [], spill.get(r[2]) if r[2] else []
        c_bad, r_bad = _count_invalid(c_steps), _count_invalid(r_steps)
        if c_bad == len(c_steps) or r_bad == len(r_steps):
            rejected.append((key, "a trajectory has no valid steps"))
            continue
        invalid[cid], invalid[rid] = c_bad, r_bad
        head = 2 if c[3] else 1
        c_msgs = messages_json(c[1], c_steps, system_prompt=c[3])
        prompts.append(c_msgs[:head])
        chosen.append(c_msgs[head:])
        r_msgs = messages_json(r[1], r_steps, system_prompt=c[3])
        rejected_msgs.append(r_msgs[head:])
        pair_tools = ToolSets.union([schemas[c[4]], schemas[r[4]]])
        row_tools.append([orjson.dumps(t) for t in pair_tools])
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
            "tools": json_list_array(row_tools),
            "task_id": pa.array(cols["task_id"], pa.string()),
            "chosen_id": pa.array(cols["chosen_id"], pa.string()),
            "rejected_id": pa.array(cols["rejected_id"], pa.string()),
            "margin": pa.array(cols["margin"], pa.float64()),
        }
    )
    ds = Dataset(table, fingerprint=table_fingerprint(table))
    reasons: dict[str, int] = {}
    for _, why in rejected + duplicates:
        key = "trajectory not given" if why.startswith("trajectory") else why
        reasons[key] = reasons.get(key, 0) + 1
    n_invalid = sum(invalid.values())
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
            "keep_agent_prompt": keep_agent_prompt,
            "input_trajectories": n_in + len(duplicates),
            "rewards": reward_source_of(reward_source, rewards),
        },
        invalid_actions={"steps": n_invalid, "trajectories": sum(n > 0 for n in invalid.values())}
        if n_invalid
        else {},
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected + duplicates)


def _count_invalid(steps: list[Any]) -> int:
    """How many of ``steps`` (models or documents) are invalid actions."""
    return sum(is_invalid((s if type(s) is dict else s.__dict__).get("action")) for s in steps)

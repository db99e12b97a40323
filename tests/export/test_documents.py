"""The document path of the export: JSON documents validated as the model validates them
(knowlyr.store._documents.validate_document) and exported to the very dataset, card and rejections that the
Trajectory models give, on the fixtures, generated hostile corpora and hand-made edge cases."""

from __future__ import annotations

import functools
import math
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from knowlyr.errors import ExportError
from knowlyr.export import (
    export_dpo,
    export_grpo,
    export_sft,
    group_advantages,
    pairs_from_trajectories,
    step_advantages,
    trajectory_reward,
)
from knowlyr.export.common import ToolSets, reward_of, step_rewards_of
from knowlyr.export.messages import trajectory_messages
from knowlyr.store._documents import validate_document
from knowlyr.trajectory import (
    INVALID_ACTION_TOOL,
    Observation,
    Outcome,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)
from tests.export.test_sft_columns import generated_corpus, reference_tools
from tests.reward.corpus import make_corpus


def _nan(x: Any) -> Any:
    """NaN as a comparable marker, recursively."""
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, list):
        return [_nan(v) for v in x]
    if isinstance(x, dict):
        return {k: _nan(v) for k, v in x.items()}
    return x


def _huge_and_odd() -> list[Trajectory]:
    """Huge outputs, NaN / negative / missing step rewards, a duplicated id, unicode."""
    steps = [
        Step(index=0, thought="é✓𝄞", action=ToolCall(tool="bash", params={"command": "x" * 9}),
             observation=Observation(output="o" * 300_000), reward=math.nan),
        Step(index=1, message="done\u2028", reward=None),
        Step(index=2, action=ToolCall(tool="read", params={"path": "ü", "n": [1, {"a": None}]}),
             reward=-1.0),
    ]  # fmt: skip
    one = Trajectory(task=TaskInfo(task_id="τ", instruction="\x00\n"), steps=steps,
                     outcome=Outcome(success=True))  # fmt: skip
    twin = one.model_copy(deep=True)
    twin.outcome.score = 0.25
    empty = Trajectory(task=TaskInfo(task_id="e"), outcome=Outcome(success=True))
    return [one, twin, empty]


@functools.cache
def _corpora() -> dict[str, list[Trajectory]]:
    from knowlyr.recorder import convert

    fixtures = convert([__import__("pathlib").Path(__file__).parents[1] / "data" / "fixtures"])
    return {
        "generated": generated_corpus(3, n=40),
        "rules corpus": make_corpus(40, seed=4),
        "fixtures": fixtures.trajectories,
        "huge and odd": _huge_and_odd(),
    }


@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_a_validated_document_is_the_model_dump(corpus):
    for t in _corpora()[corpus]:
        for raw in (orjson.loads(t.to_json()), t.model_dump(mode="json"), t.model_dump()):
            assert _nan(validate_document(raw)) == _nan(Trajectory.model_validate(raw).model_dump())


_COERCED = [
    {"task": {"task_id": "t", "reference_steps": 3}, "steps": []},  # extra task field kept
    {"task": {"task_id": "t"}, "steps": [{"index": "2", "reward": 1, "timestamp": "2024-05-01T10:00:00Z",
                                          "observation": {"exit_code": 1.0}, "action": {"tool": "a"}}]},
    {"id": "", "task": {"task_id": "t", "instruction": "i"}, "outcome": {"success": "true", "score": "0.5"}},
    {"id": "given", "task": {"task_id": "t"}, "agent": {"name": "a"}, "source": {"line": "4"}},
]  # fmt: skip
_BAD = [
    {},
    {"task": {}},
    {"task": {"task_id": "t"}, "steps": [{"index": 0, "bogus": 1}]},
    {"task": {"task_id": "t"}, "steps": [1]},
    {"task": {"task_id": "t"}, "steps": [{"index": 0, "action": {"params": {}}}]},
    {"task": {"task_id": "t"}, "outcome": {"success": "maybe"}},
    {"task": {"task_id": "t"}, "steps": [{"index": 0, "timestamp": "yesterday"}]},
    {"task": {"task_id": "t"}, "unknown": 1},
    [],
    "text",
]


@pytest.mark.parametrize("raw", _COERCED)
def test_coercions_and_defaults_are_the_models(raw):
    assert validate_document(raw) == Trajectory.model_validate(raw).model_dump()


@pytest.mark.parametrize("raw", _BAD)
def test_a_bad_document_raises_the_models_error(raw):
    with pytest.raises(ValidationError) as model_error:
        Trajectory.model_validate(raw)
    with pytest.raises(ValidationError) as doc_error:
        validate_document(raw)
    assert str(doc_error.value) == str(model_error.value)


def _export(items, **kw):
    res = export_sft(items, system_prompt="sys", **kw)
    return _nan(res.dataset.to_list()), res.card.to_dict(), res.rejected


_KW = [
    {},
    {"only_success": False},
    {"only_success": False, "max_steps_per_row": 2, "chunk_overlap": 1},
    {"only_success": False, "min_reward": 0.4, "step_weight_mix": 1.0},
]


@pytest.mark.parametrize("kw", _KW, ids=str)
@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_documents_export_the_models_dataset_and_card(corpus, kw):
    trajs = _corpora()[corpus]
    dumps = [t.model_dump() for t in trajs]  # every field, NaN rewards kept
    assert _export(dumps, **kw) == _export(trajs, **kw)
    docs = [orjson.loads(t.to_json()) for t in trajs]  # None fields left out, NaN -> null
    want = _export([Trajectory.model_validate(d) for d in docs], **kw)
    assert _export(docs, **kw) == want
    assert _export(iter(docs), validated=True, **kw) == want  # a stream of stored documents
    rewards = {t.id: i / 10 for i, t in enumerate(trajs)}
    assert _export(dumps, rewards=rewards, **kw) == _export(trajs, rewards=rewards, **kw)


@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_document_reward_is_trajectory_reward(corpus):
    for t in _corpora()[corpus]:
        d = validate_document(t.model_dump())
        got = reward_of(step_rewards_of(d["steps"]), d["outcome"])
        assert _nan(got) == _nan(trajectory_reward(t))


def test_a_bad_document_names_the_record():
    good = orjson.loads(_huge_and_odd()[0].to_json())
    with pytest.raises(ExportError, match=r"(?s)record 1 is not a valid trajectory: .*task_id"):
        export_sft([good, {"task": {}}])


# -- DPO and GRPO: documents and models read alike, against the per-model definitions -------


def _dpo_reference(
    trajs: list[Trajectory], rewards=None, min_margin=0.1, system_prompt="sys"
) -> tuple[list, int]:
    """The DPO rows as the per-model functions define them: pairs, messages (the chosen
    agent's own system prompt), each agent's tools."""
    by_id = {t.id: t for t in trajs}
    tools = dict(zip(by_id, reference_tools(list(by_id.values()), None), strict=True))
    distinct = list(by_id.values())  # a trajectory given twice is read once
    valid = [t for t in distinct if _valid(t)]  # one with no valid step is left out unpaired
    rows, skipped = [], len(distinct) - len(valid)  # then duplicates too
    for p in pairs_from_trajectories(valid, rewards=rewards, min_margin=min_margin):
        c, r = by_id[p["chosen_id"]], by_id[p["rejected_id"]]
        prompt = c.metadata.get("system_prompt") or system_prompt
        head = 2 if prompt else 1
        cm = trajectory_messages(c, system_prompt=prompt)
        rows.append({
            "prompt": cm[:head], "chosen": cm[head:],
            "rejected": trajectory_messages(r, system_prompt=prompt)[head:],
            "tools": ToolSets.union([tools[c.id], tools[r.id]]),
            "task_id": c.task.task_id, "chosen_id": c.id, "rejected_id": r.id,
            "margin": trajectory_reward(c, rewards) - trajectory_reward(r, rewards),
        })  # fmt: skip
    return _nan(rows), skipped + len(trajs) - len(by_id)


def _grpo_reference(
    trajs: list[Trajectory], rewards=None, min_group_size=1, system_prompt="sys"
) -> list:
    groups: dict[str, list[Trajectory]] = {}
    by_id = {t.id: t for t in trajs}  # a trajectory given twice is in its group once
    for t in by_id.values():
        groups.setdefault(t.task.task_id, []).append(t)
    tools = dict(zip(by_id, reference_tools(list(by_id.values()), None), strict=True))
    rows = []
    for task_id, g in groups.items():
        if len(g) < min_group_size:
            continue
        rs = [trajectory_reward(t, rewards) for t in g]
        adv = group_advantages(rs)
        valid = [[s for s in t.steps if s.tool != INVALID_ACTION_TOOL] for t in g]
        prompt = g[0].metadata.get("system_prompt") or system_prompt
        rows.append({
            "prompt": trajectory_messages(g[0], system_prompt=prompt, steps=[]),
            "tools": ToolSets.union(tools[t.id] for t in g),
            "task_id": task_id, "instruction": g[0].task.instruction,
            "trajectory_ids": [t.id for t in g], "rewards": rs, "advantages": adv,
            "success": [bool(t.outcome.success) for t in g],
            "step_rewards": [[0.0 if s.reward is None else s.reward for s in v] for v in valid],
            "step_advantages": [
                step_advantages(a, [s.reward for s in v]) for a, v in zip(adv, valid, strict=True)
            ],
        })  # fmt: skip
    return _nan(rows)


def _valid(t: Trajectory) -> bool:
    return any(s.tool != INVALID_ACTION_TOOL for s in t.steps)


def _inputs(trajs: list[Trajectory]) -> dict[str, Any]:
    """The same trajectories as models, full dumps, stored documents (None fields left out)
    and a stream of those documents marked validated."""
    docs = [orjson.loads(t.to_json()) for t in trajs]
    return {
        "models": (trajs, {}),
        "dumps": ([t.model_dump() for t in trajs], {}),
        "documents": (docs, {}),
        "validated stream": (iter(docs), {"validated": True}),
    }


@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_dpo_of_documents_and_models_is_the_per_model_export(corpus):
    trajs = _corpora()[corpus]
    trajs = [Trajectory.model_validate(orjson.loads(t.to_json())) for t in trajs]  # NaN -> None
    rewards = {t.id: (i % 4) / 4 for i, t in enumerate(trajs)}
    for kw in ({"min_margin": 0.0}, {"min_margin": 0.3, "rewards": rewards}):
        want, skipped = _dpo_reference(trajs, **kw)
        for name, (items, extra) in _inputs(trajs).items():
            res = export_dpo(items, system_prompt="sys", **kw, **extra)
            assert _nan(res.dataset.to_list()) == want, name
            assert res.card.rows == len(want)
            assert sum(res.card.rejected.values()) == skipped
            assert res.card.params["input_trajectories"] == len(trajs)
    assert want or corpus in ("fixtures", "huge and odd")  # one trajectory per task there


@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_grpo_of_documents_and_models_is_the_per_model_export(corpus):
    trajs = _corpora()[corpus]
    trajs = [Trajectory.model_validate(orjson.loads(t.to_json())) for t in trajs]
    rewards = {t.id: (i % 3) / 2 for i, t in enumerate(trajs)}
    for kw in ({}, {"min_group_size": 3, "rewards": rewards}):
        want = _grpo_reference(trajs, **kw)
        for name, (items, extra) in _inputs(trajs).items():
            res = export_grpo(items, system_prompt="sys", **kw, **extra)
            assert _nan(res.dataset.to_list()) == want, name
            assert res.card.trajectories == sum(len(r["trajectory_ids"]) for r in want)
            assert res.card.params["input_trajectories"] == len(trajs)
    assert _grpo_reference(trajs)  # every task is a group of one at least


def test_dpo_and_grpo_name_a_bad_document():
    good = orjson.loads(_huge_and_odd()[0].to_json())
    for export in (export_dpo, export_grpo):
        with pytest.raises(ExportError, match=r"(?s)record 1 is not a valid trajectory: .*task_id"):
            export([good, {"task": {}}])


def test_dpo_keeps_a_document_json_cannot_encode_until_it_is_paired():
    docs = [orjson.loads(t.to_json()) for t in generated_corpus(14, n=30) if t.steps]
    odd = validate_document({**docs[0], "id": "odd", "task": {"task_id": "alone"}})
    odd["steps"][0]["action"] = {"tool": "t", "params": {"s": {1, 2}}}  # a set: no JSON
    res = export_dpo([*docs, odd], validated=True)  # its task has no pair: never rendered
    assert res.card.rows and "odd" not in [*res.dataset["chosen_id"], *res.dataset["rejected_id"]]

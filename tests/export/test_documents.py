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
from knowlyr.export import export_sft, trajectory_reward
from knowlyr.export.sft import _reward, _step_rewards
from knowlyr.store._documents import validate_document
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory
from tests.export.test_sft_columns import generated_corpus
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
        got = _reward(_step_rewards(d["steps"]), d["outcome"])
        assert _nan(got) == _nan(trajectory_reward(t))


def test_a_bad_document_names_the_record():
    good = orjson.loads(_huge_and_odd()[0].to_json())
    with pytest.raises(ExportError, match=r"(?s)record 1 is not a valid trajectory: .*task_id"):
        export_sft([good, {"task": {}}])

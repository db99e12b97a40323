"""The columnar SFT export equals a straightforward per-row construction, byte for byte.

The reference below is the export built the slow, obvious way: per row the message dicts of
``trajectory_messages`` (invalid actions cut, call ids, the agent's own system prompt),
``orjson.dumps`` of each, the tools of the row's agent, the step weights of
``normalized_step_weights`` and one Arrow table. ``export_sft`` must produce the same table
(schema, every JSON byte, every weight) on generated corpora full of JSON-hostile text, on
the trajectories of the real agent logs in tests/data/fixtures, across batch boundaries and
when a batch is split for size; and the chat template must render the same text.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import orjson
import pyarrow as pa
import pytest

from knowlyr.errors import ExportError
from knowlyr.export import (
    chunk_steps,
    export_sft,
    normalized_step_weights,
    sft_columns,
    trajectory_reward,
)
from knowlyr.export import sft as sft_module
from knowlyr.export.messages import format_tools, trajectory_messages
from knowlyr.export.sft import json_list_array
from knowlyr.trajectory import (
    INVALID_ACTION_TOOL,
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)

_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def reference_schemas(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    """Tool schemas inferred in one pass over every call: a parameter is typed by the values
    of the first call of each set of parameter names; invalid actions are no tool."""
    seen: dict[str, dict[str, list[str]]] = {}
    shapes: set[tuple[str, tuple[str, ...]]] = set()
    calls: Counter[str] = Counter()
    present: dict[str, Counter[str]] = {}
    for t in trajs:
        for s in t.steps:
            if s.action is None or s.action.tool == INVALID_ACTION_TOOL:
                continue
            tool, params = s.action.tool, s.action.params
            props = seen.setdefault(tool, {})
            calls[tool] += 1
            cnt = present.setdefault(tool, Counter())
            new_shape = (tool, tuple(params)) not in shapes
            shapes.add((tool, tuple(params)))
            for k, v in params.items():
                types = props.setdefault(k, [])
                t_ = _JSON_TYPES.get(type(v), "null" if v is None else "string")
                if new_shape and t_ not in types:
                    types.append(t_)
                cnt[k] += 1
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "type": "object",
                    "properties": {
                        k: {"type": t[0] if len(t) == 1 else t} for k, t in seen[name].items()
                    },
                    "required": [k for k in seen[name] if present[name][k] == calls[name]],
                },
            },
        }
        for name in sorted(seen)
    ]


def reference_tools(kept: list[Trajectory], given: list[dict] | None) -> list[list[dict]]:
    """Each kept trajectory's tools: ``given``, else what its metadata declares, else the
    tools of its log format's agent, else inferred from the calls of the kept trajectories
    of the same agent and format."""
    from knowlyr.recorder import get_adapter

    out = []
    for t in kept:
        if given is not None:
            out.append(given)
        elif t.metadata.get("tools"):
            out.append(format_tools(t.metadata["tools"]))
        elif t.source.format in ("mini_swe_agent",):
            out.append([dict(x) for x in get_adapter(t.source.format).agent_tools])
        else:
            same = [
                u for u in kept
                if (u.agent.name, u.source.format) == (t.agent.name, t.source.format)
                and not u.metadata.get("tools")
            ]  # fmt: skip
            out.append(reference_schemas(same))
    return out


def reference_table(trajs: list[Trajectory], **kw: Any) -> tuple[pa.Table, list[dict]]:
    """The SFT table built row by row from message dicts (the slow, obviously right way)."""
    system_prompt = kw.get("system_prompt", "You are an agent.")
    keep_agent_prompt = kw.get("keep_agent_prompt", True)
    only_success, min_reward = kw.get("only_success", True), kw.get("min_reward")
    max_steps, overlap = kw.get("max_steps_per_row"), kw.get("chunk_overlap", 1)
    mix, rewards = kw.get("step_weight_mix", 0.5), kw.get("rewards")
    kept = []
    for t in trajs:
        r = trajectory_reward(t, rewards)
        if not t.steps or (only_success and not t.outcome.success):
            continue
        if min_reward is not None and r < min_reward:
            continue
        if all(s.tool == INVALID_ACTION_TOOL for s in t.steps):
            continue  # only invalid actions: nothing to learn
        kept.append((t, r))
    tools = reference_tools([t for t, _ in kept], kw.get("tools"))
    msgs: list[list[bytes]] = []
    cols: dict[str, list[Any]] = {k: [] for k in sft_module._META_COLUMNS}
    ids, weights, row_tools = [], [], []
    for (t, r), t_tools in zip(kept, tools, strict=True):
        valid = [s for s in t.steps if s.tool != INVALID_ACTION_TOOL]
        w = normalized_step_weights([s.reward for s in valid], mix=mix)
        n = len(valid)
        own = t.metadata.get("system_prompt") if keep_agent_prompt else None
        prompt = own or system_prompt
        spans = (
            [(0, 0, n)]
            if max_steps is None or n <= max_steps
            else chunk_steps(n, max_steps, overlap)
        )
        for c, (ctx, start, end) in enumerate(spans):
            m = trajectory_messages(
                t,
                system_prompt=prompt,
                steps=valid[ctx:end],
                include_final_observation=end < n,
            )
            msgs.append([orjson.dumps(x) for x in m])
            ids.append(t.id)
            row_tools.append([orjson.dumps(x) for x in t_tools])
            for k, v in zip(
                cols, (t.task.task_id, r, t.outcome.success, end - start, c), strict=True
            ):
                cols[k].append(v)
            weights.append([0.0] * (start - ctx) + w[start:end])
    table = pa.table(
        {
            "messages": json_list_array(msgs),
            "tools": json_list_array(row_tools),
            "trajectory_id": pa.array(ids, pa.string()),
            **{
                k: pa.array(v, typ)
                for (k, typ), v in zip(sft_module._META_COLUMNS.items(), cols.values(), strict=True)
            },
            "step_weights": pa.array(weights, pa.list_(pa.float64())),
        }
    )
    names = [x["function"]["name"] for ts in tools for x in ts]
    return table, list(dict.fromkeys(names))


_HOSTILE = ['"', "\\", '\\"', ",", '","', "},{", "{", "}", "[", "]", ":", "\n", "\t", "\r", "\x00",
            "\x1f", "\x7f", "é", "✓", "𝄞", "\u2028", " ", "a", "</tool_call>", "null"]  # fmt: skip


def _text(rng: random.Random, n: int = 12) -> str:
    return "".join(rng.choice(_HOSTILE) for _ in range(rng.randint(0, n)))


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 8 if depth < 2 else 5)
    if kind == 0:
        return rng.randint(-(2**40), 2**40)
    if kind == 1:
        return rng.choice([0.1, -2.5, 1e-7, 1e21, 3.0])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4, 5):
        return _text(rng)
    if kind in (6, 7):
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng, 4): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def generated_corpus(seed: int, n: int = 60) -> list[Trajectory]:
    """Trajectories with every step shape the exporter distinguishes and JSON-hostile text."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        steps = []
        for j in range(rng.choice([1, 1, 2, 3, 5, 9, 20])):
            shape = rng.random()
            action = (
                None
                if shape < 0.1
                else ToolCall(tool=INVALID_ACTION_TOOL, params={"raw": _text(rng), "error": "x"})
                if shape < 0.2
                else ToolCall(
                    tool=rng.choice(["bash", "edit", "respond", "é-tool", 'q"t']),
                    params={_text(rng, 3) or "k": _value(rng) for _ in range(rng.randint(0, 3))},
                    call_id=rng.choice([None, None, f"toolu_{_text(rng, 3)}{j}"]),
                )
            )
            steps.append(
                Step(
                    index=j,
                    thought=_text(rng) if rng.random() < 0.8 else "",
                    action=action,
                    message=rng.choice([None, None, None, "", _text(rng)]),
                    observation=None
                    if rng.random() < 0.1
                    else Observation(output=_text(rng, 40), exit_code=0),
                    reward=rng.choice([None, 0.0, 0.25, 1.0, -0.5, 2.0, 0.5, 0.5, 0.5]),
                )
            )
        if rng.random() < 0.3:  # uniform step rewards: the vectorised weight path
            for s in steps:
                s.reward = rng.choice([0.5, 1.0])
        metadata: dict[str, Any] = {}
        if rng.random() < 0.3:  # the agent's own system prompt
            metadata["system_prompt"] = _text(rng) or "own"
        if rng.random() < 0.15:  # the agent's own tools, as its log recorded them
            metadata["tools"] = [{"name": _text(rng, 3) or "t", "parameters": {"type": "object"}}]
        out.append(
            Trajectory(
                task=TaskInfo(task_id=f"task-{i % 7}", instruction=_text(rng)),
                agent=AgentInfo(name=rng.choice(["a", "a", "b"])),
                steps=steps,
                outcome=Outcome(
                    success=rng.choice([True, True, True, False, None]),
                    score=rng.choice([None, 0.3, 1.0]),
                ),
                source=Source(format=rng.choice(["knowlyr", "knowlyr", "openhands"])),
                metadata=metadata,
            )
        )
    return out


def assert_same(trajs: list[Trajectory], **kw: Any) -> pa.Table:
    kw.setdefault("system_prompt", "You are an agent.")
    got = export_sft(trajs, **kw)
    want, names = reference_table(trajs, **kw)
    table = got.dataset.data.table.combine_chunks()
    assert table.schema.remove_metadata() == want.schema
    for name in want.column_names:  # column by column: a failure names the column
        a, b = table.column(name), want.column(name)
        assert a.equals(b) or repr(a.to_pylist()) == repr(b.to_pylist()), name  # repr: NaN
    assert got.card.params["tools"] == names
    assert len(got.dataset) == want.num_rows
    return want


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"system_prompt": None, "only_success": False},
        {"max_steps_per_row": 2, "chunk_overlap": 1, "only_success": False},
        {"max_steps_per_row": 3, "chunk_overlap": 0, "step_weight_mix": 1.0, "system_prompt": ""},
        {"min_reward": 0.5, "step_weight_mix": 0.0},
        {"keep_agent_prompt": False, "only_success": False},
        {"keep_agent_prompt": True, "system_prompt": None, "max_steps_per_row": 2},
    ],
)
def test_export_equals_the_row_by_row_construction_on_hostile_text(seed, kw):
    assert_same(generated_corpus(seed), **kw)


def test_many_small_batches_and_size_splits_give_the_same_table(monkeypatch):
    trajs = generated_corpus(7, n=80)
    monkeypatch.setattr(sft_module, "_BATCH_ROWS", 5)
    assert_same(trajs, only_success=False, max_steps_per_row=4)
    monkeypatch.setattr(sft_module, "_BATCH_ROWS", 1024)
    monkeypatch.setattr(sft_columns, "_MAX_BYTES", 30_000)  # forces halving of the batch
    want = assert_same(trajs, only_success=False)
    chunks = export_sft(trajs, only_success=False).dataset.data.column("messages").num_chunks
    assert want.num_rows > 40 and chunks > 2


def test_explicit_tools_and_a_reward_mapping_are_kept():
    trajs = generated_corpus(3, n=20)
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    rewards = {t.id: float(i % 3) for i, t in enumerate(trajs)}
    assert_same(trajs, tools=tools, rewards=rewards, min_reward=1.0, only_success=False)


def test_fixture_trajectories_export_identically_and_render_the_same_chat(fixtures_dir):
    from knowlyr.recorder import convert
    from knowlyr.train.models import build_tiny_tokenizer

    trajs = convert([fixtures_dir]).trajectories
    assert len(trajs) >= 5
    assert_same(trajs, only_success=False)
    assert_same(trajs, only_success=False, max_steps_per_row=3)
    res = export_sft(trajs, only_success=False)
    tok = build_tiny_tokenizer(None)
    by_id = {t.id: t for t in trajs}
    for row in res.dataset:
        traj = by_id[row["trajectory_id"]]
        prompt = traj.metadata.get("system_prompt") or res.card.params["system_prompt"]
        want = trajectory_messages(traj, system_prompt=prompt)
        assert row["messages"] == want
        assert tok.apply_chat_template(
            row["messages"], tools=row["tools"], tokenize=False
        ) == tok.apply_chat_template(want, tools=row["tools"], tokenize=False)
        valid = [s for s in traj.steps if s.tool != INVALID_ACTION_TOOL]
        outputs = [s.observation.output for s in valid[:-1] if s.observation and s.action]
        assert [m["content"] for m in row["messages"] if m["role"] == "tool"] == outputs


def test_json_splitting_matches_orjson_element_by_element():
    rng = random.Random(5)
    for _ in range(200):
        strings = [_text(rng) for _ in range(rng.randint(0, 20))]
        assert sft_columns.json_strings(strings).to_pylist() == [orjson.dumps(s) for s in strings]
        objs = [{_text(rng, 3): _value(rng) for _ in range(rng.randint(0, 3))} for _ in range(20)]
        objs += [{"command": "a},{b"}, {"x": [{"y": 1}, {"z": 2}]}]
        got = sft_columns.json_objects(objs).to_pylist()
        assert got == [orjson.dumps(o) for o in objs] + [b""]


def test_nan_and_negative_step_rewards_take_the_general_weight_path():
    steps = [
        Step(index=i, action=ToolCall(tool="t"), observation=Observation(output="o"), reward=r)
        for i, r in enumerate([0.5, math.nan, -1.0])
    ]
    t = Trajectory(task=TaskInfo(task_id="x"), steps=steps, outcome=Outcome(success=True))
    u = t.model_copy(update={"steps": steps[:2]}).rehash()
    assert_same([t, u])


def test_an_empty_export_keeps_the_column_types():
    bad = Trajectory(task=TaskInfo(task_id="x"), outcome=Outcome(success=False))
    res = export_sft([bad])
    want, _ = reference_table([], system_prompt="You are an agent.")
    assert res.dataset.num_rows == 0
    assert res.dataset.data.table.schema.remove_metadata() == want.schema
    assert res.card.rejected == {"no steps": 1}


def test_the_gil_switch_interval_is_restored_after_an_export(monkeypatch):
    import sys

    monkeypatch.setattr(sft_module, "_BATCH_ROWS", 3)  # a worker thread runs
    before = sys.getswitchinterval()
    export_sft(generated_corpus(1, n=10), only_success=False)
    assert sys.getswitchinterval() == before
    with pytest.raises(ExportError, match="record 8"):  # a failing export restores it too
        export_sft([*generated_corpus(1, n=8), object()], only_success=False)  # type: ignore[list-item]
    assert sys.getswitchinterval() == before

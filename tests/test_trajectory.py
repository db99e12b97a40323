from __future__ import annotations

import pickle
from datetime import UTC, datetime

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.trajectory import (
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
    Usage,
    from_chat_messages,
    to_chat_messages,
)


def make_traj(task_id="t1", instruction="Fix the failing test in calc.py", **kw) -> Trajectory:
    steps = [
        Step(
            index=0,
            thought="Look at the file first.",
            action=ToolCall(tool="read_file", params={"path": "calc.py"}),
            observation=Observation(output="def add(a, b):\n    return a - b\n", exit_code=0),
        ),
        Step(
            index=1,
            thought="The operator is wrong.",
            action=ToolCall(
                tool="edit_file", params={"path": "calc.py", "old_str": "a - b", "new_str": "a + b"}
            ),
            observation=Observation(output="edited", exit_code=0),
        ),
        Step(
            index=2,
            action=ToolCall(tool="submit"),
            observation=Observation(output="2 passed", exit_code=0),
        ),
    ]
    return Trajectory(
        task=TaskInfo(task_id=task_id, instruction=instruction, domain="coding"), steps=steps, **kw
    )


def test_id_is_the_content_hash():
    t = make_traj()
    assert len(t.id) == 64 and t.id == t.content_hash()
    assert Trajectory.model_validate(t.model_dump()).id == t.id


def test_timestamps_run_ids_metadata_usage_and_agent_do_not_change_the_hash():
    a = make_traj()
    b = make_traj(
        agent=AgentInfo(name="other", model="m", version="2"),
        metadata={"run_id": "r-123", "host": "x"},
        source=Source(format="openhands", path="/logs/a.json", blob="ab" * 32),
        outcome=Outcome(success=True, score=1.0),
    )
    for s in b.steps:
        s.timestamp = datetime(2026, 1, 1, tzinfo=UTC)
        s.duration_s = 1.5
        s.usage = Usage(prompt_tokens=10, completion_tokens=5, cost_usd=0.01)
        s.reward = 0.7
        s.metadata = {"event_id": 42}
    assert b.rehash().id == a.id


def test_different_tasks_with_identical_steps_do_not_collide():
    assert make_traj(task_id="t1").id != make_traj(task_id="t2").id
    assert make_traj(instruction="A").id != make_traj(instruction="B").id


@pytest.mark.parametrize(
    "change",
    [
        lambda s: setattr(s[0], "thought", "different"),
        lambda s: setattr(s[0].action, "params", {"path": "other.py"}),
        lambda s: setattr(s[0].action, "tool", "cat"),
        lambda s: setattr(s[0].observation, "output", "other"),
        lambda s: setattr(s[0].observation, "exit_code", 1),
        lambda s: s.pop(),
    ],
)
def test_content_changes_change_the_hash(change):
    a, b = make_traj(), make_traj()
    change(b.steps)
    assert b.rehash().id != a.id


def test_param_key_order_does_not_matter():
    a, b = make_traj(), make_traj()
    b.steps[1].action.params = dict(reversed(list(b.steps[1].action.params.items())))
    assert b.rehash().id == a.id


def test_json_round_trip():
    t = make_traj(outcome=Outcome(success=True, tests_passed=2, tests_failed=0))
    t.steps[0].token_ids = [1, 2, 3]
    t.steps[0].logprobs = [-0.1, -0.2, -0.3]
    back = Trajectory.from_json(t.to_json())
    assert back == t


def test_chat_messages_round_trip():
    t = make_traj()
    msgs = to_chat_messages(t, system_prompt="You are a coder.")
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    call = msgs[2]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "read_file"
    assert orjson.loads(call["function"]["arguments"]) == {"path": "calc.py"}
    assert msgs[3]["tool_call_id"] == call["id"]
    back = from_chat_messages(msgs, task=t.task)
    # Chat messages carry no exit codes; everything else survives the round trip.
    for step in t.steps:
        step.observation.exit_code = None
    assert back.id == t.rehash().id
    assert [s.action.params for s in back.steps] == [s.action.params for s in t.steps]


def test_from_chat_messages_handles_parallel_calls_and_plain_replies():
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "query_stats", "arguments": '{"order_id": "X1"}'},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "web_search", "arguments": ""},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "help page"},
        {"role": "tool", "tool_call_id": "a", "content": "shipped"},
        {"role": "assistant", "content": "It has shipped."},
    ]
    t = from_chat_messages(msgs)
    assert t.task.instruction == "Where is my order?"
    assert [s.tool for s in t.steps] == ["query_stats", "web_search", None]
    assert (
        t.steps[0].observation.output == "shipped" and t.steps[1].observation.output == "help page"
    )
    assert t.steps[1].thought == "" and t.steps[2].message == "It has shipped."
    with pytest.raises(ValueError, match="not JSON"):
        from_chat_messages(
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": "x", "arguments": "{bad"}}],
                }
            ]
        )
    with pytest.raises(ValueError, match="message 0 has no 'role'"):
        from_chat_messages([{"content": "x"}])


def test_schema_command_prints_the_json_schema():
    res = CliRunner().invoke(app, ["schema"])
    assert res.exit_code == 0
    schema = orjson.loads(res.stdout)
    assert schema["title"] == "Trajectory"
    assert {"id", "task", "steps", "outcome", "source"} <= set(schema["properties"])
    assert "Step" in schema["$defs"]


def test_loaded_models_share_fields_sets_copied_on_write() -> None:
    # every step given the same fields shares one fields_set (a third of a loaded
    # trajectory's memory otherwise); assigning a field one lacks changes that one only
    doc = {
        "task": {"task_id": "t", "instruction": "do it"},
        "steps": [
            {"index": i, "action": {"tool": "bash", "params": {"command": "ls"}},
             "observation": {"output": "a.py\n"}}
            for i in range(3)
        ],
    }  # fmt: skip
    t, u = (
        Trajectory.from_json(orjson.dumps(doc)),
        Trajectory.model_validate_json(orjson.dumps(doc)),
    )
    s0, s1, s2 = t.steps
    assert (
        s0.__pydantic_fields_set__
        is s1.__pydantic_fields_set__
        is u.steps[0].__pydantic_fields_set__
    )
    assert s0.model_fields_set == {"index", "action", "observation"}
    assert repr(s0.model_fields_set) == repr(set(s0.model_fields_set))
    dumped = s1.model_dump(exclude_unset=True)
    s0.reward = 0.5  # not given: the name goes into s0's own set
    s2.observation.exit_code = 0
    assert s0.model_fields_set == {"index", "action", "observation", "reward"}
    assert s1.model_fields_set == {"index", "action", "observation"}
    assert s1.model_dump(exclude_unset=True) == dumped and "reward" not in dumped
    assert t.steps[1].observation.model_fields_set == {"output"}
    assert u.steps[2].observation.model_dump(exclude_unset=True) == {"output": "a.py\n"}
    c = s1.model_copy(update={"reward": 1.0})
    assert "reward" in c.model_fields_set and "reward" not in s1.model_fields_set
    # a pickled trajectory keeps the sharing safe too
    back = pickle.loads(pickle.dumps(t))
    back.steps[1].duration_s = 2.0
    assert "duration_s" not in back.steps[2].model_fields_set
    assert back.steps[2].model_dump(exclude_unset=True) == t.steps[2].model_dump(exclude_unset=True)

from __future__ import annotations

import orjson
import pytest

from knowlyr.export.messages import messages_json, trajectory_messages
from knowlyr.trajectory import (
    INVALID_ACTION_TOOL,
    Observation,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)


def _traj() -> Trajectory:
    return Trajectory(
        task=TaskInfo(task_id="t", instruction="What is the status of order K3Z9Q?"),
        steps=[
            Step(
                index=0,
                thought="Look it up.",
                action=ToolCall(tool="query_stats", params={"order_id": "K3Z9Q"}),
                observation=Observation(output="order K3Z9Q: shipped", exit_code=0),
            ),
            Step(
                index=1,
                action=ToolCall(tool=INVALID_ACTION_TOOL, params={"raw": "?", "error": "x"}),
                observation=Observation(output="no tool call", exit_code=1),
            ),
            Step(index=2, thought="Thinking", message="aloud"),
            Step(
                index=3,
                action=ToolCall(
                    tool="respond", params={"text": "Order K3Z9Q is shipped — ✓"}, call_id="c9"
                ),
                observation=Observation(output="Reply sent.", exit_code=0),
            ),
        ],
    )


@pytest.mark.parametrize("final", [False, True])
def test_messages_json_equals_the_messages_of_models_and_of_documents(final):
    traj = _traj()
    want = [
        orjson.dumps(m)
        for m in trajectory_messages(traj, system_prompt="S", include_final_observation=final)
    ]
    doc = orjson.loads(traj.to_json())
    for steps in (traj.steps, doc["steps"]):
        got = messages_json(
            traj.task.instruction, steps, system_prompt="S", include_final_observation=final
        )
        assert got == want


def test_messages_cut_invalid_actions_and_pair_call_ids_with_dict_arguments():
    msgs = trajectory_messages(_traj(), system_prompt="S")
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "assistant",
    ]
    assert msgs[2]["tool_calls"][0] == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "query_stats", "arguments": {"order_id": "K3Z9Q"}},
    }
    assert msgs[3]["tool_call_id"] == "call_0"
    assert msgs[4] == {"role": "assistant", "content": "Thinking\naloud"}
    assert msgs[5]["tool_calls"][0]["id"] == "c9"
    assert INVALID_ACTION_TOOL not in orjson.dumps(msgs).decode()

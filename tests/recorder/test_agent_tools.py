"""The tools an agent had, where its log says: kept as ``metadata["tools"]`` by the adapters
and declared on the agent's export rows (a log that does not say gets tools inferred from its
calls, without made-up descriptions)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from knowlyr.export import export_sft
from knowlyr.recorder import Converted, iter_bytes
from knowlyr.trajectory import Trajectory

EDIT = {
    "name": "str_replace_editor",
    "description": "View and edit files.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string", "enum": ["view", "create"]}},
        "required": ["command"],
    },
}
OPENAI_TOOLS = [{"type": "function", "function": EDIT}]


def _one(doc: Any, name: str) -> Trajectory:
    (r,) = list(iter_bytes(orjson.dumps(doc), path=name, redact=False))
    assert isinstance(r, Converted), r
    return r.trajectory


def _openai_chat() -> dict[str, Any]:
    call = {"name": "str_replace_editor", "arguments": '{"command": "view"}'}
    return {
        "instance_id": "demo__demo-1",
        "tools": OPENAI_TOOLS,
        "messages": [
            {"role": "system", "content": "You edit files."},
            {"role": "user", "content": "Fix it"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_abc", "type": "function", "function": call}]},
            {"role": "tool", "tool_call_id": "call_abc", "content": "a.py"},
            {"role": "assistant", "content": "Done."},
        ],
    }  # fmt: skip


def _anthropic() -> dict[str, Any]:
    tool = {"name": EDIT["name"], "description": EDIT["description"]}
    return {
        "system": "You edit files.",
        "tools": [{**tool, "input_schema": EDIT["parameters"]}],
        "messages": [
            {"role": "user", "content": "Fix it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
             "name": "str_replace_editor", "input": {"command": "view"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
             "content": "a.py"}]},
        ],
    }  # fmt: skip


def _openhands() -> list[dict[str, Any]]:
    return [
        {"id": 0, "source": "agent", "action": "system",
         "args": {"content": "You are OpenHands.", "tools": OPENAI_TOOLS}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Fix it"}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls"}},
        {"id": 3, "source": "agent", "observation": "run", "content": "a.py", "cause": 2,
         "extras": {"command": "ls", "exit_code": 0}},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "name"),
    [(_openai_chat(), "chat.json"), (_anthropic(), "claude.json"), (_openhands(), "oh.json")],
    ids=["openai_chat", "anthropic", "openhands"],
)
def test_a_logs_tools_are_kept_and_declared_on_its_rows(doc, name):
    t = _one(doc, name)
    assert t.metadata["tools"] == OPENAI_TOOLS
    assert t.metadata["system_prompt"]
    row = export_sft([t], only_success=False).dataset[0]
    assert row["tools"] == OPENAI_TOOLS  # not the calls' inferred shapes
    assert row["messages"][0] == {"role": "system", "content": t.metadata["system_prompt"]}


def test_a_log_without_tools_declares_the_inferred_calls_without_descriptions():
    doc = _openai_chat()
    del doc["tools"]
    t = _one(doc, "chat.json")
    assert "tools" not in t.metadata
    (tool,) = export_sft([t], only_success=False).dataset[0]["tools"]
    assert tool == {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }

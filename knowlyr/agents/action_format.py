"""The action text format: the one place that says what a model writes to act.

The exports' chat messages (:mod:`knowlyr.export.messages`) render through the chat template
to exactly the text :func:`render_action` writes, the text a model is trained on, and the
inference bridge parses what the model generates back into an env action with
:func:`parse_action_text`. Both directions live here so they cannot drift apart.

The format is Qwen-style tool calling, as TRL's ``qwen2_5`` chat template renders an
assistant message with ``tool_calls``::

    <optional thought>
    <tool_call>
    {"name": "query_stats", "arguments": {"order_id": "K3Z9Q"}}
    </tool_call>

Tool-call ``arguments`` are kept as **dicts** in the messages (the template applies ``tojson``
to them; a JSON string would be quoted twice). The JSON is ``json.dumps`` with its default
separators and ``ensure_ascii=False``, exactly like transformers' ``tojson`` filter.

Example:
    >>> from knowlyr.agents.action_format import render_action, parse_action_text
    >>> text = render_action({"tool": "respond", "params": {"text": "shipped"}}, thought="done")
    >>> print(text)
    done
    <tool_call>
    {"name": "respond", "arguments": {"text": "shipped"}}
    </tool_call>
    >>> parse_action_text(text)
    {'tool': 'respond', 'params': {'text': 'shipped'}, 'thought': 'done'}
"""

from __future__ import annotations

import json
from typing import Any

from knowlyr.trajectory import INVALID_ACTION_TOOL

__all__ = [
    "END_OF_TURN",
    "INVALID_ACTION_TOOL",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "action_to_message",
    "parse_action_text",
    "render_action",
]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
END_OF_TURN = "<|im_end|>"
# INVALID_ACTION_TOOL (defined in knowlyr.trajectory, re-exported here): the tool name of the
# action returned for text that holds no parseable tool call. No env offers it, so the env
# answers with an error observation: a bad generation is data, not a crash.

_DECODER = json.JSONDecoder()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def action_to_message(action: dict[str, Any], *, thought: str = "") -> dict[str, Any]:
    """The assistant chat message for an env action ``{"tool": str, "params": dict}``.

    ``thought`` (or ``action["thought"]``) becomes the message content.
    """
    thought = thought or action.get("thought") or ""
    return {
        "role": "assistant",
        "content": thought,
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": action["tool"], "arguments": dict(action.get("params") or {})},
            }
        ],
    }


def render_action(action: dict[str, Any], *, thought: str = "") -> str:
    """The text a model generates for ``action`` after the generation prompt (no end token).

    It is byte for byte what the chat template renders inside the assistant turn.
    """
    thought = thought or action.get("thought") or ""
    call = (
        f'{TOOL_CALL_START}\n{{"name": "{action["tool"]}", "arguments": '
        f"{_dumps(dict(action.get('params') or {}))}}}\n{TOOL_CALL_END}"
    )
    return f"{thought}\n{call}" if thought else call


def parse_action_text(text: str, *, text_tool: str | None = None) -> dict[str, Any]:
    """Parse generated assistant text into an env action ``{"tool", "params", "thought"}``.

    The first ``<tool_call>`` block wins; text before it is the thought. Anything after the
    end-of-turn token is ignored.

    Args:
        text: the decoded generation (decode with ``skip_special_tokens=False``).
        text_tool: when the text holds no tool call, send it as ``{text_tool: {"text": ...}}``
            (e.g. ``"respond"``). Without it such text becomes an :data:`INVALID_ACTION_TOOL`
            action carrying the raw text and the reason, which the env reports as an error.
    """
    text = text.split(END_OF_TURN, 1)[0]
    start = text.find(TOOL_CALL_START)
    if start < 0:
        bare = text.strip()
        if text_tool is not None:
            return {"tool": text_tool, "params": {"text": bare}, "thought": ""}
        return _invalid(bare, "no <tool_call>...</tool_call> block in the model output")
    thought = text[:start].strip()
    body = text[start + len(TOOL_CALL_START) :].lstrip()
    try:  # decode the JSON object itself: its strings may contain "</tool_call>"
        call, end = _DECODER.raw_decode(body)
    except json.JSONDecodeError as e:
        return _invalid(text.strip(), f"tool call is not valid JSON: {e}")
    if not body[end:].lstrip().startswith(TOOL_CALL_END) and body[end:].strip():
        return _invalid(text.strip(), "tool call JSON is not followed by </tool_call>")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return _invalid(text.strip(), 'tool call needs {"name": str, "arguments": object}')
    args = call.get("arguments", {})
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return _invalid(text.strip(), "tool call arguments are a string that is not JSON")
    if not isinstance(args, dict):
        return _invalid(
            text.strip(), f"tool call arguments must be an object, got {type(args).__name__}"
        )
    return {"tool": call["name"], "params": args, "thought": thought}


def _invalid(raw: str, reason: str) -> dict[str, Any]:
    return {"tool": INVALID_ACTION_TOOL, "params": {"raw": raw, "error": reason}, "thought": ""}

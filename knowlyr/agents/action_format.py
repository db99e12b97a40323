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

:func:`parse_action_text` also reads the calls pretrained models write in their own formats:
SmolLM2's ``<tool_call>[{...}]</tool_call>`` list, Llama 3.1's bare ``{"name": ...,
"parameters": {...}}``, a fenced ```` ```json ```` block. Anything else is an
:data:`INVALID_ACTION_TOOL` action whose ``params["error"]`` says what was wrong (the agent
tells the model on its next turn).

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
import re
from typing import Any

from knowlyr.trajectory import INVALID_ACTION_TOOL

__all__ = [
    "END_OF_TURN",
    "END_TOKENS",
    "INVALID_ACTION_TOOL",
    "NO_CALL_ERROR",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "action_to_message",
    "parse_action_text",
    "render_action",
]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
END_OF_TURN = "<|im_end|>"
#: Tokens that end a model's turn (ChatML, Llama 3, plain end of text): text after the first
#: one is not part of the reply.
END_TOKENS = (END_OF_TURN, "<|eot_id|>", "<|eom_id|>", "<|endoftext|>")
#: What the reason of an :data:`INVALID_ACTION_TOOL` action says when the text has no call.
NO_CALL_ERROR = (
    "no tool call in the model output (no <tool_call>...</tool_call> block, "
    "```json block or JSON object with a name)"
)
_PYTHON_TAG = "<|python_tag|>"
_FENCE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n(.*?)```", re.S)
_CALL_FENCES = ("", "json", "tool_call", "tool_code")
_MAX_BARE_TRIES = 64
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

    Reads a tool call the ways pretrained models write one (the first call wins; the text
    before it is the thought; anything after an end-of-turn token is ignored):

    - a ``<tool_call>`` block holding ``{"name": ..., "arguments": {...}}`` (Qwen, Hermes,
      knowlyr's own format) or a JSON list of such calls (SmolLM2:
      ``<tool_call>[{"name": ..., "arguments": ...}]</tool_call>``);
    - a fenced code block (```` ```json ... ``` ````) holding such an object or list;
    - a bare JSON object with ``name`` and ``arguments`` (or Llama 3.1's ``parameters``),
      optionally after ``<|python_tag|>``; an object without them is just text.

    ``arguments`` may also be a JSON string (some models emit that).

    Args:
        text: the decoded generation (decode with ``skip_special_tokens=False``).
        text_tool: when the text holds no tool call, send it as ``{text_tool: {"text": ...}}``
            (e.g. ``"respond"``). Without it such text becomes an :data:`INVALID_ACTION_TOOL`
            action carrying the raw text and the reason, which the env reports as an error.
    """
    cut = min((i for i in (text.find(e) for e in END_TOKENS) if i >= 0), default=len(text))
    text = text[:cut].replace(_PYTHON_TAG, "")
    start = text.find(TOOL_CALL_START)
    if start >= 0:
        body = text[start + len(TOOL_CALL_START) :].lstrip()
        try:  # decode the JSON itself: its strings may contain "</tool_call>"
            call, end = _DECODER.raw_decode(body)
        except json.JSONDecodeError as e:
            return _invalid(text.strip(), f"tool call is not valid JSON: {e}")
        if not body[end:].lstrip().startswith(TOOL_CALL_END) and body[end:].strip():
            return _invalid(text.strip(), "tool call JSON is not followed by </tool_call>")
        return _action(call, text[:start].strip(), text)
    for fence in _FENCE.finditer(text):
        lang, body = fence.group(1).lower(), fence.group(2).strip()
        if lang not in _CALL_FENCES or body[:1] not in ("{", "["):
            continue  # a code block, not a call
        try:
            call = json.loads(body)
        except json.JSONDecodeError as e:
            return _invalid(text.strip(), f"the fenced tool call is not valid JSON: {e}")
        return _action(call, text[: fence.start()].strip(), text)
    bare = _bare_call(text)
    if bare is not None:
        call, at = bare
        return _action(call, text[:at].strip(), text)
    if text_tool is not None:
        return {"tool": text_tool, "params": {"text": text.strip()}, "thought": ""}
    return _invalid(text.strip(), NO_CALL_ERROR)


def _bare_call(text: str) -> tuple[dict[str, Any], int] | None:
    """The first JSON object in ``text`` that looks like a call (a ``name`` and ``arguments``
    or ``parameters``), and where it starts."""
    at = text.find("{")
    for _ in range(_MAX_BARE_TRIES):
        if at < 0:
            return None
        try:
            obj, _end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            obj = None
        fn = obj.get("function") if isinstance(obj, dict) else None
        call = fn if isinstance(fn, dict) else obj  # OpenAI's {"type": "function", "function": ...}
        if (
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and ("arguments" in call or "parameters" in call)
        ):
            return obj, at
        at = text.find("{", at + 1)
    return None


def _action(call: Any, thought: str, text: str) -> dict[str, Any]:
    """The env action for a decoded call (an object, or a list whose first item is one)."""
    if isinstance(call, list):
        if not call:
            return _invalid(text.strip(), "the tool call list is empty")
        call = call[0]
    if isinstance(call, dict) and isinstance(call.get("function"), dict):
        call = call["function"]  # OpenAI's {"type": "function", "function": {...}}
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return _invalid(text.strip(), 'tool call needs {"name": str, "arguments": object}')
    args = call.get("arguments", call.get("parameters", {}))
    if args is None:
        args = {}
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

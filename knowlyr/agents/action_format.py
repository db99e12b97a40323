"""The action text format: the one place that says what a model writes to act.

Export renders trajectories into chat messages with this module, the chat template turns them
into the exact text a model is trained on, and the inference bridge parses what the model
generates back into an env action with :func:`parse_action_text`. Both directions live here so
they cannot drift apart.

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
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from knowlyr.trajectory import INVALID_ACTION_TOOL, Step, Trajectory

__all__ = [
    "ASSISTANT_JSON",
    "ASSISTANT_TEXT_JSON",
    "END_OF_TURN",
    "INVALID_ACTION_TOOL",
    "SYSTEM_JSON",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "TOOL_JSON",
    "USER_JSON",
    "action_to_message",
    "messages_json",
    "parse_action_text",
    "render_action",
    "step_to_messages",
    "trajectory_messages_json",
    "trajectory_to_messages",
]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
END_OF_TURN = "<|im_end|>"
# INVALID_ACTION_TOOL (defined in knowlyr.trajectory, re-exported here): the tool name of the
# action returned for text that holds no parseable tool call. No env offers it, so the env
# answers with an error observation: a bad generation is data, not a crash.

#: The compact JSON (``orjson.dumps``) of each kind of training message, with ``%b`` where a
#: JSON-encoded field goes: :func:`trajectory_messages_json` fills them per message and the SFT
#: export assembles whole Arrow columns of messages from their fragments.
SYSTEM_JSON = b'{"role":"system","content":%b}'
USER_JSON = b'{"role":"user","content":%b}'
#: An assistant turn without a tool call (content only).
ASSISTANT_TEXT_JSON = b'{"role":"assistant","content":%b}'
#: An assistant turn with one tool call: content, tool name, arguments (a JSON object).
ASSISTANT_JSON = (
    b'{"role":"assistant","content":%b,"tool_calls":'
    b'[{"type":"function","function":{"name":%b,"arguments":%b}}]}'
)
#: A tool's answer: tool name, content.
TOOL_JSON = b'{"role":"tool","name":%b,"content":%b}'
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


def step_to_messages(step: Step, *, include_observation: bool = True) -> list[dict[str, Any]]:
    """The assistant message (and the tool answer) for one trajectory step."""
    if step.action is None:
        content = step.thought
        if step.message is not None:
            content = f"{content}\n{step.message}" if content else step.message
        return [{"role": "assistant", "content": content}]
    msg = action_to_message(
        {"tool": step.action.tool, "params": step.action.params}, thought=step.thought
    )
    if step.message:
        msg["content"] = f"{msg['content']}\n{step.message}" if msg["content"] else step.message
    out = [msg]
    if include_observation and step.observation is not None:
        out.append({"role": "tool", "name": step.action.tool, "content": step.observation.output})
    return out


def trajectory_to_messages(
    traj: Trajectory,
    *,
    system_prompt: str | None = None,
    steps: list[Step] | None = None,
    include_final_observation: bool = False,
) -> list[dict[str, Any]]:
    """Training messages: system, user task, then each step's assistant turn and tool answer.

    Args:
        traj: the trajectory.
        system_prompt: the system message; omitted when ``None``.
        steps: render these steps instead of ``traj.steps`` (chunking uses this).
        include_final_observation: keep the tool answer after the last step. Off by default:
            nothing is learned from it and it only costs tokens.
    """
    msgs: list[dict[str, Any]] = []
    if system_prompt:
        msgs.append({"role": "system", "content": system_prompt})
    msgs.append({"role": "user", "content": traj.task.instruction})
    steps = traj.steps if steps is None else steps
    last = len(steps) - 1
    for i, step in enumerate(steps):
        msgs.extend(
            step_to_messages(step, include_observation=include_final_observation or i < last)
        )
    return msgs


def trajectory_messages_json(
    traj: Trajectory,
    *,
    system_prompt: str | None = None,
    steps: list[Step] | None = None,
    include_final_observation: bool = False,
) -> list[bytes]:
    """:func:`trajectory_to_messages` with each message already JSON-encoded (orjson bytes).

    The same messages, built without intermediate dicts: the export hot path. A test checks
    it equals ``[orjson.dumps(m) for m in trajectory_to_messages(...)]``.
    """
    return messages_json(
        traj.task.instruction,
        traj.steps if steps is None else steps,
        system_prompt=system_prompt,
        include_final_observation=include_final_observation,
    )


def messages_json(
    instruction: str,
    steps: Sequence[Step | Mapping[str, Any]],
    *,
    system_prompt: str | None = None,
    include_final_observation: bool = False,
) -> list[bytes]:
    """:func:`trajectory_messages_json` of a task instruction and steps given as models or as
    step documents (the validated JSON of a step, as the store keeps it): both are read as
    plain dicts, so an export of documents builds no model."""
    dumps = orjson.dumps
    out: list[bytes] = []
    if system_prompt:
        out.append(SYSTEM_JSON % dumps(system_prompt))
    out.append(USER_JSON % dumps(instruction))
    last = len(steps) - 1
    for i, s in enumerate(steps):
        d = s if type(s) is dict else s.__dict__
        a, o, m = d.get("action"), d.get("observation"), d.get("message")
        content = d["thought"]
        if a is None:  # a text turn
            if m is not None:
                content = f"{content}\n{m}" if content else m
            out.append(ASSISTANT_TEXT_JSON % dumps(content))
            continue
        if m:
            content = f"{content}\n{m}" if content else m
        ad = a if type(a) is dict else a.__dict__
        tool = dumps(ad["tool"])
        out.append(ASSISTANT_JSON % (dumps(content), tool, dumps(ad["params"])))
        if o is not None and (include_final_observation or i < last):
            output = o["output"] if type(o) is dict else o.output
            out.append(TOOL_JSON % (tool, dumps(output)))
    return out


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

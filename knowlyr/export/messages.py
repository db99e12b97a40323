"""The chat messages of a trajectory as the exports write them, and the tools and system
prompt each row declares.

A trajectory becomes: the system prompt, the user task, then per step the assistant turn
(its thought as ``content`` and one tool call) and the tool's answer. What the exports add to
the action format of :mod:`knowlyr.agents.action_format` (which decides the text a model
writes; these messages render to exactly that text):

- **Tool-call ids.** Every call carries an ``id`` (the producer's ``call_id``, else
  ``call_<step index>``) and the tool message that answers it names it in ``tool_call_id``,
  as OpenAI-style chat data, TRL and chat templates expect.
- **Invalid actions are not demonstrations.** A step whose action is
  :data:`~knowlyr.trajectory.INVALID_ACTION_TOOL` (a reply the harness could not parse: no
  command, two commands) stays in the trajectory, but no export renders it: it is cut from the
  conversation with the harness's answer to it, so no trainer learns the malformed reply and
  no row calls or declares a fake tool. :func:`is_invalid` says which steps those are.
- **The agent's own system prompt** (``metadata["system_prompt"]``, kept by the recorder's
  adapters) is the row's system message unless the caller asks for another
  (:func:`system_prompt_of`).
- **The agent's own tools.** :func:`declared_tools` gives the schemas a trajectory's agent
  had when the source says: ``metadata["tools"]`` (what a log or a rollout recorded), else
  the fixed tools of the agent that writes the log format (e.g. mini-swe-agent's one
  ``bash`` tool, :attr:`knowlyr.recorder.base.Adapter.agent_tools`).

Each message is written as compact JSON from the byte templates below (``%b`` where a
JSON-encoded field goes); the SFT export assembles whole Arrow columns from their fragments
(:mod:`knowlyr.export.sft_columns`), and :func:`trajectory_messages` is the same messages as
dicts (the reference the tests compare the columns with).

Example:
    >>> from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory
    >>> t = Trajectory(task=TaskInfo(task_id="x", instruction="list files"), steps=[
    ...     Step(index=0, action=ToolCall(tool="bash", params={"command": "ls"}),
    ...          observation=Observation(output="a.py")),
    ...     Step(index=1, action=ToolCall(tool="bash", params={"command": "cat a.py"}))])
    >>> [m["role"] for m in trajectory_messages(t)]
    ['user', 'assistant', 'tool', 'assistant']
    >>> trajectory_messages(t)[2]["tool_call_id"]
    'call_0'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import orjson

from knowlyr.trajectory import INVALID_ACTION_TOOL, Step, Trajectory

__all__ = [
    "ASSISTANT_CALL_JSON",
    "ASSISTANT_TEXT_JSON",
    "SYSTEM_JSON",
    "TOOL_JSON",
    "USER_JSON",
    "call_id",
    "declared_tools",
    "format_tools",
    "is_invalid",
    "messages_json",
    "system_prompt_of",
    "trajectory_messages",
    "valid_steps",
]

SYSTEM_JSON = b'{"role":"system","content":%b}'
USER_JSON = b'{"role":"user","content":%b}'
#: An assistant turn without a tool call (content only).
ASSISTANT_TEXT_JSON = b'{"role":"assistant","content":%b}'
#: An assistant turn with one tool call: call id, tool name, arguments (a JSON object), content.
ASSISTANT_CALL_JSON = (
    b'{"role":"assistant","tool_calls":[{"id":%b,"type":"function",'
    b'"function":{"name":%b,"arguments":%b}}],"content":%b}'
)
#: A tool's answer: the id of the call it answers, tool name, content.
TOOL_JSON = b'{"role":"tool","tool_call_id":%b,"name":%b,"content":%b}'


def _d(x: Any) -> dict[str, Any]:
    return x if type(x) is dict else x.__dict__


def is_invalid(action: Any) -> bool:
    """Whether ``action`` (a :class:`~knowlyr.trajectory.ToolCall`, its document or ``None``)
    is a reply the harness could not parse (:data:`~knowlyr.trajectory.INVALID_ACTION_TOOL`)."""
    return action is not None and _d(action)["tool"] == INVALID_ACTION_TOOL


def valid_steps(steps: Sequence[Any]) -> list[Any]:
    """``steps`` (models or documents) without the invalid actions (see :func:`is_invalid`)."""
    return [s for s in steps if not is_invalid(_d(s).get("action"))]


def call_id(step: Any) -> str:
    """The id of a step's tool call: the producer's ``call_id``, else ``call_<index>``."""
    d = _d(step)
    given = _d(d["action"]).get("call_id")
    return given if given else f"call_{d['index']}"


def system_prompt_of(
    trajectory: Mapping[str, Any], fallback: str | None, *, keep_agent_prompt: bool = True
) -> str | None:
    """The system message of a trajectory's rows: the agent's own
    (``metadata["system_prompt"]``) when ``keep_agent_prompt`` and it has one, else
    ``fallback`` (``None`` or ``""``: no system message).

    ``trajectory`` is a trajectory document or a model's ``__dict__``."""
    if keep_agent_prompt:
        md = trajectory.get("metadata")
        own = md.get("system_prompt") if md else None
        if own and isinstance(own, str):
            return own
    return fallback or None


def declared_tools(trajectory: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The tool schemas the trajectory's agent had, when its source says (``None`` when not).

    ``metadata["tools"]`` when it is a list of schemas (OpenAI function format, or bare
    ``{"name", "parameters"}`` functions, which are wrapped), else the fixed tools of the agent
    that writes the trajectory's log format (:attr:`knowlyr.recorder.base.Adapter.agent_tools`).
    The invalid-action tool is never among them. ``trajectory`` is a document or a model's
    ``__dict__``.
    """
    md = trajectory.get("metadata")
    tools = md.get("tools") if md else None
    if isinstance(tools, list) and tools and all(isinstance(t, dict) for t in tools):
        return format_tools(tools)
    source = trajectory.get("source")
    fmt = _d(source).get("format") if source is not None else None
    return _format_tools(fmt) if fmt else None


def format_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` as OpenAI function schemas (``{"type": "function", "function": {...}}``),
    without the invalid-action tool; a bare function (``{"name", "parameters"}``) is wrapped."""
    out = []
    for t in tools:
        fn = t.get("function") if t.get("type") == "function" else t
        if not isinstance(fn, dict) or fn.get("name") == INVALID_ACTION_TOOL:
            continue
        out.append(t if fn is not t else {"type": "function", "function": t})
    return out


@lru_cache(maxsize=64)
def _format_tools(fmt: str) -> list[dict[str, Any]] | None:
    if fmt == "knowlyr":  # our own rollouts: their tools are in the metadata or inferred
        return None
    from knowlyr.errors import UnknownFormatError
    from knowlyr.recorder.base import get_adapter

    try:
        tools = get_adapter(fmt).agent_tools
    except UnknownFormatError:
        return None
    return format_tools([dict(t) for t in tools]) if tools else None


def trajectory_messages(
    traj: Trajectory,
    *,
    system_prompt: str | None = None,
    steps: Sequence[Step] | None = None,
    include_final_observation: bool = False,
) -> list[dict[str, Any]]:
    """The export's messages of ``traj`` (or of ``steps``) as dicts: what
    :func:`messages_json` writes. Invalid actions are cut with their answers."""
    msgs: list[dict[str, Any]] = []
    if system_prompt:
        msgs.append({"role": "system", "content": system_prompt})
    msgs.append({"role": "user", "content": traj.task.instruction})
    kept = valid_steps(traj.steps if steps is None else steps)
    for i, s in enumerate(kept):
        content = s.thought
        if s.action is None:
            if s.message is not None:
                content = f"{content}\n{s.message}" if content else s.message
            msgs.append({"role": "assistant", "content": content})
            continue
        if s.message:
            content = f"{content}\n{s.message}" if content else s.message
        cid = call_id(s)
        call = {"name": s.action.tool, "arguments": dict(s.action.params)}
        msgs.append(
            {
                "role": "assistant",
                "tool_calls": [{"id": cid, "type": "function", "function": call}],
                "content": content,
            }
        )
        if s.observation is not None and (include_final_observation or i < len(kept) - 1):
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": cid,
                    "name": s.action.tool,
                    "content": s.observation.output,
                }
            )
    return msgs


def messages_json(
    instruction: str,
    steps: Sequence[Step | Mapping[str, Any]],
    *,
    system_prompt: str | None = None,
    include_final_observation: bool = False,
) -> list[bytes]:
    """:func:`trajectory_messages` of a task instruction and steps (models or step documents,
    both read as plain dicts), each message JSON-encoded (orjson bytes)."""
    dumps = orjson.dumps
    out: list[bytes] = []
    if system_prompt:
        out.append(SYSTEM_JSON % dumps(system_prompt))
    out.append(USER_JSON % dumps(instruction))
    kept = valid_steps(steps)
    last = len(kept) - 1
    for i, s in enumerate(kept):
        d = _d(s)
        a, o, m = d.get("action"), d.get("observation"), d.get("message")
        content = d["thought"]
        if a is None:  # a text turn
            if m is not None:
                content = f"{content}\n{m}" if content else m
            out.append(ASSISTANT_TEXT_JSON % dumps(content))
            continue
        if m:
            content = f"{content}\n{m}" if content else m
        ad = _d(a)
        tool, cid = dumps(ad["tool"]), dumps(call_id(d))
        out.append(ASSISTANT_CALL_JSON % (cid, tool, dumps(ad["params"]), dumps(content)))
        if o is not None and (include_final_observation or i < last):
            out.append(TOOL_JSON % (cid, tool, dumps(_d(o)["output"])))
    return out

"""OpenHands event logs (``trajs/*.json``), and the event conversion that resolver /
evaluation ``output.jsonl`` rows share (their adapter: :mod:`.openhands_output`).

An event log is a JSON array of actions and observations, or the same events one per line
(``.jsonl``, a whole file is one trajectory)::

    {"id": 3, "timestamp": "...", "source": "agent", "action": "run", "args": {"command": "ls", "thought": ...},
     "tool_call_metadata": {"function_name": "execute_bash", "model_response": {..., "usage": {...}}}}
    {"id": 4, "cause": 3, "observation": "run", "content": "...", "extras": {"metadata": {"exit_code": 0}}}

Older logs (resolver ``output.jsonl``) write the same events flat (``{"action": "run",
"command": ..., "thought": ...}``, ``{"observation": "run", "content": ..., "exit_code": 0}``)
without ids, or as ``[action, observation]`` pairs. Observations are matched to their
action by ``cause``, else to the earliest action still waiting for one.

Mapping: ``run`` -> ``bash {"command"}``; ``run_ipython`` -> ``run_ipython {"code"}``;
``str_replace_editor`` calls keep ``command, path, old_str, new_str, file_text, insert_line,
view_range`` (from the model's own tool-call arguments when the log has them); ``read`` /
``write`` / ``edit`` keep ``path`` (+ ``content``, ``start``, ``end``); ``finish`` ends the
episode (its message and ``task_completed`` go to the outcome); agent ``message`` actions
become message steps, and a user's reply becomes that step's observation.

An agent message whose text holds the action (older CodeAct runs: ``<execute_bash>`` /
``<execute_ipython>`` tags, or a fenced ```` ```bash ```` block in a run that never calls a
tool) is an action step, as in the mini-swe-agent adapter: one block is ``bash {"command"}``
(``run_ipython {"code"}``), several an ``invalid_action``; the user's reply is its observation.

The outcome is what the log carries: an output row's ``test_result`` (the SWE-bench report's
``resolved``, else ``success``, as the original knowlyr recorder read it), else the finish
action's ``outputs.test_result`` / ``outputs.success``, else its ``task_completed``. The model
is ``metadata.llm_config.model``, else the model that answered a tool call
(``tool_call_metadata.model_response.model``), else the one an event declares
(``extras.model`` or its own ``model``).
"""

from __future__ import annotations

import hashlib
import re
from abc import abstractmethod
from datetime import datetime
from types import NoneType
from typing import Any

import orjson

from knowlyr.recorder.base import (
    Adapter,
    _build,
    agent_info,
    as_dict,
    as_float,
    as_int,
    as_list,
    as_str,
    fields_of,
    observation,
    outcome,
    parse_time,
    register_adapter,
    task,
    tool_call,
    trajectory,
    trajectory_document,
    usage,
)
from knowlyr.recorder.text_actions import BASH_BLOCK, parse_command_output, parse_text_action
from knowlyr.trajectory import INVALID_ACTION_TOOL, Observation, Step, ToolCall, Trajectory, Usage

_fromiso = datetime.fromisoformat

__all__ = ["OpenHandsEventsAdapter", "convert_events"]

_META = frozenset(
    {
        "id",
        "timestamp",
        "source",
        "message",
        "cause",
        "tool_call_metadata",
        "timeout",
        "llm_metrics",
        "action",
        "observation",
        "args",
        "extras",
        "hidden",
        "security_risk",
    }
)
_SKIP_ACTIONS = frozenset(
    {"system", "recall", "change_agent_state", "null", "condensation", "condensation_request"}
)
_SKIP_OBS = frozenset({"agent_state_changed", "null", "recall", "condensation"})
_EDITOR_KEYS = ("command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range")
_FILE_KEYS = ("path", "content", "start", "end")


def _is_event(e: Any) -> bool:
    return isinstance(e, dict) and ("action" in e or "observation" in e)


# keys an OpenHands event has besides action / observation (a JSONL line is one event)
_EVENT_KEYS = ("source", "args", "extras", "cause", "id", "timestamp", "message")


def _is_event_line(x: Any) -> bool:
    return _is_event(x) and any(k in x for k in _EVENT_KEYS)


def _is_event_list(x: Any) -> bool:
    if not isinstance(x, list) or not x:
        return False
    for e in x[:3]:
        if isinstance(e, list) and e and all(_is_event(p) for p in e):
            continue
        if not _is_event(e):
            return False
    return True


def _flatten(history: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in history:
        if isinstance(e, list):  # [action, observation] pairs (older OpenHands)
            out.extend(p for p in e if isinstance(p, dict) and p)
        elif isinstance(e, dict):
            out.append(e)
    return out


def _as_dict(x: Any) -> dict[str, Any]:
    if isinstance(x, dict):
        return x
    if isinstance(x, str) and x.startswith("{"):
        try:
            v = orjson.loads(x)
        except orjson.JSONDecodeError:
            return {}
        return v if isinstance(v, dict) else {}
    return {}


def _args(e: dict[str, Any], key: str) -> dict[str, Any]:
    """``args`` / ``extras`` of a new-style event, or the event's own fields for flat events."""
    v = e.get(key)
    if v is not None:
        return _as_dict(v)
    skip = _META if key == "args" else _META | {"content"}
    return {k: v for k, v in e.items() if k not in skip}


def _tool_args(tcm: dict[str, Any]) -> dict[str, Any] | None:
    """The model's own arguments for this call, from ``tool_call_metadata.model_response``."""
    resp = tcm.get("model_response")
    if not isinstance(resp, dict):
        return None
    call_id = tcm.get("tool_call_id")
    for ch in as_list(resp.get("choices")):
        msg = as_dict(ch.get("message") if isinstance(ch, dict) else None)
        for call in as_list(msg.get("tool_calls")):
            if isinstance(call, dict) and (call_id is None or call.get("id") == call_id):
                fn = as_dict(call.get("function"))
                a = _as_dict(fn.get("arguments")) if isinstance(fn, dict) else {}
                return a
    return None


def _pick(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``d``'s values under ``keys`` that are neither None nor empty text (a loop: half the
    time of a comprehension)."""
    out = {}
    for k in keys:
        v = d.get(k)
        if v is not None and v != "":
            out[k] = v
    return out


def _action(name: str, args: dict[str, Any], tcm: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fn = tcm.get("function_name") if tcm else None
    if name == "run":
        return "bash", {"command": as_str(args.get("command"))}
    if name == "run_ipython":
        return "run_ipython", {"code": as_str(args.get("code"))}
    if fn == "str_replace_editor" or (
        name in ("read", "edit") and args.get("impl_source") == "oh_aci"
    ):
        params = _tool_args(tcm) if tcm else None
        if not params:
            params = _pick(args, _EDITOR_KEYS)
            if "command" not in params:
                if name == "read":
                    params["command"] = "view"
                elif args.get("old_str"):
                    params["command"] = "str_replace"
                else:
                    params["command"] = "create"
                    if "file_text" not in params and args.get("content"):
                        params["file_text"] = args["content"]
        return "str_replace_editor", params
    if name in ("read", "write", "edit"):
        return name, _pick(args, _FILE_KEYS)
    if name == "browse":
        return "browse", _pick(args, ("url",))
    if name == "browse_interactive":
        return "browse_interactive", _pick(args, ("browser_actions",))
    if name == "think":
        return "think", {"thought": as_str(args.get("thought"))}
    if name == "call_tool_mcp":
        a = args.get("arguments")
        return as_str(args.get("name")) or "call_tool_mcp", a if isinstance(a, dict) else {}
    if name == "delegate":
        return "delegate", _pick(args, ("agent", "inputs"))
    params = {
        k: v
        for k, v in args.items()
        if k not in _META
        and k
        not in (
            "thought",
            "impl_source",
            "is_confirmed",
            "action_risk",
            "keep_prompt",
            "confirmation_state",
            "security_risk",
        )
    }
    return fn or name, params


_ABSENT = object()
_INF = float("inf")


def _time(x: Any) -> datetime | None:
    """:func:`parse_time` with the common case (ISO text) first."""
    if type(x) is str:
        try:
            return _fromiso(x)
        except ValueError:
            return None
    return None if x is None else parse_time(x)


# the keys of an event's extras that :func:`_declared` reads
_DECLARING = frozenset({"model", "agent_class", "instance_id", "max_iterations"})


def _declared(e: dict[str, Any], info: dict[str, Any]) -> None:
    """What an event declares about the run (the fields the original knowlyr recorder read):
    the model (``extras.model`` or the event's own ``model``; the last one wins, as there),
    and ``extras.agent_class``, ``extras.instance_id``, ``extras.max_iterations``."""
    x = e.get("extras")
    x = x if type(x) is dict else {}
    model = x.get("model") or e.get("model")
    if type(model) is str and model:
        info["declared_model"] = model
    for k in ("agent_class", "instance_id", "max_iterations"):
        v = x.get(k)
        if v is not None and v != "":
            info[k] = v


# actions that are not a tool the agent called
_NOT_TOOLS = _SKIP_ACTIONS | {"message", "finish", "reject"}
# CodeAct's action tags; a reply cut at the stop sequence lacks the closing tag (CodeAct
# parsed such a reply as if it were closed)
_EXECUTE = re.compile(r"<execute_(bash|ipython)>(.*?)(?:</execute_\1>|\Z)", re.DOTALL)
_EXIT_LINE = re.compile(r"\[Command finished with exit code (-?\d+)\]\s*$")


def _acts_through_tools(e: dict[str, Any]) -> bool:
    a = e.get("action")
    return a is not None and a not in _NOT_TOOLS and e.get("source") != "user"


def _step_time(x: Any) -> datetime | None:
    """A message step's timestamp, as :func:`~knowlyr.recorder.base.step` reads it (a
    datetime kept as it is)."""
    return x if isinstance(x, datetime) else _time(x)


def _new_step(
    index: int, thought: str, action: Any, message: Any, timestamp: Any
) -> dict[str, Any]:
    """A step as :func:`convert_events` keeps it (see there)."""
    s: dict[str, Any] = {"index": index, "thought": thought}
    if action is not None:
        s["action"] = action
    if message is not None:
        s["message"] = message
    s["observation"] = None
    s["usage"] = None
    if timestamp is not None:
        s["timestamp"] = timestamp
    s["duration_s"] = None
    s["metadata"] = {}
    return s


def _text_step(
    index: int, text: str, args: dict[str, Any], timestamp: Any, text_log: bool
) -> dict[str, Any] | None:
    """The step of an agent message whose text holds an action (as older CodeAct logs have),
    treated as the mini-swe-agent adapter treats a reply; ``None`` for a plain message.

    ``<execute_bash>`` / ``<execute_ipython>`` tags are CodeAct's action syntax wherever they
    appear; a fenced ```` ```bash ```` block counts only in a log where the agent never acts
    through tools (in a tool-calling run such a block is an example shown to the user).
    Exactly one is a ``bash {"command"}`` (``run_ipython {"code"}``) action, several or an
    unclosed fence an ``invalid_action {"raw", "error"}``.
    """
    tags = list(_EXECUTE.finditer(text))
    if tags:
        if len(tags) == 1:
            m = tags[0]
            body = m.group(2).strip()
            tool = "bash" if m.group(1) == "bash" else "run_ipython"
            params = {"command": body} if tool == "bash" else {"code": body}
            rest = (text[: m.start()] + text[m.end() :]).strip()
        else:
            tool = INVALID_ACTION_TOOL
            params = {
                "raw": text,
                "error": f"found {len(tags)} execute blocks, expected exactly one",
            }
            rest = _EXECUTE.sub("", text).strip()
    elif text_log and "```bash" in text:
        a = parse_text_action(text, BASH_BLOCK)
        if a.error is None:
            tool, params = "bash", {"command": a.command}
        else:
            tool, params = INVALID_ACTION_TOOL, {"raw": text, "error": a.error}
        rest = a.thought
    else:
        return None
    thought = "\n".join(x for x in (as_str(args.get("thought")), rest) if x)
    return _new_step(index, thought, {"tool": tool, "params": params}, None, _step_time(timestamp))


def _text_observation(text: str) -> dict[str, Any]:
    """The document of the observation a user message gives a text action: mini-swe-agent's
    ``<returncode>``/``<output>`` when it has them, else the text (exit code from OpenHands'
    "[Command finished with exit code N]")."""
    if "<returncode>" in text:
        code, out = parse_command_output(text)
        return fields_of(observation(out, code))
    m = _EXIT_LINE.search(text[-200:])
    return {"output": text, "exit_code": int(m.group(1))} if m else {"output": text}


def _drop(waiting: list[dict[str, Any]], s: dict[str, Any]) -> None:
    for i, w in enumerate(waiting):
        if w is s:
            del waiting[i]
            return


_ID = (int, str)  # what an event id or cause may be (a tuple: isinstance is faster than int | str)


def convert_events(
    events: list[Any],
    *,
    instruction: str | None = None,
    costs: list[Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Steps from an OpenHands event list, plus what the events say about the run.

    Returns:
        ``(steps, info)``: each step as a dict of the :class:`Step` fields, in their order,
        whose action, observation and usage are already their JSON documents; a field that
        is ``None`` when the step is made and stays so (``action`` or ``message``, ``reward``,
        ``token_ids``, ``logprobs``, ``timestamp``) is left out, while ``observation``,
        ``usage`` and ``duration_s`` are always there, ``None`` until known
        (:func:`_step_models` and :func:`_step_documents` finish them). ``info`` holds
        ``instruction``, ``model``, ``finish`` (message, outputs, task_completed), ``error``,
        ``system_prompt``, and what the events' ``extras`` declare (``agent_class``,
        ``instance_id``, ``max_iterations``) and the task's ``task_id``, when present.
    """
    flat = [e for e in events if type(e) is dict]
    if len(flat) != len(events):  # [action, observation] pairs, or something else
        flat = _flatten(events)
    text_log: bool | None = None  # whether the agent acts only through text (see _text_step)
    text_steps: set[int] = set()  # indexes of steps whose action came from a message's text
    steps: list[dict[str, Any]] = []
    by_id: dict[Any, dict[str, Any]] = {}
    waiting: list[dict[str, Any]] = []  # actions still without an observation, oldest first
    info: dict[str, Any] = {"instruction": instruction}
    pending_user: list[str] = []
    seen_user = False
    for e in flat:
        x = e.get("extras")
        if "model" in e or (type(x) is dict and not _DECLARING.isdisjoint(x)):
            _declared(e, info)  # (an observation's extras seldom declare anything)
        name = e.get("action", _ABSENT)
        if name is not _ABSENT:
            # type(...) is checks inline: this loop runs for every event of every log
            if type(name) is not str:
                name = as_str(name)
            args = e.get("args")
            if type(args) is not dict:  # flat (older) events carry their args inline
                args = e if args is None else _as_dict(args)
            if name in _SKIP_ACTIONS:
                if name == "system":
                    info["system_prompt"] = as_str(args.get("content"))
                    tools = args.get("tools")  # the agent's function schemas (OpenHands >= 0.39)
                    if type(tools) is list and tools:
                        info["tools"] = tools
                continue
            if name == "message":
                text = as_str(args.get("content", e.get("message")))
                src = e.get("source")
                if src == "user" or (src is None and not steps and not seen_user):
                    if not seen_user:  # the task itself
                        seen_user = True
                        if info["instruction"] is None:
                            info["instruction"] = text
                        if args.get("task_id") is not None:
                            info["task_id"] = as_str(args["task_id"])
                        continue
                    last = steps[-1] if steps else None
                    if last is not None and "action" not in last and last["observation"] is None:
                        last["observation"] = {"output": text}  # the user's reply to the message
                    elif (
                        last is not None
                        and last["observation"] is None
                        and last["index"] in text_steps
                    ):
                        last["observation"] = _text_observation(text)  # what the command gave
                        _drop(waiting, last)
                    else:
                        pending_user.append(text)
                    continue
                s = None
                if "<execute_" in text or "```" in text:
                    if text_log is None:
                        text_log = not any(_acts_through_tools(x) for x in flat)
                    s = _text_step(len(steps), text, args, e.get("timestamp"), text_log)
                if s is None:
                    thought = args.get("thought", "")
                    s = _new_step(
                        len(steps),
                        thought if type(thought) is str else as_str(thought),
                        None,
                        text,
                        _step_time(e.get("timestamp")),
                    )
                else:
                    text_steps.add(s["index"])
                    if s["action"]["tool"] != INVALID_ACTION_TOOL:  # a command that may run
                        waiting.append(s)
            else:
                tcm = e.get("tool_call_metadata")
                if type(tcm) is not dict:
                    tcm = _as_dict(tcm)
                tool, params = _action(name, args, tcm)
                thought = args.get("thought")
                p = c = model = call_id = None
                if tcm:
                    resp = tcm.get("model_response")
                    if thought is None and isinstance(resp, dict):
                        # the model's text that came with the tool call
                        choices = resp.get("choices")
                        if isinstance(choices, list) and choices:
                            ch = choices[0]
                            if isinstance(ch, dict) and isinstance(ch.get("message"), dict):
                                thought = ch["message"].get("content")
                    if type(resp) is dict:
                        model = resp.get("model")
                        u = resp.get("usage")
                        if type(u) is dict:
                            p, c = u.get("prompt_tokens"), u.get("completion_tokens")
                    call_id = tcm.get("tool_call_id")
                if model and not info.get("model"):
                    info["model"] = as_str(model)
                if name in ("finish", "reject"):
                    info["finish"] = {
                        "tool": name,
                        "message": as_str(
                            args.get("final_thought") or args.get("thought") or e.get("message")
                        ),
                        "outputs": args.get("outputs"),
                        "task_completed": args.get("task_completed"),
                    }
                    msg = info["finish"]["message"]
                    params = {"message": msg} if msg else {}
                    if args.get("outputs"):
                        params["outputs"] = args["outputs"]
                    if args.get("task_completed") is not None:
                        params["task_completed"] = args["task_completed"]
                if type(tool) is str and type(params) is dict and type(call_id) in (str, NoneType):
                    call = {"tool": tool, "params": params}
                    if call_id is not None:
                        call["call_id"] = call_id
                else:
                    call = fields_of(tool_call(tool, params, call_id))
                if p is None and c is None:
                    use = None
                elif type(p) is int and type(c) is int:
                    use = {"prompt_tokens": p, "completion_tokens": c}
                else:
                    use = usage(p, c)
                    if use is not None:
                        use = fields_of(use)
                ts = e.get("timestamp")  # _time(ts), inlined
                if type(ts) is str:
                    try:
                        ts = _fromiso(ts)
                    except ValueError:
                        ts = None
                elif ts is not None:
                    ts = parse_time(ts)
                # _new_step, inlined: this runs for every action of every log
                s = {
                    "index": len(steps),
                    "thought": thought if type(thought) is str else as_str(thought),
                    "action": call,
                    "observation": None,
                    "usage": use,
                }
                if ts is not None:
                    s["timestamp"] = ts
                s["duration_s"] = None
                s["metadata"] = {}
                waiting.append(s)
            if pending_user:
                s["metadata"]["user_message"] = "\n".join(pending_user)
                pending_user.clear()
            steps.append(s)
            eid = e.get("id")
            if isinstance(eid, _ID):
                by_id[eid] = s
            continue
        kind = e.get("observation", _ABSENT)
        if kind is _ABSENT:
            continue
        if type(kind) is not str:
            kind = as_str(kind)
        if kind in _SKIP_OBS:
            if kind == "agent_state_changed":
                st = _args(e, "extras").get("agent_state")
                if st == "error":
                    info["error"] = as_str(
                        e.get("message") or _args(e, "extras").get("reason") or "agent error"
                    )
            continue
        cause = e.get("cause")
        target = by_id.get(cause) if isinstance(cause, _ID) else None
        if target is None or target["observation"] is not None:
            target = waiting[0] if waiting else None
        if target is None:
            continue
        if waiting[0] is target:
            del waiting[0]
        else:
            _drop(waiting, target)
        extras = x
        if type(extras) is not dict:
            extras = e if extras is None else _as_dict(extras)
        content = e.get("content", _ABSENT)
        if content is _ABSENT:
            content = extras.get("content")
        if kind == "error":
            target["observation"] = fields_of(
                observation(content, None, as_str(content) or "error")
            )
        else:
            code = extras.get("exit_code", _ABSENT)  # extras, else the event, else metadata
            if code is _ABSENT:
                code = e.get("exit_code")
            if code is None:
                md = extras.get("metadata")
                if type(md) is dict:
                    code = md.get("exit_code")
            # what observation() builds, as its document
            obs = {"output": content if type(content) is str else as_str(content)}
            if type(code) is not int and code is not None:
                code = as_int(code)
            if code is not None:
                obs["exit_code"] = code
            target["observation"] = obs
        t0 = target.get("timestamp")
        if t0 is not None:
            t_end = _time(e.get("timestamp"))
            if t_end is not None and (t_end.tzinfo is None) == (t0.tzinfo is None):
                d = (t_end - t0).total_seconds()  # never -0.0: max(d, 0.0) without the call
                target["duration_s"] = d if d > 0.0 else 0.0
    if pending_user and steps:
        steps[-1]["metadata"]["user_message_after"] = "\n".join(pending_user)
    if costs:
        agent_steps = [s for s in steps if "action" in s or "message" in s]
        if len(costs) == len(agent_steps):  # one LLM call per step: spread the per-call costs
            for s, cost in zip(agent_steps, costs, strict=True):
                if type(cost) is not float:
                    cost = as_float(cost)
                    if cost is None:
                        continue
                elif cost != cost or cost in (_INF, -_INF):
                    continue
                u = s["usage"]
                if u is None:  # what usage(None, None, cost) builds
                    s["usage"] = {"cost_usd": cost}
                else:
                    u["cost_usd"] = cost
    return steps, info


def _step_models(steps: list[dict[str, Any]]) -> list[Step]:
    """:func:`convert_events` steps as models."""
    out = []
    for d in steps:
        a, o, u = d.get("action"), d["observation"], d["usage"]
        if a is not None:
            a = _build(
                ToolCall, {"tool": a["tool"], "params": a["params"], "call_id": a.get("call_id")}
            )
        if o is not None:
            o = _build(
                Observation,
                {"output": o["output"], "exit_code": o.get("exit_code"), "error": o.get("error")},
            )
        if u is not None:
            u = _build(
                Usage,
                {
                    "prompt_tokens": u.get("prompt_tokens"),
                    "completion_tokens": u.get("completion_tokens"),
                    "cost_usd": u.get("cost_usd"),
                },
            )
        out.append(
            _build(
                Step,
                {
                    "index": d["index"],
                    "thought": d["thought"],
                    "action": a,
                    "message": d.get("message"),
                    "observation": o,
                    "reward": None,
                    "usage": u,
                    "token_ids": None,
                    "logprobs": None,
                    "timestamp": d.get("timestamp"),
                    "duration_s": d["duration_s"],
                    "metadata": d["metadata"],
                },
            )
        )
    return out


def _step_documents(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`convert_events` steps as their JSON documents (``None`` fields left out; in
    place, which costs half of building new dicts)."""
    for d in steps:
        if d["observation"] is None:
            del d["observation"]
        if d["usage"] is None:
            del d["usage"]
        if d["duration_s"] is None:
            del d["duration_s"]
    return steps


def _finish_outcome(info: dict[str, Any], **kw: Any) -> Any:
    """The outcome: what the caller knows (``success``, test counts...), else what the finish
    action carries: ``outputs.test_result`` (``success``, ``tests_passed``, ``tests_failed``)
    or ``outputs.success``, as the original knowlyr recorder read them, else its
    ``task_completed``."""
    fin = info.get("finish")
    tc = as_str(fin.get("task_completed")).lower() if fin else ""
    success = kw.pop("success", None)
    outputs = fin.get("outputs") if fin else None
    if isinstance(outputs, dict):
        tr = outputs.get("test_result")
        if isinstance(tr, dict):
            if success is None and isinstance(tr.get("success"), bool):
                success = tr["success"]
            if kw.get("tests_passed") is None and kw.get("tests_failed") is None:
                kw["tests_passed"] = tr.get("tests_passed")
                kw["tests_failed"] = tr.get("tests_failed")
        elif success is None and isinstance(outputs.get("success"), bool):
            success = outputs["success"]
    if success is None and tc in ("true", "false"):
        success = tc == "true"
    if fin and fin["tool"] == "reject" and success is None:
        success = False
    reason = kw.pop("reason", None) or info.get("error") or (fin["tool"] if fin else None)
    return outcome(
        success=success,
        terminated=fin is not None,
        truncated=fin is None and not info.get("error"),
        reason=reason,
        **kw,
    )


def _instruction_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class _EventsAdapter(Adapter):
    """An adapter whose records hold an OpenHands event list: :meth:`_parts` reads a record
    into (task, :func:`convert_events` steps, the other :func:`trajectory` arguments), which
    become the models (:meth:`convert`) or the JSON document (:meth:`document`)."""

    documents = True

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        task_info, steps, parts = self._parts(obj, path, line)
        return trajectory(task_info, _step_models(steps), **parts)

    def document(
        self, obj: Any, *, path: str | None = None, line: int | None = None
    ) -> dict[str, Any]:
        task_info, steps, parts = self._parts(obj, path, line)
        return trajectory_document(task_info, _step_documents(steps), **parts)

    @abstractmethod
    def _parts(self, obj: Any, path: str | None, line: int | None) -> tuple[Any, list, dict]:
        """(task, steps, the other arguments of :func:`trajectory`) of one record."""


class OpenHandsEventsAdapter(_EventsAdapter):
    """OpenHands action / observation events: a JSON array (``tests/runtime/trajs/*.json``)
    or one event per line (``.jsonl``); either way the whole file is one trajectory."""

    name = "openhands"
    description = "OpenHands event log: action/observation events (id, source, args, cause, extras) as a JSON array, or one per line (.jsonl); one file = one trajectory"
    extensions = (".json", ".jsonl")
    session = True  # a JSONL file of events is one record
    priority = 20

    def sniff(self, obj: Any) -> bool:
        return _is_event_list(obj) or _is_event_line(obj)

    def _parts(self, obj: Any, path: str | None, line: int | None) -> tuple[Any, list, dict]:
        if isinstance(obj, dict) and _is_event(obj):  # a file holding a single event
            obj = [obj]
        if not isinstance(obj, list):
            raise self.fail(
                f"expected a JSON array of events, got {type(obj).__name__}", path=path, line=line
            )
        if not obj:
            raise self.fail("the event list is empty", path=path, line=line)
        steps, info = convert_events(obj)
        if not steps and info["instruction"] is None:
            raise self.fail(
                "no action or observation events (need 'action'/'observation' keys)",
                path=path,
                line=line,
            )
        instr = info["instruction"] or ""
        md: dict[str, Any] = {}
        if info.get("system_prompt"):
            md["system_prompt"] = info["system_prompt"]
        if info.get("tools"):
            md["tools"] = info["tools"]
        if info.get("max_iterations") is not None:
            md["max_iterations"] = info["max_iterations"]
        task_id = info.get("task_id") or info.get("instance_id") or _instruction_id(instr)
        cls = info.get("agent_class")
        return (
            task(task_id, instr, domain="coding"),
            steps,
            {
                "agent": agent_info(
                    f"openhands/{as_str(cls)}" if cls else "openhands",
                    info.get("model") or info.get("declared_model"),
                ),
                "outcome": _finish_outcome(info),
                "metadata": md,
            },
        )


register_adapter(OpenHandsEventsAdapter)

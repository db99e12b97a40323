"""SWE-agent ``.traj`` files.

::

    {"environment": "swe_main",
     "trajectory": [{"action": "open tests/x.py 10\\n", "observation": "...", "response": "...",
                     "thought": "...", "execution_time": 0.28, "state": {...}}, ...],
     "history": [{"role": "system"|"user"|"assistant"|"tool", "content": ..., "tool_calls": [...]}],
     "info": {"exit_status": "submitted", "submission": "diff --git ...", "model_stats": {...}},
     "replay_config": {"problem_statement": {"id": ...}, "agent": {"model": {"name": ...}}}}

Each ``trajectory`` entry is a step; its command is parsed into tool + arguments
(:func:`parse_command`); when the model called a function (``history[].tool_calls``) its own
arguments are kept instead. Without a ``trajectory`` list the steps come from ``history``
(assistant ``action`` + the next user/tool message as observation); such a file is detected
by its history messages' ``role`` and ``agent`` fields, with or without ``info``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import orjson

from knowlyr.recorder.base import (
    Adapter,
    agent_info,
    as_dict,
    as_str,
    observation,
    outcome,
    register_adapter,
    step,
    task,
    tool_call,
    trajectory,
    usage,
)
from knowlyr.trajectory import Trajectory

__all__ = ["SWEAgentAdapter", "parse_command"]

_EDIT_RANGE = re.compile(r"^edit\s+(\d+)\s*:\s*(\d+)\s*\n(.*?)(?:\n?end_of_edit\s*)?$", re.S)
_INSERT = re.compile(r"^insert\s+(\d+)\s*\n(.*?)(?:\n?end_of_insert\s*)?$", re.S)
_ISSUE = re.compile(r"ISSUE:\n(.*?)(?:\n+INSTRUCTIONS:|\Z)", re.S)


def _split(args: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError:  # unbalanced quotes: keep words as written
        return args.split()


def _num(x: str) -> int | str:
    return int(x) if x.lstrip("-").isdigit() else x


def parse_command(action: str) -> tuple[str, dict[str, Any]]:
    """Split a SWE-agent command into ``(tool, params)``.

    Known commands: ``open``, ``goto``, ``scroll_up/down``, ``create``, ``edit`` (line range
    with ``end_of_edit``, or ``edit <search> <replace> [<replace-all>]``), ``insert``,
    ``search_dir``, ``search_file``, ``find_file``, ``str_replace_editor``, ``submit``;
    anything else is ``bash {"command": ...}``.

    Example:
        >>> parse_command("open file.py 10")
        ('open', {'path': 'file.py', 'line_number': 10})
        >>> parse_command("edit 5:7\\nreturn x\\nend_of_edit")
        ('edit', {'start_line': 5, 'end_line': 7, 'replacement': 'return x'})
    """
    text = action.strip()
    if not text:
        return "", {}
    head, _, rest = text.partition(" ")
    head = head.split("\n", 1)[0]
    if head == "edit":
        m = _EDIT_RANGE.match(text)
        if m:
            return "edit", {
                "start_line": int(m.group(1)),
                "end_line": int(m.group(2)),
                "replacement": m.group(3),
            }
        if "\n" not in text:
            words = _split(rest)
            if len(words) in (2, 3):
                p: dict[str, Any] = {"search": words[0], "replace": words[1]}
                if len(words) == 3:
                    p["replace_all"] = words[2].lower() == "true"
                return "edit", p
    if head == "insert":
        m = _INSERT.match(text)
        if m:
            return "insert", {"line_number": int(m.group(1)), "text": m.group(2)}
    if "\n" in text and head != "str_replace_editor":
        return "bash", {"command": text}
    words = _split(rest)
    if head == "open" and 1 <= len(words) <= 2:
        p = {"path": words[0]}
        if len(words) == 2:
            p["line_number"] = _num(words[1])
        return "open", p
    if head == "goto" and len(words) == 1:
        return "goto", {"line_number": _num(words[0])}
    if head in ("scroll_down", "scroll_up", "submit") and not words:
        return head, {}
    if head == "create" and len(words) == 1:
        return "create", {"path": words[0]}
    if head in ("search_dir", "search_file", "find_file") and 1 <= len(words) <= 2:
        key = "file_name" if head == "find_file" else "search_term"
        p = {key: words[0]}
        if len(words) == 2:
            p["file" if head == "search_file" else "dir"] = words[1]
        return head, p
    if head == "str_replace_editor" and len(words) >= 2:
        p = {"command": words[0], "path": words[1]}
        i = 2
        while i + 1 < len(words) and words[i].startswith("--"):
            p[words[i][2:]] = words[i + 1]
            i += 2
        return "str_replace_editor", p
    return "bash", {"command": text}


def _content(x: Any) -> str:
    return as_str(x)


def _instruction(history: list[Any]) -> str:
    for m in history:
        if isinstance(m, dict) and m.get("role") == "user" and not m.get("is_demo"):
            text = _content(m.get("content"))
            found = _ISSUE.search(text)
            return found.group(1).strip() if found else text
    return ""


def _function_args(history: list[Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """action text -> [(function name, arguments)] from function-calling history entries."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for m in history:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        calls = m.get("tool_calls")
        if not isinstance(calls, list) or len(calls) != 1 or not isinstance(calls[0], dict):
            continue
        fn = calls[0].get("function")
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = orjson.loads(args) if args.strip() else {}
            except orjson.JSONDecodeError:
                continue
        if isinstance(args, dict):
            out.setdefault(as_str(m.get("action")).strip(), []).append(
                (as_str(fn.get("name")), args)
            )
    return out


def _from_history(history: list[Any]) -> list[dict[str, Any]]:
    """``trajectory``-like entries from ``history`` (assistant action + next observation)."""
    entries: list[dict[str, Any]] = []
    started = False
    for m in history:
        if not isinstance(m, dict) or m.get("is_demo"):
            continue
        role = m.get("role")
        if role == "assistant" and m.get("action") is not None:
            started = True
            entries.append(
                {"action": m["action"], "thought": m.get("thought", ""), "observation": ""}
            )
        elif role in ("user", "tool") and started and entries and not entries[-1]["observation"]:
            entries[-1]["observation"] = _content(m.get("content"))
    return entries


class SWEAgentAdapter(Adapter):
    """A SWE-agent trajectory file (``*.traj``)."""

    name = "swe_agent"
    description = "SWE-agent .traj: trajectory[{action, observation, thought, response}], history, info{exit_status, submission, model_stats}"
    extensions = (".traj", ".json")
    priority = 10

    def sniff(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        if isinstance(obj.get("trajectory"), list) and ("info" in obj or "history" in obj):
            t = obj["trajectory"]
            return not t or (isinstance(t[0], dict) and "action" in t[0])
        h = obj.get("history")
        if not (isinstance(h, list) and h and isinstance(h[0], dict) and "role" in h[0]):
            return False
        # a .traj that kept only its history (no trajectory, maybe no info): SWE-agent tags
        # every history message with the agent that wrote it ("primary", "main")
        return isinstance(obj.get("info"), dict) or "agent" in h[0]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict):
            raise self.fail(
                f"expected a JSON object, got {type(obj).__name__}", path=path, line=line
            )
        history = obj.get("history") if isinstance(obj.get("history"), list) else []
        entries = obj.get("trajectory")
        if not isinstance(entries, list):
            if not history:
                raise self.fail("neither a 'trajectory' nor a 'history' list", path=path, line=line)
            entries = _from_history(history)
        calls = _function_args(history)
        steps = []
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                raise self.fail(
                    f"trajectory[{i}] is {type(e).__name__}, not an object", path=path, line=line
                )
            action = as_str(e.get("action"))
            tool, params = parse_command(action)
            known = calls.get(action.strip())
            if known:
                fn, args = known.pop(0)
                if fn:
                    tool, params = fn, args
            state = e.get("state")
            md: dict[str, Any] = {}
            if isinstance(state, str) and state.startswith("{"):
                try:
                    state = orjson.loads(state)
                except orjson.JSONDecodeError:
                    state = None
            if isinstance(state, dict) and state:
                md["state"] = state
            response = e.get("response")
            if isinstance(response, str) and response and response != e.get("thought"):
                md["response"] = response  # the model's text exactly as generated
            steps.append(
                step(
                    len(steps),
                    thought=e.get("thought", ""),
                    action=tool_call(tool, params) if tool else None,
                    observation=observation(e.get("observation")),
                    duration_s=e.get("execution_time"),
                    metadata=md,
                )
            )
        info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
        stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
        rc = obj.get("replay_config")
        if isinstance(rc, str):
            try:
                rc = orjson.loads(rc)
            except orjson.JSONDecodeError:
                rc = None
        rc = rc if isinstance(rc, dict) else {}
        ps = rc.get("problem_statement") if isinstance(rc.get("problem_statement"), dict) else {}
        model = (
            as_dict(as_dict(rc.get("agent")).get("model"))
            if isinstance(rc.get("agent"), dict)
            else {}
        )
        task_id = (
            ps.get("id")
            or (Path(path).stem if path else None)
            or obj.get("instance_id")
            or "swe-agent"
        )
        status = as_str(info.get("exit_status")) or None
        md = {}
        if info.get("submission"):
            md["submission"] = as_str(info["submission"])
        if stats:
            md["model_stats"] = stats
        if obj.get("environment"):
            md["environment"] = obj["environment"]
        u = usage(
            stats.get("tokens_sent"), stats.get("tokens_received"), stats.get("instance_cost")
        )
        if u is not None:
            md["usage"] = u.model_dump()
        submitted = bool(status and status.startswith("submitted"))
        return trajectory(
            task(
                task_id,
                _instruction(history),
                domain="coding",
                metadata={"github_url": ps["github_url"]} if ps.get("github_url") else None,
            ),
            steps,
            agent=agent_info("swe-agent", model.get("name") if isinstance(model, dict) else None),
            outcome=outcome(
                success=info.get("resolved") if isinstance(info.get("resolved"), bool) else None,
                terminated=submitted,
                truncated=bool(status) and not submitted,
                reason=status,
            ),
            metadata=md,
        )


register_adapter(SWEAgentAdapter)

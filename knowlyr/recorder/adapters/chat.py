"""Chat transcripts: OpenAI-style messages with ``tool_calls`` and Anthropic content blocks.

* ``openai_chat``: ``{"messages": [{role, content, tool_calls[{id, function{name, arguments}}],
  tool_call_id}], "instance_id", "run_id", "resolved"}`` (SWE-Gym / OpenHands sampled
  trajectories, and what :func:`knowlyr.trajectory.to_chat_messages` writes).
* ``anthropic``: ``{"system", "messages": [{role, content: [{type: text|thinking|tool_use|
  tool_result}]}]}`` (Messages API transcripts).
* ``claude_code``: a Claude Code session, one JSON object per line (``{"type": "user"|
  "assistant", "message": {...}, "timestamp", "sessionId"}``); the whole file is ONE
  trajectory, its assistant messages split over several lines are joined by message id.

The tools a log's request declared (its ``tools``; Anthropic's ``input_schema`` as the
parameters of an OpenAI function schema) are kept as ``metadata["tools"]``, the system prompt
as ``metadata["system_prompt"]``. Every assistant tool call is one step (the text before it is
the thought), a tool result
is that call's observation (matched by id), assistant text alone is a message step, and a
user turn after the first answers the previous message step (its observation) or is kept
as ``metadata["user_message"]`` on the next step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import orjson

from knowlyr.recorder.base import (
    Adapter,
    agent_info,
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
from knowlyr.trajectory import Step, Trajectory

__all__ = ["AnthropicAdapter", "ClaudeCodeAdapter", "OpenAIChatAdapter"]

# OpenHands-style tool results end with "[Command finished with exit code N]".
_EXIT = re.compile(r"\[Command finished with exit code (-?\d+)\]\s*$")


def _anthropic_tool(t: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic tool definition as an OpenAI function schema (its ``input_schema`` is the
    JSON schema of the parameters)."""
    if "input_schema" not in t:
        return t
    fn = {"name": t.get("name"), "description": t.get("description")}
    fn = {k: v for k, v in fn.items() if v is not None}
    return {"type": "function", "function": {**fn, "parameters": t["input_schema"]}}


class _Builder:
    """Accumulates steps from a stream of turns, matching results to calls by id."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.by_call: dict[str, Step] = {}
        self.instruction: str | None = None
        self.system: str | None = None
        self.pending_user: list[str] = []
        self.model: str | None = None

    def user_text(self, text: str) -> None:
        if self.instruction is None:
            self.instruction = text
            return
        last = self.steps[-1] if self.steps else None
        if last is not None and last.action is None and last.observation is None:
            last.observation = observation(text)
        else:
            self.pending_user.append(text)

    def add(self, s: Step) -> Step:
        if self.pending_user:
            s.metadata["user_message"] = "\n".join(self.pending_user)
            self.pending_user.clear()
        self.steps.append(s)
        return s

    def call(self, name: Any, args: Any, call_id: Any, *, thought: str = "", **kw: Any) -> Step:
        if isinstance(args, str):
            try:
                args = orjson.loads(args) if args.strip() else {}
            except orjson.JSONDecodeError:
                args = {"input": args}  # the model wrote invalid JSON: keep its text
        s = self.add(
            step(len(self.steps), thought=thought, action=tool_call(name, args, call_id), **kw)
        )
        if call_id:
            self.by_call[as_str(call_id)] = s
        return s

    def result(self, call_id: Any, content: Any, *, is_error: bool = False) -> None:
        s = self.by_call.get(as_str(call_id)) if call_id else None
        if s is None or s.observation is not None:
            s = next(
                (x for x in reversed(self.steps) if x.action is not None and x.observation is None),
                None,
            )
        if s is None:
            return
        text = as_str(content)
        m = _EXIT.search(text[-200:])
        s.observation = observation(
            text, int(m.group(1)) if m else None, text if is_error else None
        )

    def task_id(self, given: Any) -> str:
        if given:
            return as_str(given)
        return hashlib.sha256(
            (self.instruction or "").encode("utf-8", "surrogatepass")
        ).hexdigest()[:16]


def _openai_turns(b: _Builder, messages: list[Any], fail: Any) -> None:
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise fail(f"messages[{i}] is {type(m).__name__}, not an object")
        role = m.get("role")
        if role is None:
            raise fail(f"messages[{i}] has no 'role'")
        content = as_str(m.get("content"))
        if role in ("system", "developer"):
            b.system = content if b.system is None else b.system
        elif role == "user":
            b.user_text(content)
        elif role == "assistant":
            calls = m.get("tool_calls")
            thought = as_str(m.get("reasoning_content"))
            lp = m.get("logprobs")
            lp = lp.get("content") if isinstance(lp, dict) else lp
            kw = {"token_ids": m.get("token_ids") or m.get("completion_token_ids"), "logprobs": lp}
            if not isinstance(calls, list) or not calls:
                b.add(step(len(b.steps), thought=thought, message=content, **kw))
                continue
            text = "\n".join(x for x in (thought, content) if x)
            for j, c in enumerate(calls):
                if not isinstance(c, dict):
                    raise fail(f"messages[{i}].tool_calls[{j}] is not an object")
                fn = c.get("function") if isinstance(c.get("function"), dict) else {}
                if not fn.get("name"):
                    raise fail(f"messages[{i}].tool_calls[{j}] has no function name")
                b.call(
                    fn["name"],
                    fn.get("arguments"),
                    c.get("id"),
                    thought=text if j == 0 else "",
                    **(kw if j == 0 else {}),
                )
        elif role in ("tool", "function"):
            b.result(m.get("tool_call_id"), m.get("content"))
        else:
            raise fail(
                f"messages[{i}] has unknown role {role!r} (expected system/user/assistant/tool)"
            )


class OpenAIChatAdapter(Adapter):
    """OpenAI-style chat messages with tool calls (one conversation per record)."""

    name = "openai_chat"
    description = "OpenAI chat messages with tool_calls / tool results: {messages, instance_id?, run_id?, resolved?}"
    priority = 60

    def sniff(self, obj: Any) -> bool:
        msgs = obj.get("messages") if isinstance(obj, dict) else None
        return (
            isinstance(msgs, list)
            and bool(msgs)
            and all(isinstance(m, dict) and "role" in m for m in msgs[:3])
            and not _has_blocks(msgs)
        )

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
            raise self.fail("expected an object with a 'messages' list", path=path, line=line)

        def fail(reason: str) -> Exception:
            return self.fail(reason, path=path, line=line)

        b = _Builder()
        _openai_turns(b, obj["messages"], fail)
        resolved = obj.get("resolved", obj.get("success"))
        md = {k: obj[k] for k in ("run_id", "model_patch", "git_patch") if obj.get(k) is not None}
        if b.system:
            md["system_prompt"] = b.system
        tools = obj.get("tools")  # the function schemas the request declared
        if isinstance(tools, list) and tools and all(isinstance(t, dict) for t in tools):
            md["tools"] = tools
        return trajectory(
            task(
                b.task_id(obj.get("instance_id") or obj.get("task_id")),
                b.instruction or "",
                domain="coding" if obj.get("instance_id") else "generic",
            ),
            b.steps,
            agent=agent_info(
                obj.get("agent") if isinstance(obj.get("agent"), str) else "unknown",
                obj.get("model"),
            ),
            outcome=outcome(
                success=resolved if isinstance(resolved, bool) else None,
                terminated=isinstance(resolved, bool),
            ),
            metadata=md,
        )


def _has_blocks(msgs: list[Any]) -> bool:
    for m in msgs[:20]:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list) and any(
            isinstance(p, dict) and p.get("type") in ("tool_use", "tool_result", "thinking")
            for p in c
        ):
            return True
    return False


def _anthropic_content(
    b: _Builder, role: str, content: Any, *, thought: list[str], kw: dict[str, Any]
) -> None:
    """Feed one message's content (string or blocks) to the builder. ``thought`` carries text
    seen before the next tool_use; ``kw`` (usage, timestamp) goes to the first step made."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return
    if role == "user":
        texts = []
        for p in content:
            if not isinstance(p, dict):
                continue
            if p.get("type") == "tool_result":
                b.result(p.get("tool_use_id"), p.get("content"), is_error=bool(p.get("is_error")))
            elif p.get("type") == "text":
                texts.append(as_str(p.get("text")))
        if texts:
            b.user_text("\n".join(texts))
        return
    for p in content:
        if not isinstance(p, dict):
            continue
        t = p.get("type")
        if t == "text":
            thought.append(as_str(p.get("text")))
        elif t in ("thinking", "redacted_thinking"):
            thought.append(as_str(p.get("thinking")))
        elif t in ("tool_use", "server_tool_use"):
            b.call(
                p.get("name"),
                p.get("input") if p.get("input") is not None else {},
                p.get("id"),
                thought="\n".join(x for x in thought if x),
                **kw,
            )
            thought.clear()
            kw.clear()


def _flush(b: _Builder, thought: list[str], kw: dict[str, Any]) -> None:
    text = "\n".join(x for x in thought if x)
    if text:
        b.add(step(len(b.steps), message=text, **kw))
    thought.clear()
    kw.clear()


class AnthropicAdapter(Adapter):
    """Anthropic Messages API transcripts with ``tool_use`` / ``tool_result`` blocks."""

    name = "anthropic"
    description = (
        "Anthropic messages with tool_use/tool_result content blocks: {system?, messages, model?}"
    )
    priority = 50

    def sniff(self, obj: Any) -> bool:
        msgs = obj.get("messages") if isinstance(obj, dict) else None
        return isinstance(msgs, list) and bool(msgs) and _has_blocks(msgs)

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
            raise self.fail("expected an object with a 'messages' list", path=path, line=line)
        b = _Builder()
        b.system = as_str(obj.get("system")) or None
        for i, m in enumerate(obj["messages"]):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                raise self.fail(
                    f"messages[{i}] needs role 'user' or 'assistant'", path=path, line=line
                )
            thought: list[str] = []
            kw: dict[str, Any] = {}
            if m["role"] == "assistant" and isinstance(m.get("usage"), dict):
                u = m["usage"]
                kw["usage"] = usage(u.get("input_tokens"), u.get("output_tokens"))
            _anthropic_content(b, m["role"], m.get("content"), thought=thought, kw=kw)
            if m["role"] == "assistant":
                _flush(b, thought, kw)
        md: dict[str, Any] = {"system_prompt": b.system} if b.system else {}
        tools = obj.get("tools")  # the request's tools: {name, description, input_schema}
        if isinstance(tools, list) and tools and all(isinstance(t, dict) for t in tools):
            md["tools"] = [_anthropic_tool(t) for t in tools]
        resolved = obj.get("resolved", obj.get("success"))
        return trajectory(
            task(
                b.task_id(obj.get("instance_id") or obj.get("task_id") or obj.get("id")),
                b.instruction or "",
            ),
            b.steps,
            agent=agent_info("anthropic", obj.get("model")),
            outcome=outcome(success=resolved if isinstance(resolved, bool) else None),
            metadata=md,
        )


_CC_TYPES = frozenset({"user", "assistant", "summary", "system"})


class ClaudeCodeAdapter(Adapter):
    """A Claude Code session file: one event per line, the whole file is one trajectory."""

    name = "claude_code"
    description = "Claude Code session JSONL: {type: user|assistant, message{role, content[...]}, sessionId, timestamp} per line; one file = one trajectory"
    extensions = (".jsonl",)
    session = True
    priority = 30

    def sniff(self, obj: Any) -> bool:
        return (
            isinstance(obj, dict)
            and obj.get("type") in _CC_TYPES
            and any(k in obj for k in ("sessionId", "leafUuid", "uuid", "parentUuid"))
        )

    def split(self, doc: Any) -> list[Any]:
        return [doc if isinstance(doc, list) else [doc]]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        lines: Iterable[Any] = obj if isinstance(obj, list) else [obj]
        b = _Builder()
        session_id = None
        summary = None
        seen_usage: set[str] = set()
        thought: list[str] = []
        kw: dict[str, Any] = {}
        last_msg_id = None
        n = 0
        for ev in lines:
            if not isinstance(ev, dict):
                continue
            kind = ev.get("type")
            session_id = session_id or ev.get("sessionId")
            if kind == "summary":
                summary = as_str(ev.get("summary")) or summary
                continue
            msg = ev.get("message")
            if kind not in ("user", "assistant") or not isinstance(msg, dict):
                continue
            n += 1
            if kind == "assistant":
                mid = msg.get("id") if isinstance(msg.get("id"), str) else None
                if mid != last_msg_id:
                    _flush(b, thought, kw)
                    last_msg_id = mid
                b.model = b.model or (as_str(msg.get("model")) or None)
                u = msg.get("usage")
                if isinstance(u, dict) and (mid is None or mid not in seen_usage):
                    seen_usage.add(mid)
                    kw["usage"] = usage(u.get("input_tokens"), u.get("output_tokens"))
                kw.setdefault("timestamp", ev.get("timestamp"))
                _anthropic_content(b, "assistant", msg.get("content"), thought=thought, kw=kw)
            else:
                _flush(b, thought, kw)
                last_msg_id = None
                if ev.get("isMeta"):
                    continue
                _anthropic_content(b, "user", msg.get("content"), thought=[], kw={})
        _flush(b, thought, kw)
        if n == 0:
            raise self.fail("no user/assistant lines with a 'message'", path=path, line=line)
        md = {"summary": summary} if summary else {}
        return trajectory(
            task(b.task_id(session_id), b.instruction or "", domain="coding"),
            b.steps,
            agent=agent_info("claude-code", b.model),
            outcome=outcome(),
            metadata=md,
        )


register_adapter(OpenAIChatAdapter)
register_adapter(AnthropicAdapter)
register_adapter(ClaudeCodeAdapter)

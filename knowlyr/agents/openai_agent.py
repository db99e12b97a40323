"""``OpenAIAgent``: a model behind the OpenAI Chat Completions API, with native tool calling.

Works with OpenAI itself and with OpenAI-compatible servers (vLLM, ``transformers serve``,
the llama.cpp server...): the request uses only what they all understand (``messages``,
``tools`` as function schemas, optional ``max_tokens`` / ``temperature``); the answer to a
tool call is a ``role: tool`` message with its ``tool_call_id``. The key comes from
``api_key=`` or ``OPENAI_API_KEY``; with a ``base_url`` and no key a placeholder is sent (local
servers do not check it). ``base_url`` is the API root including ``/v1``
(``http://127.0.0.1:8000/v1``).

Servers should parse tool calls out of the model's text: vLLM with
``--enable-auto-tool-choice --tool-call-parser <parser>``, llama.cpp with ``--jinja``;
``transformers serve`` does it for Qwen-family checkpoints (see :mod:`knowlyr.agents.serve`,
whose ``served.policy`` is a spec for this agent). A server that does not parse them returns
the call as text: a ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block in a
reply without ``tool_calls`` is parsed here with
:func:`~knowlyr.agents.action_format.parse_action_text` (the parser of the in-process bridge
and of :func:`~knowlyr.agents.serve.reply_action`), the text before it being the thought; the
reply goes back into the conversation as the text the model wrote.

``transformers serve`` (5.23) has two habits this agent works around:

- It answers a tool call it cannot parse (malformed JSON, or cut by ``max_tokens``) with
  **HTTP 500** and the plain-text body ``Internal Server Error`` (Starlette's answer to an
  unhandled exception). That reply is an invalid-action step ("the server could not parse
  the reply"), not retried (greedy decoding would fail the same way): the model is told and
  asked again, and the env's rules decide whether the episode goes on. The model's text is
  lost (the server sends none back), so the conversation has no assistant turn for it. A 500
  with any other body, other 5xx and 429 are retried as usual.
- In a request, it drops the ``content`` of an assistant message that has ``tool_calls``, so
  the model would not see its own past thoughts. With ``calls_as_text`` such a turn is sent
  as the text the model generated (the thought, then each call as
  :func:`~knowlyr.agents.action_format.render_action` writes it), which a Qwen-style chat
  template renders byte for byte like the ``tool_calls`` form. Only for servers whose chat
  template uses that format, and never for OpenAI itself (a ``tool`` message must follow
  ``tool_calls`` there).

**A served knowlyr checkpoint** (``model`` is a local folder holding
:data:`~knowlyr.agents.inference.MARKER_FILE`, as ``served.policy`` names it) is prompted as
it was trained, like the in-process bridge prompts it: the system prompt and tool schemas saved
with it are the defaults (instead of the env's), no system message when it was trained without
one, and ``calls_as_text`` is on. With greedy decoding it then takes the same actions as
``AgentInference.from_pretrained(path).create_agent()`` (a test checks the success counts).

Example:
    >>> from knowlyr.rollout import collect
    >>> agent = lambda: OpenAIAgent("Qwen/Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:8000/v1")
    >>> trajs = collect("knowlyr/conversation", agent, 8, concurrency=8)  # doctest: +SKIP

Or ``knowlyr rollout knowlyr/conversation --agent openai:gpt-4o-mini -n 8 --concurrency 8``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from knowlyr.agents.action_format import NO_CALL_ERROR, parse_action_text, render_action
from knowlyr.agents.api import ApiAgent, ModelTurn, ToolCallRequest, UnreadableReply, _status
from knowlyr.agents.inference import MARKER_FILE, read_marker
from knowlyr.errors import ConfigError
from knowlyr.trajectory import INVALID_ACTION_TOOL

__all__ = ["OpenAIAgent"]

_OPENAI_HOST = "api.openai.com"
#: The body Starlette (under ``transformers serve``) sends for an unhandled exception.
_UNHANDLED_500 = "Internal Server Error"
_UNPARSED = (
    "the server could not parse the reply (HTTP 500 Internal Server Error: transformers serve "
    "answers so when the tool call is not valid JSON)"
)


class OpenAIAgent(ApiAgent):
    """A Chat Completions model as an :class:`~knowlyr.agents.base.Agent` (see :class:`ApiAgent`).

    ``max_tokens`` is sent as ``max_completion_tokens`` to OpenAI itself (its reasoning
    models refuse ``max_tokens``) and as ``max_tokens`` to any other server.

    Args:
        model: the model id (for a served knowlyr checkpoint: its folder, see the module
            docs).
        calls_as_text: send past tool calls as the text the model generated instead of
            ``tool_calls`` (see the module docs); default: on for a served knowlyr
            checkpoint, off otherwise.
        **kwargs: as :class:`~knowlyr.agents.api.ApiAgent`.
    """

    name = "openai"

    def __init__(self, model: str, *, calls_as_text: bool | None = None, **kwargs: Any):
        marker = _checkpoint_marker(model)
        self.checkpoint = marker is not None
        self._send_system = True
        if marker is not None:
            if kwargs.get("system_prompt") is None:
                kwargs["system_prompt"] = marker.get("system_prompt")
                self._send_system = bool(marker.get("system_prompt"))
            if kwargs.get("tools") is None:
                kwargs["tools"] = marker.get("tools")
        self.calls_as_text = self.checkpoint if calls_as_text is None else calls_as_text
        super().__init__(model, **kwargs)

    def _make_client(self, api_key: str | None, base_url: str | None, timeout: float) -> Any:
        import openai

        key = api_key or os.environ.get("OPENAI_API_KEY")
        url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not key:
            if not url:
                raise ConfigError(
                    f"openai:{self.model} needs an API key: set OPENAI_API_KEY, or give the "
                    "base_url of an OpenAI-compatible server (openai:MODEL@http://host:port/v1)"
                )
            key = "not-needed"  # local servers do not check it
        client = openai.OpenAI(api_key=key, base_url=url, timeout=timeout, max_retries=0)
        self._official = client.base_url.host == _OPENAI_HOST
        return client

    def _api_errors(self) -> tuple[type[BaseException], ...]:
        import openai

        return (openai.APIError,)

    def _unparsed_reply(self, exc: BaseException) -> str | None:
        if _status(exc) != 500:
            return None
        text = getattr(getattr(exc, "response", None), "text", None)
        return _UNPARSED if isinstance(text, str) and text.strip() == _UNHANDLED_500 else None

    def _request(self, system: str, messages: list[dict[str, Any]]) -> ModelTurn:
        head = [{"role": "system", "content": system}] if self._send_system else []
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [*head, *messages],
            "tools": self._schemas,
        }
        if self.max_tokens is not None:
            kwargs["max_completion_tokens" if self._official else "max_tokens"] = self.max_tokens
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        r = self.client.chat.completions.create(**kwargs)
        if not hasattr(r, "choices"):  # the SDK hands back a body that is not JSON as text
            raise UnreadableReply(f"the reply is not a Chat Completions response: {r!r:.200}")
        msg = r.choices[0].message if r.choices else None
        text = (msg.content or "") if msg is not None else ""
        usage = r.usage
        turn = ModelTurn(
            text=text,
            calls=[],
            message={"role": "assistant", "content": text},
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )
        n = len(self.messages)
        tool_calls = list((msg.tool_calls or []) if msg is not None else [])
        legacy = getattr(msg, "function_call", None) if msg is not None else None
        if not tool_calls and legacy is not None:  # the older `function_call` field
            tool_calls = [_LegacyCall(f"call_{n}_0", legacy)]
        if not tool_calls:
            # a server without a tool parser: the call is text, in the model's own format
            # (<tool_call> JSON, a fenced block, a bare JSON object)
            action = parse_action_text(text)
            if action["tool"] != INVALID_ACTION_TOOL:
                turn.text = action["thought"]
                turn.calls = [ToolCallRequest(f"call_{n}_0", action["tool"], action["params"])]
            elif action["params"]["error"] != NO_CALL_ERROR:
                turn.error = action["params"]["error"]  # a call, but a malformed one
            return turn
        wire: list[dict[str, Any]] = []
        for i, tc in enumerate(tool_calls):
            call_id = tc.id or f"call_{n}_{i}"  # some servers send none; the answer needs one
            fn = getattr(tc, "function", None)
            if fn is None:  # a custom (non-function) tool call: no tool of ours
                name, args = str(getattr(tc, "type", "unknown")), ""
            else:
                name, args = fn.name or "", fn.arguments if fn.arguments is not None else ""
            turn.calls.append(ToolCallRequest(call_id, name, args))
            arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            wire.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        as_text = _calls_text(text, turn.calls) if self.calls_as_text else None
        if as_text is not None:
            turn.message = {"role": "assistant", "content": as_text}
        else:
            turn.message = {"role": "assistant", "content": text, "tool_calls": wire}
        return turn

    def _tool_results(self, results: list[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        return [
            {"role": "tool", "tool_call_id": call_id, "content": content}
            for call_id, content, _ in results
        ]


class _LegacyCall:
    """A reply's ``function_call`` (the API's field before ``tool_calls``) as a tool call."""

    type = "function"

    def __init__(self, call_id: str, function: Any):
        self.id = call_id
        self.function = function


def _checkpoint_marker(model: str) -> dict[str, Any] | None:
    """The knowlyr marker of ``model`` when it names a local checkpoint folder, else ``None``."""
    try:
        if not (Path(model) / MARKER_FILE).is_file():
            return None
    except (OSError, ValueError):
        return None
    return read_marker(model)


def _calls_text(thought: str, calls: list[ToolCallRequest]) -> str | None:
    """The text a Qwen-style model generated for ``thought`` and ``calls`` (``None``: a call's
    arguments are not a JSON object, so it has no such text)."""
    parts = [thought.strip()] if thought.strip() else []
    for call in calls:
        args = call.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return None
        if not isinstance(args, dict):
            return None
        parts.append(render_action({"tool": call.name, "params": args}))
    return "\n".join(parts)

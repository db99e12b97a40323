"""``AnthropicAgent``: a Claude model through the Messages API, acting with ``tool_use`` blocks.

The env's tools are sent as Anthropic tools (``name``, ``description``, ``input_schema``); a
reply's ``tool_use`` blocks are the actions, its text blocks the thought; the answers go back
in the next user message as ``tool_result`` blocks (``is_error`` when the tool failed or the
call was invalid), all results of one reply in one message, as the API requires. The key comes
from ``api_key=`` or ``ANTHROPIC_API_KEY``, the server from ``base_url=`` or
``ANTHROPIC_BASE_URL`` (with a base URL and no key a placeholder is sent).

Example:
    >>> from knowlyr.rollout import collect
    >>> trajs = collect("knowlyr/conversation", lambda: AnthropicAgent("claude-sonnet-4-5"), 8,
    ...                 concurrency=4)  # doctest: +SKIP

Or ``knowlyr rollout knowlyr/conversation --agent anthropic:claude-sonnet-4-5 -n 8``.
"""

from __future__ import annotations

import os
from typing import Any

from knowlyr.agents.api import (
    ApiAgent,
    ModelTurn,
    ToolCallRequest,
    UnreadableReply,
    function_schema,
)
from knowlyr.errors import ConfigError

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicAgent"]

#: ``max_tokens`` per call when none is given (the Messages API requires one).
DEFAULT_MAX_TOKENS = 4096


class AnthropicAgent(ApiAgent):
    """A Messages API model as an :class:`~knowlyr.agents.base.Agent` (see :class:`ApiAgent`).

    ``max_tokens`` defaults to :data:`DEFAULT_MAX_TOKENS`. The prompt tokens of a step count
    cache reads and writes too, priced as input (this agent sets no cache breakpoints, so
    there are none unless the server caches on its own).
    """

    name = "anthropic"

    def _make_client(self, api_key: str | None, base_url: str | None, timeout: float) -> Any:
        import anthropic

        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        if not key and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            if not url:
                raise ConfigError(
                    f"anthropic:{self.model} needs an API key: set ANTHROPIC_API_KEY "
                    "(or ANTHROPIC_BASE_URL for a compatible server)"
                )
            key = "not-needed"
        return anthropic.Anthropic(api_key=key, base_url=url, timeout=timeout, max_retries=0)

    def _api_errors(self) -> tuple[type[BaseException], ...]:
        import anthropic

        return (anthropic.APIError,)

    def _request(self, system: str, messages: list[dict[str, Any]]) -> ModelTurn:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
            "system": system,
            "messages": messages,
            "tools": self._anthropic_tools(),
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        r = self.client.messages.create(**kwargs)
        if not hasattr(r, "content"):  # the SDK hands back a body that is not JSON as text
            raise UnreadableReply(f"the reply is not a Messages API response: {r!r:.200}")
        texts: list[str] = []
        calls: list[ToolCallRequest] = []
        blocks: list[dict[str, Any]] = []
        for b in r.content or []:
            kind = getattr(b, "type", None)
            if kind == "text":
                if b.text:
                    texts.append(b.text)
                    blocks.append({"type": "text", "text": b.text})
            elif kind == "tool_use":
                calls.append(ToolCallRequest(b.id, b.name, b.input))
                blocks.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
            elif kind == "thinking":  # must go back unchanged with its signature
                blocks.append(
                    {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
                )
            elif kind == "redacted_thinking":
                blocks.append({"type": "redacted_thinking", "data": b.data})
        if not blocks:  # the API refuses an assistant message without content
            blocks.append({"type": "text", "text": "(no reply)"})
        u = r.usage
        prompt = None
        if u is not None and u.input_tokens is not None:
            cached = (getattr(u, "cache_creation_input_tokens", None) or 0) + (
                getattr(u, "cache_read_input_tokens", None) or 0
            )
            prompt = u.input_tokens + cached
        return ModelTurn(
            text="\n".join(texts),
            calls=calls,
            message={"role": "assistant", "content": blocks},
            prompt_tokens=prompt,
            completion_tokens=getattr(u, "output_tokens", None),
        )

    def _anthropic_tools(self) -> list[dict[str, Any]]:
        tools = []
        for s in self._schemas or []:
            fn = function_schema(s)
            tool = {
                "name": fn["name"],
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
            if fn.get("description"):
                tool["description"] = fn["description"]
            tools.append(tool)
        return tools

    def _tool_results(self, results: list[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        blocks = []
        for call_id, content, is_error in results:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": content or "(no output)",  # an error result must not be empty
            }
            if is_error:
                block["is_error"] = True
            blocks.append(block)
        return [{"role": "user", "content": blocks}]

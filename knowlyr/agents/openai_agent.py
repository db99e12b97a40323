"""``OpenAIAgent``: a model behind the OpenAI Chat Completions API, with native tool calling.

Works with OpenAI itself and with OpenAI-compatible servers (vLLM, ``transformers serve``,
the llama.cpp server...): the request uses only what they all understand (``messages``,
``tools`` as function schemas, optional ``max_tokens`` / ``temperature``); the answer to a
tool call is a ``role: tool`` message with its ``tool_call_id``. The key comes from
``api_key=`` or ``OPENAI_API_KEY``; with a ``base_url`` and no key a placeholder is sent (local
servers do not check it).

Servers must parse tool calls out of the model's text: vLLM with
``--enable-auto-tool-choice --tool-call-parser <parser>``, llama.cpp with ``--jinja``;
``transformers serve`` does it for Qwen-family checkpoints (see :mod:`knowlyr.agents.serve`,
whose ``served.policy`` is a spec for this agent). A server that does not parse them returns
the call as text, which is an invalid action here. ``transformers serve`` answers a tool call
it cannot parse (malformed JSON) with HTTP 500: that is retried like any 5xx (greedy decoding
gives the same reply again) and then ends the episode with a failed step, so give such a
server a small ``max_attempts``. ``base_url`` is the API root including ``/v1``
(``http://127.0.0.1:8000/v1``).

Example:
    >>> from knowlyr.rollout import collect
    >>> agent = lambda: OpenAIAgent("Qwen/Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:8000/v1")
    >>> trajs = collect("knowlyr/conversation", agent, 8, concurrency=8)  # doctest: +SKIP

Or ``knowlyr rollout knowlyr/conversation --agent openai:gpt-4o-mini -n 8 --concurrency 8``.
"""

from __future__ import annotations

import os
from typing import Any

from knowlyr.agents.api import ApiAgent, ModelTurn, ToolCallRequest
from knowlyr.errors import ConfigError

__all__ = ["OpenAIAgent"]

_OPENAI_HOST = "api.openai.com"


class OpenAIAgent(ApiAgent):
    """A Chat Completions model as an :class:`~knowlyr.agents.base.Agent` (see :class:`ApiAgent`).

    ``max_tokens`` is sent as ``max_completion_tokens`` to OpenAI itself (its reasoning
    models refuse ``max_tokens``) and as ``max_tokens`` to any other server.
    """

    name = "openai"

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

    def _request(self, system: str, messages: list[dict[str, Any]]) -> ModelTurn:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, *messages],
            "tools": self._schemas,
        }
        if self.max_tokens is not None:
            kwargs["max_completion_tokens" if self._official else "max_tokens"] = self.max_tokens
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        r = self.client.chat.completions.create(**kwargs)
        msg = r.choices[0].message if r.choices else None
        text = (msg.content or "") if msg is not None else ""
        calls: list[ToolCallRequest] = []
        wire: list[dict[str, Any]] = []
        n = len(self.messages)
        for i, tc in enumerate((msg.tool_calls or []) if msg is not None else []):
            call_id = tc.id or f"call_{n}_{i}"  # some servers send none; the answer needs one
            fn = getattr(tc, "function", None)
            if fn is None:  # a custom (non-function) tool call: no tool of ours
                name, args = str(getattr(tc, "type", "unknown")), ""
            else:
                name, args = fn.name or "", fn.arguments if fn.arguments is not None else ""
            calls.append(ToolCallRequest(call_id, name, args))
            arguments = args if isinstance(args, str) else _json(args)
            wire.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if wire:
            message["tool_calls"] = wire
        usage = r.usage
        return ModelTurn(
            text=text,
            calls=calls,
            message=message,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )

    def _tool_results(self, results: list[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        return [
            {"role": "tool", "tool_call_id": call_id, "content": content}
            for call_id, content, _ in results
        ]


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, ensure_ascii=False)

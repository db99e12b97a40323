"""A real local HTTP server that plays a tool-calling model, for testing API agents offline.

:class:`ModelServer` answers ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages``
(Anthropic) with the JSON those services send, tool calls included, so the official SDKs
(and :class:`~knowlyr.agents.OpenAIAgent` / :class:`~knowlyr.agents.AnthropicAgent`) can be
pointed at it. It is :class:`knowlyr.reward.testing.JudgeServer` with replies that call tools:
each request takes the next scripted :class:`ModelReply` (FIFO), else asks ``policy(request)``,
a function of the conversation so far (which keeps concurrent episodes apart). It records
every request, when it arrived and how many were in flight at once.

Example:
    >>> from knowlyr.agents import OpenAIAgent
    >>> from knowlyr.rollout import collect
    >>> with ModelServer() as server:                                          # doctest: +SKIP
    ...     server.script(ModelReply.rate_limited(retry_after=0.5),
    ...                   ModelReply.call("query_stats", {"order_id": "D62H0"}),
    ...                   ModelReply.call("respond", {"text": "Order D62H0 is pending."}))
    ...     agent = lambda: OpenAIAgent("m", base_url=server.openai_url)
    ...     [traj] = collect("knowlyr/conversation", agent, 1, env_kwargs={"family": "order_status"})
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from knowlyr.reward.testing import JudgeServer, _error_body, _Handler, _Server

__all__ = ["ModelReply", "ModelRequest", "ModelServer"]


@dataclass
class ModelReply:
    """One scripted answer.

    Attributes:
        status: HTTP status (200: a normal completion).
        text: the assistant text (with calls: the thought before them).
        calls: ``(tool name, arguments)`` pairs; arguments are an object, or a string sent
            verbatim (to script arguments that are not JSON).
        delay: seconds to wait before answering (on top of the server latency).
        headers: extra response headers (e.g. ``retry-after``).
        input_tokens / output_tokens: the usage the answer reports.
        body: sent verbatim as ``text/plain`` instead of the JSON answer (e.g. a body that is
            not the wire format, or :meth:`unparsed`'s).
    """

    status: int = 200
    text: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int = 120
    output_tokens: int = 40
    body: str | None = None

    @classmethod
    def call(cls, name: str, arguments: Any = None, *, text: str = "", **kw: Any) -> ModelReply:
        """A reply calling one tool."""
        return cls(text=text, calls=[(name, {} if arguments is None else arguments)], **kw)

    @classmethod
    def say(cls, text: str, **kw: Any) -> ModelReply:
        """A plain-text reply without a tool call."""
        return cls(text=text, **kw)

    @classmethod
    def rate_limited(cls, retry_after: float = 0.05, **kw: Any) -> ModelReply:
        """HTTP 429 with a ``retry-after`` header (seconds)."""
        return cls(status=429, headers={"retry-after": f"{retry_after:g}"}, **kw)

    @classmethod
    def server_error(cls, status: int = 500, **kw: Any) -> ModelReply:
        """An HTTP error (5xx by default)."""
        return cls(status=status, **kw)

    @classmethod
    def unparsed(cls, **kw: Any) -> ModelReply:
        """What ``transformers serve`` answers when it cannot parse the model's tool call: HTTP
        500 with Starlette's plain-text body ``Internal Server Error``."""
        return cls(status=500, body="Internal Server Error", **kw)

    @classmethod
    def slow(cls, seconds: float, reply: ModelReply | None = None) -> ModelReply:
        """``reply`` (default: an empty text reply) arriving after ``seconds``."""
        r = reply or cls()
        r.delay = seconds
        return r


@dataclass
class ModelRequest:
    """A request as the policy sees it, the same for both wire formats.

    Attributes:
        api: ``"openai"`` or ``"anthropic"``.
        body: the JSON body as sent.
        messages: ``(role, text)`` of the conversation: ``system``, ``user``, ``assistant``
            (its text and calls rendered as JSON) and ``tool`` (a tool result).
        tools: the names of the tools offered.
    """

    api: str
    body: dict[str, Any]
    messages: list[tuple[str, str]]
    tools: list[str]

    @property
    def tool_results(self) -> list[str]:
        return [text for role, text in self.messages if role == "tool"]

    @property
    def instruction(self) -> str:
        return next((text for role, text in self.messages if role == "user"), "")


def _request_view(api: str, body: dict[str, Any]) -> ModelRequest:
    out: list[tuple[str, str]] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append(("system", system))
    for m in body.get("messages") or []:
        role, content = m.get("role", ""), m.get("content")
        if role == "tool":
            out.append(("tool", content if isinstance(content, str) else json.dumps(content)))
            continue
        if isinstance(content, str):
            out.append((role, content))
        for b in content if isinstance(content, list) else []:
            kind = b.get("type")
            if kind == "text":
                out.append((role, b.get("text", "")))
            elif kind == "tool_use":
                out.append((role, json.dumps({"name": b.get("name"), "arguments": b.get("input")})))
            elif kind == "tool_result":
                c = b.get("content")
                out.append(("tool", c if isinstance(c, str) else json.dumps(c)))
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            out.append(
                (role, json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")}))
            )
    tools = [
        t.get("name") or (t.get("function") or {}).get("name") for t in body.get("tools") or []
    ]
    return ModelRequest(api, body, out, [t for t in tools if t])


class _ModelHandler(_Handler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) if length else b"{}")
        except ValueError:
            body = {}
        path = self.path.rstrip("/")
        api = "anthropic" if path.endswith("/v1/messages") else "openai"
        if not path.endswith(("/v1/messages", "/chat/completions")):
            self._send(404, {"error": {"message": f"no route {self.path}"}}, {})
            return
        owner: ModelServer = self.server.owner  # type: ignore[assignment]
        owner._enter()
        try:
            n, reply = owner._next_reply(api, body)
            wait = owner.latency + reply.delay
            if wait > 0:
                time.sleep(wait)
        finally:
            owner._leave()
        if reply.body is not None:
            self._send_text(reply.status, reply.body, reply.headers)
            return
        if reply.status != 200:
            self._send(reply.status, _error_body(api, reply.status), reply.headers)
            return
        model = body.get("model", "test-model")
        self._send(200, _payload(api, n, model, reply), reply.headers)

    def _send_text(self, status: int, text: str, headers: dict[str, str]) -> None:
        data = text.encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


def _payload(api: str, n: int, model: str, reply: ModelReply) -> dict[str, Any]:
    if api == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [
            {"type": "tool_use", "id": f"toolu_{n:04d}_{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(reply.calls)
        ]
        return {
            "id": f"msg_{n:06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if reply.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
        }
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n:04d}_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(reply.calls)
        ]
    return {
        "id": f"chatcmpl-{n:06d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


class ModelServer(JudgeServer):
    """A scriptable tool-calling model on 127.0.0.1 (random port), both wire formats.

    Args:
        latency: seconds every answer waits (e.g. 0.2 to model a real API).
        policy: ``ModelRequest -> ModelReply`` for requests the script does not answer
            (default: a plain-text reply, which an agent takes as an invalid action).

    Attributes:
        requests: ``(api, body)`` of every request, in arrival order.
        arrivals: ``time.monotonic()`` of every request's arrival, in the same order.
        max_in_flight: the most requests the server was answering at the same time.
        errors: exceptions the policy raised (each answered with HTTP 400, which an agent
            does not retry).
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        policy: Callable[[ModelRequest], ModelReply] | None = None,
    ):
        super().__init__(latency=latency)
        self.policy = policy or (lambda request: ModelReply.say("(no scripted reply)"))
        self.arrivals: list[float] = []
        self.errors: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._flight = threading.Lock()

    def script(self, *replies: ModelReply) -> ModelServer:  # type: ignore[override]
        """Queue replies for the next requests (FIFO); returns self."""
        with self._lock:
            self._script.extend(replies)  # type: ignore[arg-type]
        return self

    def clear(self) -> None:
        """Forget the script, the requests and the in-flight counts."""
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.arrivals.clear()
            self.errors.clear()
        self.max_in_flight = 0

    def view(self, i: int) -> ModelRequest:
        """Request ``i`` as a :class:`ModelRequest`."""
        return _request_view(*self.requests[i])

    def _next_reply(self, api: str, body: dict[str, Any]) -> tuple[int, ModelReply]:
        with self._lock:
            n = len(self.requests)
            self.requests.append((api, body))
            self.arrivals.append(time.monotonic())
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return n, scripted  # type: ignore[return-value]
        try:
            return n, self.policy(_request_view(api, body))
        except Exception as e:  # a broken policy: a 400, which ends the episode
            self.errors.append(f"request {n}: {type(e).__name__}: {e}")
            return n, ModelReply.server_error(400)

    def _enter(self) -> None:
        with self._flight:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._flight:
            self.in_flight -= 1

    def start(self) -> ModelServer:
        httpd = _Server(("127.0.0.1", 0), _ModelHandler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="model-server", daemon=True
        )
        self._thread.start()
        return self

    def __enter__(self) -> ModelServer:
        return self.start()

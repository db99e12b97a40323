"""A real local HTTP server speaking the Anthropic Messages and OpenAI Chat Completions APIs.

Point the official SDKs at it (``AsyncAnthropic(base_url=server.anthropic_url)``,
``AsyncOpenAI(base_url=server.openai_url)``) to test a judge without the network: it answers
``POST /v1/messages`` and ``POST /v1/chat/completions`` with the same JSON the real services
send, including their error bodies and ``retry-after`` headers. Each request takes the next
scripted :class:`Reply` (FIFO); when the script is empty, the default responder answers with
a valid judgement scoring every rubric the prompt lists.

Example:
    >>> with JudgeServer(latency=0.2) as server:                       # doctest: +SKIP
    ...     server.script(Reply.rate_limited(retry_after=0.1), Reply.malformed())
    ...     client = anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="x")
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["JudgeServer", "Reply", "default_answer"]

_RUBRICS_LINE = re.compile(r"RUBRICS:\s*([\w, ]+)")


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        status: HTTP status (200 = a normal completion).
        text: the assistant message content (200 only); ``None`` = the default answer.
        delay: seconds to wait before answering (on top of the server latency).
        headers: extra response headers (e.g. ``retry-after``).
        input_tokens / output_tokens: the usage the answer reports.
    """

    status: int = 200
    text: str | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int = 120
    output_tokens: int = 40

    @classmethod
    def scores(cls, scores: dict[str, float], rationale: str = "scripted", **kw: Any) -> Reply:
        """A well-formed judgement with the given 0-10 rubric scores."""
        return cls(text=json.dumps({"scores": scores, "rationale": rationale}), **kw)

    @classmethod
    def malformed(
        cls, text: str = "I think this step is quite good {score: high", **kw: Any
    ) -> Reply:
        """A 200 answer whose content is not the JSON the judge asked for."""
        return cls(text=text, **kw)

    @classmethod
    def rate_limited(cls, retry_after: float = 0.05, **kw: Any) -> Reply:
        """HTTP 429 with a ``retry-after`` header (seconds)."""
        return cls(status=429, headers={"retry-after": f"{retry_after:g}"}, **kw)

    @classmethod
    def server_error(cls, status: int = 500, **kw: Any) -> Reply:
        """An HTTP 5xx error."""
        return cls(status=status, **kw)

    @classmethod
    def slow(cls, seconds: float, **kw: Any) -> Reply:
        """A valid answer that arrives after ``seconds`` (to trigger client timeouts)."""
        return cls(delay=seconds, **kw)


def default_answer(prompt: str, score: float = 7.0) -> str:
    """A valid judgement scoring ``score`` on every rubric listed in the prompt's RUBRICS line."""
    m = _RUBRICS_LINE.search(prompt)
    names = [n.strip() for n in m.group(1).split(",") if n.strip()] if m else ["goal_progress"]
    return json.dumps({"scores": {n: score for n in names}, "rationale": "default answer"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK add ~40 ms to every keep-alive answer
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if self.path.rstrip("/").endswith("/v1/messages"):
            api = "anthropic"
        elif self.path.rstrip("/").endswith("/chat/completions"):
            api = "openai"
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}}, {})
            return
        owner = self.server.owner
        reply = owner._next(api, body)
        wait = owner.latency + reply.delay
        if wait > 0:
            time.sleep(wait)
        prompt = _prompt_text(api, body)
        if reply.status != 200:
            self._send(reply.status, _error_body(api, reply.status), reply.headers)
            return
        text = reply.text if reply.text is not None else owner.responder(prompt)
        model = body.get("model", "test-model")
        if api == "anthropic":
            payload: dict[str, Any] = {
                "id": f"msg_{owner.count:06d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
            }
        else:
            payload = {
                "id": f"chatcmpl-{owner.count:06d}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": reply.input_tokens,
                    "completion_tokens": reply.output_tokens,
                    "total_tokens": reply.input_tokens + reply.output_tokens,
                },
            }
        self._send(200, payload, reply.headers)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass


def _prompt_text(api: str, body: dict[str, Any]) -> str:
    parts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts.extend(b.get("text", "") for b in system if isinstance(b, dict))
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(b.get("text", "") for b in c if isinstance(b, dict))
    return "\n".join(parts)


def _error_body(api: str, status: int) -> dict[str, Any]:
    kind = {429: "rate_limit_error", 401: "authentication_error", 400: "invalid_request_error"}
    etype = kind.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = f"scripted HTTP {status}"
    if api == "anthropic":
        return {"type": "error", "error": {"type": etype, "message": message}}
    return {"error": {"message": message, "type": etype, "param": None, "code": str(status)}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # many clients connect at once
    owner: JudgeServer


class JudgeServer:
    """A scriptable local server for the Anthropic and OpenAI wire formats (127.0.0.1, random port).

    Args:
        latency: seconds every answer waits (e.g. 0.2 to model a real API).
        responder: ``prompt -> content`` for unscripted requests; default :func:`default_answer`.

    Attributes:
        requests: ``(api, body)`` of every request received, in arrival order.
    """

    def __init__(self, *, latency: float = 0.0, responder: Callable[[str], str] | None = None):
        if latency < 0:
            raise ValueError(f"latency must be >= 0, got {latency}")
        self.latency = latency
        self.responder = responder or default_answer
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def count(self) -> int:
        return len(self.requests)

    def script(self, *replies: Reply) -> JudgeServer:
        """Queue replies for the next requests (FIFO); returns self."""
        with self._lock:
            self._script.extend(replies)
        return self

    def _next(self, api: str, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append((api, body))
            return self._script.popleft() if self._script else Reply()

    def start(self) -> JudgeServer:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="judge-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(
                "JudgeServer is not running: call start() or use it as a context manager"
            )
        return self._httpd.server_address[1]

    @property
    def anthropic_url(self) -> str:
        """``base_url`` for ``anthropic.AsyncAnthropic``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """``base_url`` for ``openai.AsyncOpenAI``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

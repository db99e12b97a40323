"""What the API model agents share: the conversation, retries, invalid replies, usage and cost.

:class:`ApiAgent` is the base of :class:`~knowlyr.agents.openai_agent.OpenAIAgent` and
:class:`~knowlyr.agents.anthropic_agent.AnthropicAgent`. A subclass only speaks its wire
format (build a request, read a reply, shape tool results); this module owns the rest:

- **The conversation.** Per episode: the system prompt, the user instruction, then each
  assistant reply and the answer to it (the tool result, or a correction for a reply that
  was not a valid call). ``reset`` clears it.
- **The tools** are the env's OpenAI function schemas: :func:`knowlyr.rollout.collect` passes
  them in the reset ``info["tools"]`` (from the env's ``tool_schemas()``); pass ``tools=`` to
  use an agent by hand.
- **Several calls in one reply** are run in order, one env step each, before the model is
  asked again (the thought and the usage go on the first of them).
- **Replies that are not a valid call** become an :data:`~knowlyr.trajectory.INVALID_ACTION_TOOL`
  action with params ``{"raw", "error"}`` (the env answers it with an error observation) and
  the model is told what was wrong, so it can correct itself on the next turn: a reply
  without a tool call, a tool the env does not offer, arguments that are not a JSON object.
  **Plain text** is such a reply by default, even when the env has a ``respond`` tool: a model
  that was asked to call tools and answered in prose made a format error, and the trajectory
  says so (the reward's ``valid_format`` rule counts it). Pass ``text_tool="respond"`` to send
  non-empty plain text to that tool as ``{"text": ...}`` instead.
- **A reply the server could not parse** is also such a reply, not a failed call: a
  subclass recognises the error (``transformers serve`` answers HTTP 500 when the model's tool
  call is not valid JSON, see :class:`~knowlyr.agents.openai_agent.OpenAIAgent`), the step is
  an invalid action with that reason, and the model is asked again with the correction. It is
  not retried: greedy decoding would fail the same way.
- **Retries.** A call that fails with 408/409/425/429, a 5xx, a timeout or a lost connection,
  or is answered with something that is not the API's response (e.g. a proxy's HTML page
  with status 200), is retried up to ``max_attempts`` in all, waiting ``retry-after`` (or ``retry-after-ms``)
  when the server sends it, else an exponential backoff with jitter. Other errors (400, 401,
  404...) are not retried. When no attempt is left, :class:`ModelCallError` is raised;
  :func:`knowlyr.rollout.run_episode` records it as one last failed step and ends that
  episode (``outcome.reason = "error: ..."``): the other episodes go on.
- **Usage.** After each ``act`` the agent's ``last_usage`` holds the prompt and completion
  tokens of the model call behind that action and its cost in USD, from :data:`MODEL_PRICES`
  (override with ``prices=``) or ``None`` when the model's price is unknown; ``collect``
  stores it in ``Step.usage``.

Each agent owns one synchronous SDK client: ``collect(..., concurrency=N)`` runs N agents in
N threads, so N episodes (and model calls) are in flight at once.
"""

from __future__ import annotations

import abc
import email.utils
import json
import random
import re
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knowlyr.agents.base import Agent
from knowlyr.core.env import Action
from knowlyr.core.profile import BUILTIN_PROFILES
from knowlyr.errors import ConfigError, KnowlyrError
from knowlyr.trajectory import INVALID_ACTION_TOOL, Usage

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "MODEL_PRICES",
    "ApiAgent",
    "ModelCallError",
    "ModelTurn",
    "ToolCallRequest",
    "UnreadableReply",
    "function_schema",
    "price_for",
    "retry_after",
    "split_base_url",
]

#: The system prompt when neither the agent (``system_prompt=``) nor the env
#: (``info["system_prompt"]``) gives one; ``{terminal}`` names the tools that end the episode.
DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that solves the user's task with the tools provided. "
    "Call exactly one tool per turn."
)
_TERMINAL_HINT = " When the task is done, call {terminal}: this ends the episode."

#: USD per million tokens, ``(input, output)``, of some well-known models (list prices at the
#: time of writing; check your provider's page and pass ``prices=`` to correct or extend).
#: A dated snapshot (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``) costs what its
#: base name costs. A model not listed has no cost (``None``), never a guessed one.
MODEL_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-opus-4-1": (15.00, 75.00),
}
_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d\d-\d\d)$")


def price_for(
    model: str, prices: Mapping[str, tuple[float, float]] | None = None
) -> tuple[float, float] | None:
    """``(input, output)`` USD per million tokens of ``model``, or ``None`` when unknown.

    ``prices`` are looked up before :data:`MODEL_PRICES`; a dated snapshot name falls back
    to its base name.

    Example:
        >>> price_for("gpt-4o-mini-2024-07-18")
        (0.15, 0.6)
        >>> price_for("my-local-model") is None
        True
    """
    table = {**MODEL_PRICES, **(prices or {})}
    if model in table:
        return table[model]
    base = _SNAPSHOT.sub("", model)
    return table.get(base) if base != model else None


def split_base_url(spec: str) -> tuple[str, str | None]:
    """``"model@http://host/v1"`` -> ``("model", "http://host/v1")``; no URL -> ``(spec, None)``.

    Only an ``@`` followed by ``http://`` or ``https://`` starts a URL, so model ids that
    contain ``@`` (``claude-sonnet-4-5@20250929`` on Vertex) stay whole.
    """
    m = re.search(r"@(https?://\S+)$", spec)
    return (spec[: m.start()], m.group(1)) if m else (spec, None)


class ModelCallError(KnowlyrError):
    """A model call failed for good: not retryable, or no attempt left.

    :func:`knowlyr.rollout.run_episode` records it as a failed last step of the episode.

    Attributes:
        attempts: how many requests were made.
        status: the last HTTP status, when there was one.
    """

    def __init__(self, message: str, *, attempts: int, status: int | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.status = status


class UnreadableReply(KnowlyrError):
    """The server answered with something that is not the API's response (e.g. a proxy's HTML
    page with status 200); retried like a 5xx. A subclass's ``_request`` raises it."""


@dataclass
class ToolCallRequest:
    """One tool call as the model wrote it (``arguments``: a JSON string or an object)."""

    id: str
    name: str
    arguments: Any


@dataclass
class ModelTurn:
    """One parsed model reply.

    Attributes:
        text: the reply's text (the thought when it calls tools).
        calls: the tool calls, in order.
        message: the assistant message to keep in the conversation (``None``: none, e.g. the
            server failed to parse the reply and its text is lost).
        prompt_tokens / completion_tokens: usage the server reported (``None``: not reported).
        error: why the reply is no valid call when that is known without looking at ``calls``
            (a tool call in the text that does not parse, a reply the server could not parse);
            the action is then an invalid action with this reason.
    """

    text: str
    calls: list[ToolCallRequest]
    message: dict[str, Any] | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


@dataclass
class _Pending:
    """The action the agent returned last, waiting for its observation."""

    call_id: str | None  # None: a reply without a tool call
    tool: str
    error: str | None = None  # why it was an invalid action


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` / ``retry-after``), if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(ra)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, UnreadableReply):
        return True
    status = _status(exc)
    if status is not None:
        return status in (408, 409, 425, 429) or status >= 500
    # the SDKs' APITimeoutError is an APIConnectionError
    return any(c.__name__ == "APIConnectionError" for c in type(exc).__mro__) or isinstance(
        exc, TimeoutError | ConnectionError
    )


def _describe(exc: BaseException) -> str:
    status = _status(exc)
    text = str(exc) or type(exc).__name__
    return f"HTTP {status}: {text}" if status is not None else f"{type(exc).__name__}: {text}"


class ApiAgent(Agent):
    """Base of the agents that call a hosted or local model over an HTTP API.

    Args:
        model: the model id sent to the server (also ``AgentInfo.model``).
        api_key: the key (default: the provider's environment variable; a local server needs
            none).
        base_url: the server (default: the provider's; e.g. a vLLM server's ``.../v1``).
        system_prompt: the system message (default: the env's ``info["system_prompt"]``, else
            :data:`DEFAULT_SYSTEM_PROMPT` naming the domain's terminal tools).
        tools: OpenAI function schemas of the tools (default: the env's, from ``info["tools"]``).
        text_tool: send a plain-text reply to this tool as ``{"text": reply}`` (e.g.
            ``"respond"``); default: a plain-text reply is an invalid action.
        timeout: seconds per HTTP request.
        max_attempts: requests per model call at most (first try included).
        backoff_base / backoff_max: backoff ``base * 2**attempt`` seconds capped at ``max``,
            with equal jitter, when the server sends no ``retry-after``.
        max_retry_after: the longest ``retry-after`` honoured (seconds).
        max_tokens: completion token limit per call (``None``: the provider's default).
        temperature: sampling temperature (``None``: not sent, the server's default).
        prices: ``{model: (input, output)}`` USD per million tokens, looked up before
            :data:`MODEL_PRICES`.

    Raises:
        ConfigError: a bad argument, or no API key for the provider's own endpoint.
    """

    name = "api"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        system_prompt: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        text_tool: str | None = None,
        timeout: float = 60.0,
        max_attempts: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        max_retry_after: float = 120.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        prices: Mapping[str, tuple[float, float]] | None = None,
    ):
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty string, got {model!r}")
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(f"max_attempts must be a positive int, got {max_attempts!r}")
        if backoff_base < 0 or backoff_max < 0 or max_retry_after < 0:
            raise ConfigError(
                "backoff_base, backoff_max and max_retry_after must be >= 0, got "
                f"{backoff_base}, {backoff_max}, {max_retry_after}"
            )
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError(f"max_tokens must be positive, got {max_tokens}")
        self.model = model
        self.base_url = base_url
        self.system_prompt = system_prompt
        self.tools = tools
        self.text_tool = text_tool
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.prices = dict(prices or {})
        self.client = self._make_client(api_key, base_url, timeout)
        #: usage of the model call behind the last action (``None``: no call, e.g. the second
        #: tool call of one reply)
        self.last_usage: Usage | None = None
        #: requests made by the last model call (retries included)
        self.last_attempts = 0
        self.messages: list[dict[str, Any]] = []
        self.reset()

    # -- what a provider implements ----------------------------------------------------------

    @abc.abstractmethod
    def _make_client(self, api_key: str | None, base_url: str | None, timeout: float) -> Any:
        """The SDK client (SDK retries off: this class retries)."""

    @abc.abstractmethod
    def _request(self, system: str, messages: list[dict[str, Any]]) -> ModelTurn:
        """One API call with the conversation so far; SDK exceptions propagate."""

    @abc.abstractmethod
    def _tool_results(self, results: list[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        """Messages answering tool calls: ``(call_id, content, is_error)`` each."""

    def _user_message(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    @abc.abstractmethod
    def _api_errors(self) -> tuple[type[BaseException], ...]:
        """The SDK's exception classes for failed calls."""

    def _unparsed_reply(self, exc: BaseException) -> str | None:
        """Why ``exc`` means the server could not parse the model's reply (``None``: it does
        not). Such an error is the model's invalid reply, not a failed call: not retried."""
        return None

    # -- episode -------------------------------------------------------------------------------

    def reset(self, info: dict[str, Any] | None = None) -> None:
        info = info or {}
        task = info.get("task") or {}
        get = task.get if isinstance(task, dict) else lambda k, d=None: getattr(task, k, d)
        self._instruction: str | None = get("instruction")
        self._schemas: list[dict[str, Any]] | None = self.tools or info.get("tools")
        self._tool_names = [_schema_name(s) for s in self._schemas or []]
        self._system = (
            self.system_prompt
            or info.get("system_prompt")
            or _default_prompt(get("domain"), self._tool_names)
        )
        self.messages = []
        self._queue: deque[tuple[ToolCallRequest, str]] = deque()
        self._results: list[tuple[str, str, bool]] = []
        self._feedback: list[str] = []
        self._pending: _Pending | None = None
        self.last_usage = None
        self.last_attempts = 0

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if not self._schemas:
            raise ConfigError(
                f"{type(self).__name__} needs the env's tool schemas: run it through "
                "knowlyr.rollout.collect (which passes info['tools']) or pass "
                "tools=env.unwrapped.tool_schemas()"
            )
        if not self.messages:
            self.messages.append({"role": "user", "content": self._instruction or observation})
        else:
            self._observe(observation, info)
        self.last_usage = None
        if self._queue:  # the next call of a reply that held several
            call, thought = self._queue.popleft()
            return self._call_action(call, thought)
        self._flush()
        turn = self._call_model()
        if turn.message is not None:
            self.messages.append(turn.message)
        usage = self._usage(turn)
        if not turn.calls:
            action = self._text_action(turn.text, turn.error)
        else:
            self._queue.extend((c, "") for c in turn.calls[1:])
            action = self._call_action(turn.calls[0], turn.text.strip())
        self.last_usage = usage
        return action

    def close(self) -> None:
        """Close the HTTP client."""
        close = getattr(self.client, "close", None)
        if callable(close):
            close()

    # -- internals ---------------------------------------------------------------------------

    def _observe(self, observation: str, info: dict[str, Any]) -> None:
        p, self._pending = self._pending, None
        if p is None:
            return
        failed = info.get("exit_code") not in (None, 0)
        content = observation
        if p.error is not None:  # tell the model what was wrong, not "unknown tool invalid_action"
            content = f"Error: {p.error}. {self._how_to_call()}"
        if p.call_id is None:
            self._feedback.append(content)
        else:
            self._results.append((p.call_id, content, failed or p.error is not None))

    def _flush(self) -> None:
        if self._results:
            self.messages.extend(self._tool_results(self._results))
            self._results = []
        if self._feedback:
            self.messages.append(self._user_message("\n\n".join(self._feedback)))
            self._feedback = []

    def _how_to_call(self) -> str:
        return f"Reply with a call to one of the tools: {', '.join(self._tool_names)}."

    def _text_action(self, text: str, error: str | None = None) -> Action:
        bare = text.strip()
        if self.text_tool is not None and bare and error is None:
            self._pending = _Pending(None, self.text_tool)
            return {"tool": self.text_tool, "params": {"text": bare}, "thought": ""}
        if error is None:
            error = "the reply holds no tool call" if bare else "the reply is empty"
        self._pending = _Pending(None, INVALID_ACTION_TOOL, error=error)
        return {"tool": INVALID_ACTION_TOOL, "params": {"raw": bare, "error": error}, "thought": ""}

    def _call_action(self, call: ToolCallRequest, thought: str) -> Action:
        args, error = call.arguments, None
        if call.name not in self._tool_names:
            error = f"unknown tool {call.name!r}"
        elif isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as e:
                error = f"the arguments of {call.name} are not valid JSON ({e})"
        if error is None and not isinstance(args, dict):
            error = f"the arguments of {call.name} must be a JSON object, got {type(args).__name__}"
        if error is not None:
            self._pending = _Pending(call.id, INVALID_ACTION_TOOL, error=error)
            raw = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
            return {
                "tool": INVALID_ACTION_TOOL,
                "params": {"raw": raw, "error": error},
                "thought": thought,
                "call_id": call.id,
            }
        self._pending = _Pending(call.id, call.name)
        return {"tool": call.name, "params": args, "thought": thought, "call_id": call.id}

    def _usage(self, turn: ModelTurn) -> Usage | None:
        pt, ct = turn.prompt_tokens, turn.completion_tokens
        if pt is None and ct is None:
            return None
        price = price_for(self.model, self.prices)
        cost = None
        if price is not None and pt is not None and ct is not None:
            cost = (pt * price[0] + ct * price[1]) / 1e6
        return Usage(prompt_tokens=pt, completion_tokens=ct, cost_usd=cost)

    def _backoff(self, attempt: int, after: float | None) -> float:
        if after is not None:
            after = min(after, self.max_retry_after)
            return after + random.uniform(0, 0.1 * after)
        cap = min(self.backoff_max, self.backoff_base * 2**attempt)
        return cap / 2 + random.uniform(0, cap / 2)

    def _call_model(self) -> ModelTurn:
        errors = (*self._api_errors(), UnreadableReply)
        for attempt in range(self.max_attempts):
            self.last_attempts = attempt + 1
            try:
                return self._request(self._system, self.messages)
            except errors as e:
                unparsed = self._unparsed_reply(e)
                if unparsed is not None:
                    return ModelTurn(text="", calls=[], message=None, error=unparsed)
                last = attempt + 1 == self.max_attempts
                if not _retryable(e) or last:
                    why = "no attempt left" if last and _retryable(e) else "not retryable"
                    raise ModelCallError(
                        f"{self.name}:{self.model} call failed ({why}, {attempt + 1} "
                        f"attempt{'s' if attempt else ''}): {_describe(e)}"[:1000],
                        attempts=attempt + 1,
                        status=_status(e),
                    ) from e
                time.sleep(self._backoff(attempt, retry_after(e)))
        raise AssertionError("unreachable")  # pragma: no cover


def _schema_name(schema: dict[str, Any]) -> str:
    fn = schema.get("function") if isinstance(schema.get("function"), dict) else schema
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a tool schema needs a name, got {schema!r:.200}")
    return name


def _default_prompt(domain: str | None, tools: list[str]) -> str:
    profile = BUILTIN_PROFILES.get(domain) if isinstance(domain, str) else None
    terminal = [t for t in (profile.terminal_tools if profile else []) if t in tools]
    if not terminal:
        return DEFAULT_SYSTEM_PROMPT
    return DEFAULT_SYSTEM_PROMPT + _TERMINAL_HINT.format(terminal=" or ".join(terminal))


def function_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``function`` part of an OpenAI tool schema (a bare function schema is returned as is)."""
    fn = schema.get("function")
    return fn if isinstance(fn, dict) else schema

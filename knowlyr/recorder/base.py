"""Adapter protocol, the adapter registry and fast, type-safe trajectory builders.

An adapter turns one *record* of a log format into a :class:`~knowlyr.trajectory.Trajectory`.
What a record is depends on the file: a whole JSON document (an OpenHands event list, a
SWE-agent ``.traj``), one line of a JSONL file (an OpenHands ``output.jsonl`` row), or a
whole JSONL file for session formats (a Claude Code session is one trajectory made of many
lines: :attr:`Adapter.session`).

Adapters build steps with :func:`step`, :func:`tool_call`, :func:`observation`... which
construct the pydantic models without re-validating them (the builders coerce every value
to the field's type first, so the result is what validation would give). That is what makes
conversion cheap; ``tests/recorder`` checks every adapter's output re-validates unchanged.
An adapter may also give a record as its trajectory's JSON document (:meth:`Adapter.document`,
built with :func:`trajectory_document`): writers of trajectory JSON then skip the models
altogether. The OpenHands adapters do; the tests check the document is byte for byte what
the models serialise to.

Example:
    >>> from knowlyr.recorder import Adapter, register_adapter
    >>> class MyLog(Adapter):
    ...     name = "mylog"
    ...     description = "My agent's JSON: {task, steps: [{cmd, out}]}"
    ...     def sniff(self, obj):
    ...         return isinstance(obj, dict) and "steps" in obj and "cmd" in str(obj)[:200]
    ...     def convert(self, obj, *, path=None, line=None):
    ...         steps = [step(i, action=tool_call("bash", {"command": s["cmd"]}),
    ...                       observation=observation(s["out"])) for i, s in enumerate(obj["steps"])]
    ...         return trajectory(task(str(obj["task"])), steps)
    >>> register_adapter(MyLog())  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel

from knowlyr.errors import RecordError, UnknownFormatError
from knowlyr.trajectory import (
    SCHEMA_VERSION,
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
    Usage,
    document_id,
    shared_fields_set,
)

__all__ = [
    "Adapter",
    "adapters",
    "agent_info",
    "as_float",
    "as_int",
    "as_opt_str",
    "as_str",
    "fields_of",
    "get_adapter",
    "list_formats",
    "observation",
    "outcome",
    "parse_time",
    "register_adapter",
    "source",
    "step",
    "task",
    "tool_call",
    "trajectory",
    "trajectory_document",
    "unregister_adapter",
    "usage",
]


class Adapter(ABC):
    """One log format. Subclass, set :attr:`name`, implement :meth:`sniff` and :meth:`convert`.

    Attributes:
        name: the format name users pass as ``-f``/``format=``.
        description: one line for ``knowlyr record formats``.
        extensions: file suffixes this format is written with (detection hint only).
        session: ``True`` when a whole JSONL file is ONE record (its lines are passed to
            :meth:`convert` as a list), ``False`` when each line is its own record.
        priority: detection order, lower first (put specific formats before generic ones).
        agent_tools: the tool schemas (OpenAI function format) of every agent that writes
            this format, when they are fixed (e.g. a bash-only agent); ``None`` when they vary
            from run to run (a log that records them keeps them as ``metadata["tools"]``).
            Exports declare these tools on the rows of such trajectories.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    extensions: ClassVar[tuple[str, ...]] = (".json", ".jsonl")
    session: ClassVar[bool] = False
    priority: ClassVar[int] = 100
    #: ``True`` when the adapter builds :meth:`document` itself (not through the models).
    documents: ClassVar[bool] = False
    agent_tools: ClassVar[tuple[dict[str, Any], ...] | None] = None

    @abstractmethod
    def sniff(self, obj: Any) -> bool:
        """Whether ``obj`` (a parsed JSON document, or the first line of a JSONL file) is this format."""

    def split(self, doc: Any) -> list[Any]:
        """The records of a parsed JSON document (default: the document is one record)."""
        return [doc]

    @abstractmethod
    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        """Convert one record. Raise :class:`~knowlyr.errors.RecordError` with a reason when it is malformed."""

    def document(
        self, obj: Any, *, path: str | None = None, line: int | None = None
    ) -> dict[str, Any]:
        """What :meth:`convert` returns, as the JSON document ``to_json`` writes, in plain
        Python objects, with ``source`` left empty. This default goes through the models;
        an adapter that builds the document directly (with :func:`trajectory_document`) sets
        :attr:`documents`, and writers of trajectory JSON (``knowlyr record convert``, the
        store's ingest) then never build the models: for a 20-step log that is a third of
        the conversion."""
        doc = orjson.loads(self.convert(obj, path=path, line=line).to_json())
        doc["source"] = {}
        return doc

    def fail(self, reason: str, *, path: str | None = None, line: int | None = None) -> RecordError:
        """A :class:`RecordError` naming this format (``raise self.fail("no 'history'")``)."""
        return RecordError(f"{self.name}: {reason}", path=path, line=line)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


_REGISTRY: dict[str, Adapter] = {}
_ORDER: list[Adapter] = []  # detection order, rebuilt after each (un)registration


def register_adapter(adapter: Adapter | type[Adapter], *, replace: bool = False) -> Adapter:
    """Register an adapter (instance or class) under its ``name``.

    Example:
        >>> class MyAdapter(Adapter): ...  # doctest: +SKIP
        >>> register_adapter(MyAdapter)  # doctest: +SKIP
        <MyAdapter 'mylog'>

    Raises:
        ValueError: when the adapter has no name, or the name is taken and ``replace`` is False.
    """
    inst = adapter() if isinstance(adapter, type) else adapter
    if not inst.name:
        raise ValueError(f"{type(inst).__name__}.name is empty: set a format name")
    if inst.name in _REGISTRY and not replace and type(_REGISTRY[inst.name]) is not type(inst):
        raise ValueError(
            f"format {inst.name!r} is already registered; pass replace=True to override it"
        )
    _REGISTRY[inst.name] = inst
    _ORDER.clear()
    return inst


def unregister_adapter(name: str) -> None:
    """Remove a registered format (no error when it is not registered)."""
    _REGISTRY.pop(name, None)
    _ORDER.clear()


def _ensure_builtin() -> None:
    if not _REGISTRY or "openhands" not in _REGISTRY:
        import knowlyr.recorder.adapters  # noqa: F401  registers the built-in adapters


def list_formats() -> list[str]:
    """Names of the registered formats, in detection order.

    Example:
        >>> list_formats()[:3]
        ['knowlyr', 'mini_swe_agent', 'swe_agent']
    """
    return [a.name for a in adapters()]


def adapters() -> list[Adapter]:
    """The registered adapters, in detection order."""
    _ensure_builtin()
    if not _ORDER:
        _ORDER.extend(sorted(_REGISTRY.values(), key=lambda a: (a.priority, a.name)))
    return list(_ORDER)


def get_adapter(name: str) -> Adapter:
    """The adapter registered as ``name``.

    Example:
        >>> get_adapter("swe_agent")
        <SWEAgentAdapter 'swe_agent'>

    Raises:
        UnknownFormatError: naming the known formats (and the closest one).
    """
    _ensure_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = sorted(_REGISTRY)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownFormatError(
            f"unknown format {name!r}.{hint} Known formats: {', '.join(known)}"
        ) from None


# -- coercion ---------------------------------------------------------------------------------


def as_str(x: Any) -> str:
    """A value as text: ``None`` -> ``""``, str kept, anything else JSON-ish via str()."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if isinstance(x, list):
        # content-part lists ([{"type": "text", "text": ...}]) and plain lists of strings
        parts = []
        for p in x:
            if isinstance(p, dict):
                t = p.get("text", p.get("content"))
                parts.append(as_str(t))
            else:
                parts.append(as_str(p))
        return "\n".join(parts)
    return str(x)


def as_dict(x: Any) -> dict[str, Any]:
    """``x`` when it is a dict, else ``{}`` (for optional sub-objects of a log)."""
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    """``x`` when it is a list, else ``[]``."""
    return x if isinstance(x, list) else []


def as_opt_str(x: Any) -> str | None:
    return None if x is None else as_str(x)


def as_int(x: Any) -> int | None:
    """An int, or ``None`` when ``x`` is missing or not a number (bools are not ints here)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x == x and abs(x) < 2**63:
        return int(x)
    if isinstance(x, str):
        try:
            return int(x.strip())
        except ValueError:
            return None
    return None


def as_float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        f = float(x)
        return f if f == f and f not in (float("inf"), float("-inf")) else None
    if isinstance(x, str):
        try:
            return as_float(float(x))
        except ValueError:
            return None
    return None


def parse_time(x: Any) -> datetime | None:
    """ISO-8601 text (``Z`` allowed) or epoch seconds/milliseconds -> datetime; else ``None``."""
    if isinstance(x, str) and x:
        try:
            return datetime.fromisoformat(x)
        except ValueError:
            return None
    if isinstance(x, int | float) and not isinstance(x, bool):
        try:
            return datetime.fromtimestamp(x / 1000 if x > 1e11 else x).astimezone()
        except (OverflowError, OSError, ValueError):
            return None
    return None


# -- builders (construct without re-validation; every value is coerced first) -----------------

_new = object.__new__
_set = object.__setattr__


_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_extra_set = BaseModel.__dict__["__pydantic_extra__"].__set__
_private_set = BaseModel.__dict__["__pydantic_private__"].__set__


def _every_field(cls: type) -> set[str]:
    """The shared ``fields_set`` of all of ``cls``'s fields (see SharedFieldsSet)."""
    try:
        return _EVERY_FIELD[cls]
    except KeyError:
        return _EVERY_FIELD.setdefault(cls, shared_fields_set(cls.model_fields))


_EVERY_FIELD: dict[type, set[str]] = {}


def _build(
    cls: type,
    d: dict[str, Any],
    extra: dict[str, Any] | None = None,
    fields_set: frozenset[str] | None = None,
) -> Any:
    """What ``cls.model_construct(**d)`` does, minus its per-field loop (``d`` has every field;
    ``fields_set`` defaults to all of them)."""
    m = _new(cls)
    _set(m, "__dict__", d)
    if fields_set is None:
        fs = _every_field(cls)
        _fields_set(m, fs if len(fs) == len(d) else shared_fields_set(d))
    else:
        _fields_set(m, shared_fields_set(fields_set))
    _extra_set(m, extra)
    _private_set(m, None)
    return m


def _jsonable(x: Any, depth: int = 0) -> Any:
    """Keep JSON-compatible values (str keys) so the model serialises; stringify anything else."""
    if x is None or isinstance(x, str | bool | int | float):
        return x
    if depth > 64:
        return str(x)
    if isinstance(x, dict):
        return {k if isinstance(k, str) else str(k): _jsonable(v, depth + 1) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v, depth + 1) for v in x]
    return str(x)


def tool_call(tool: Any, params: Any = None, call_id: Any = None) -> ToolCall:
    """A :class:`ToolCall`; ``params`` that is not a dict is kept as ``{"input": params}``."""
    if params is None:
        params = {}
    elif type(params) is not dict:
        params = _jsonable(params) if isinstance(params, dict) else {"input": _jsonable(params)}
    return _build(
        ToolCall,
        {
            "tool": tool if type(tool) is str else as_str(tool),
            "params": params,
            "call_id": call_id if call_id is None or type(call_id) is str else as_str(call_id),
        },
    )


def observation(output: Any = "", exit_code: Any = None, error: Any = None) -> Observation:
    return _build(
        Observation,
        {
            "output": output if type(output) is str else as_str(output),
            "exit_code": exit_code
            if type(exit_code) is int or exit_code is None
            else as_int(exit_code),
            "error": error if error is None or type(error) is str else as_str(error),
        },
    )


def usage(
    prompt_tokens: Any = None, completion_tokens: Any = None, cost_usd: Any = None
) -> Usage | None:
    """A :class:`Usage`, or ``None`` when the log has none of the three."""
    if prompt_tokens is None and completion_tokens is None and cost_usd is None:
        return None
    p = prompt_tokens if type(prompt_tokens) is int else as_int(prompt_tokens)
    c = completion_tokens if type(completion_tokens) is int else as_int(completion_tokens)
    cost = None if cost_usd is None else as_float(cost_usd)
    if p is None and c is None and cost is None:
        return None
    return _build(Usage, {"prompt_tokens": p, "completion_tokens": c, "cost_usd": cost})


def _int_list(x: Any) -> list[int] | None:
    if not isinstance(x, list) or not x:
        return None
    out = [as_int(v) for v in x]
    return None if any(v is None for v in out) else out  # type: ignore[return-value]


def _float_list(x: Any) -> list[float] | None:
    if not isinstance(x, list) or not x:
        return None
    out: list[float] = []
    for v in x:
        if isinstance(v, dict):  # OpenAI logprobs content: [{"token", "logprob", ...}]
            v = v.get("logprob")
        f = as_float(v)
        if f is None:
            return None
        out.append(f)
    return out


def step(
    index: int,
    *,
    thought: Any = "",
    action: ToolCall | None = None,
    message: Any = None,
    observation: Observation | None = None,
    reward: Any = None,
    usage: Usage | None = None,
    token_ids: Any = None,
    logprobs: Any = None,
    timestamp: Any = None,
    duration_s: Any = None,
    metadata: dict[str, Any] | None = None,
) -> Step:
    """A :class:`Step`. ``timestamp`` may be ISO text or epoch; lists are checked element-wise."""
    # type(x) is ... fast paths: this runs for every step of every log
    return _build(
        Step,
        {
            "index": index,
            "thought": thought if type(thought) is str else as_str(thought),
            "action": action,
            "message": message if message is None or type(message) is str else as_str(message),
            "observation": observation,
            "reward": None if reward is None else as_float(reward),
            "usage": usage,
            "token_ids": None if token_ids is None else _int_list(token_ids),
            "logprobs": None if logprobs is None else _float_list(logprobs),
            "timestamp": None
            if timestamp is None
            else timestamp
            if isinstance(timestamp, datetime)
            else parse_time(timestamp),
            "duration_s": None if duration_s is None else as_float(duration_s),
            "metadata": _jsonable(metadata) if metadata else {},
        },
    )


def task(
    task_id: Any,
    instruction: Any = "",
    *,
    domain: str = "generic",
    suite: Any = None,
    metadata: dict[str, Any] | None = None,
) -> TaskInfo:
    return _build(
        TaskInfo,
        {
            "task_id": as_str(task_id),
            "domain": domain,
            "suite": as_opt_str(suite),
            "instruction": as_str(instruction),
            "metadata": _jsonable(metadata) if metadata else {},
        },
        extra={},
    )


def agent_info(name: Any = "unknown", model: Any = None, version: Any = None) -> AgentInfo:
    return _build(
        AgentInfo,
        {
            "name": as_str(name) or "unknown",
            "model": as_opt_str(model),
            "version": as_opt_str(version),
        },
    )


def outcome(
    *,
    success: Any = None,
    score: Any = None,
    terminated: bool = False,
    truncated: bool = False,
    tests_passed: Any = None,
    tests_failed: Any = None,
    reason: Any = None,
    resolved: Any = None,
    submission: Any = None,
    label_source: Any = None,
) -> Outcome:
    return _build(
        Outcome,
        {
            "success": success if isinstance(success, bool) else None,
            "score": as_float(score),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "tests_passed": as_int(tests_passed),
            "tests_failed": as_int(tests_failed),
            "reason": as_opt_str(reason),
            "resolved": resolved if isinstance(resolved, bool) else None,
            "submission": as_opt_str(submission),
            "label_source": as_opt_str(label_source),
        },
    )


def trajectory(
    task: TaskInfo,
    steps: Iterable[Step],
    *,
    agent: AgentInfo | None = None,
    outcome: Outcome | None = None,
    metadata: dict[str, Any] | None = None,
) -> Trajectory:
    """A :class:`Trajectory` with its content-hash ``id`` filled in (source is set by the pipeline)."""
    t = _build(
        Trajectory,
        {
            "id": "",
            "schema_version": SCHEMA_VERSION,
            "task": task,
            "agent": agent if agent is not None else agent_info(),
            "steps": list(steps),
            "outcome": outcome if outcome is not None else _build(Outcome, _OUTCOME_DEFAULT.copy()),
            "source": _build(
                Source, {"format": "knowlyr", "path": None, "blob": None, "line": None}
            ),
            "metadata": _jsonable(metadata) if metadata else {},
        },
    )
    t.__dict__["id"] = t.content_hash()
    return t


def fields_of(model: BaseModel) -> dict[str, Any]:
    """A model built here as its JSON document: its fields without the ``None`` ones, as
    ``to_json`` writes them (nested models must already be documents)."""
    return {k: v for k, v in model.__dict__.items() if v is not None}


def trajectory_document(
    task: TaskInfo,
    steps: list[dict[str, Any]],
    *,
    agent: AgentInfo | None = None,
    outcome: Outcome | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What :func:`trajectory` builds, as its JSON document (see :meth:`Adapter.document`):
    ``steps`` are step documents, ``id`` is the content hash, ``source`` is empty."""
    t = fields_of(task)
    return {
        "id": document_id(t["task_id"], t["instruction"], steps),
        "schema_version": SCHEMA_VERSION,
        "task": t,
        "agent": fields_of(agent if agent is not None else agent_info()),
        "steps": steps,
        "outcome": fields_of(outcome) if outcome is not None else _OUTCOME_DOCUMENT.copy(),
        "source": {},
        "metadata": _jsonable(metadata) if metadata else {},
    }


_OUTCOME_DOCUMENT = {"terminated": False, "truncated": False}
_OUTCOME_DEFAULT = {
    "success": None,
    "score": None,
    "terminated": False,
    "truncated": False,
    "tests_passed": None,
    "tests_failed": None,
    "reason": None,
    "resolved": None,
    "submission": None,
    "label_source": None,
}


def source(format: str, path: str | None, blob: str | None, line: int | None) -> Source:
    return _build(Source, {"format": format, "path": path, "blob": blob, "line": line})

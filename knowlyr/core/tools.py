"""Typed tools: a Python function becomes a tool whose JSON schema comes from its signature.

A tool's schema has the OpenAI function-calling shape that chat templates and TRL's ``tools``
column take::

    {"type": "function", "function": {"name": ..., "description": ...,
     "parameters": {"type": "object", "properties": {...}, "required": [...]}}}

Parameter types come from the annotations (``str``, ``int``, ``float``, ``bool``, ``list[X]``,
``dict[str, X]``, ``Literal[...]``, enums, ``X | None``), descriptions from the Google-style
docstring (summary and ``Args:`` section). **Keyword-only parameters are context**: the
environment passes them (for instance the sandbox) through :meth:`Toolbox.call`; they are not
part of the schema and the model never sees them.

:meth:`Toolbox.call` never raises for a bad call: an unknown tool, a missing, unknown or
wrongly typed parameter, or an exception inside the tool comes back as a :class:`ToolResult`
with a non-zero ``exit_code`` and an ``error`` naming the problem, because a bad rollout is
data, not a crash.

Example:
    >>> @tool
    ... def add(a: int, b: int = 1, *, offset: int = 0) -> str:
    ...     '''Add two numbers.
    ...
    ...     Args:
    ...         a: first number.
    ...         b: second number.
    ...     '''
    ...     return str(a + b + offset)
    >>> add.schema["function"]["parameters"]["required"]
    ['a']
    >>> box = Toolbox([add])
    >>> box.call("add", {"a": 2}, offset=10).output
    '13'
    >>> box.call("add", {"a": "two"}).exit_code
    2
"""

from __future__ import annotations

import enum
import inspect
import re
import traceback
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from knowlyr.errors import ConfigError

__all__ = ["Tool", "ToolResult", "Toolbox", "tool"]

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|Attributes|See Also|Warnings?|Todo):\s*$"
)
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(slots=True)
class ToolResult:
    """What a tool call returned: the text the agent sees plus structured extras.

    Attributes:
        output: the observation text.
        exit_code: 0 on success; 2 for a bad call (unknown/missing/wrongly typed parameter),
            127 for an unknown tool, 1 for an exception inside the tool, or a command's code.
        error: a short description of what went wrong, ``None`` on success.
        data: structured extras (for instance ``{"submitted": True}`` or ``timed_out``).
    """

    output: str
    exit_code: int = 0
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None

    @classmethod
    def failure(cls, message: str, *, exit_code: int = 2, **data: Any) -> ToolResult:
        """An error result: the agent reads ``Error: <message>``."""
        return cls(output=f"Error: {message}", exit_code=exit_code, error=message, data=dict(data))

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "exit_code": self.exit_code,
            "error": self.error,
            "data": self.data,
        }


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Summary text and ``{arg: description}`` from a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for raw in lines:
        stripped = raw.strip()
        m = _SECTION.match(stripped) if not raw.startswith((" ", "\t")) else None
        if m:
            section = m.group(1).lower()
            current, arg_indent = None, None
            continue
        if section is None:
            summary.append(stripped)
            continue
        if section in ("args", "arguments", "parameters"):
            if not stripped:
                continue
            indent = len(raw) - len(raw.lstrip())
            am = _ARG_LINE.match(stripped)
            if am and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = am.group(1)
                args[current] = am.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
    paragraphs = " ".join(summary).strip()
    paragraphs = re.sub(r"\s+", " ", paragraphs)
    return paragraphs, args


def _json_schema(tp: Any, where: str) -> dict[str, Any]:
    """JSON schema of a Python annotation (the subset models handle well)."""
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = _json_schema(args[0], where)
        extra = [a for a in args[1:] if isinstance(a, str)]
        if extra:
            schema["description"] = extra[0]
        return schema
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            return _json_schema(non_null[0], where)
        return {"anyOf": [_json_schema(a, where) for a in non_null]}
    if origin is typing.Literal:
        schema: dict[str, Any] = {"enum": list(args)}
        kinds = {type(a) for a in args}
        if len(kinds) == 1:
            schema = {**_json_schema(kinds.pop(), where), **schema}
        return schema
    if origin in (list, tuple, set, frozenset, Sequence, Iterable):
        item = args[0] if args else Any
        return {"type": "array", "items": _json_schema(item, where)}
    if origin in (dict, Mapping):
        value = args[1] if len(args) == 2 else Any
        vs = _json_schema(value, where)
        return {"type": "object", "additionalProperties": vs} if vs else {"type": "object"}
    if isinstance(tp, type):
        if issubclass(tp, bool):
            return {"type": "boolean"}
        if issubclass(tp, enum.Enum):
            return {"enum": [m.value for m in tp]}
        if issubclass(tp, int):
            return {"type": "integer"}
        if issubclass(tp, float):
            return {"type": "number"}
        if issubclass(tp, str):
            return {"type": "string"}
        if issubclass(tp, (list, tuple, set)):
            return {"type": "array"}
        if issubclass(tp, dict):
            return {"type": "object"}
        if issubclass(tp, BaseModel):
            return tp.model_json_schema()
    raise ConfigError(
        f"{where}: annotation {tp!r} has no JSON schema; use str, int, float, bool, list, dict, Literal or an Enum"
    )


def _resolve_hints(fn: Callable[..., Any], names: Iterable[str]) -> dict[str, Any]:
    """Evaluated annotations of ``names`` (others may reference TYPE_CHECKING-only types)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    raw = getattr(fn, "__annotations__", {})
    ns = dict(getattr(fn, "__globals__", {}))
    for name in names:
        ann = raw.get(name, inspect.Parameter.empty)
        if isinstance(ann, str):
            try:
                ann = eval(ann, ns)  # annotations of the function's own module
            except Exception as e:
                raise ConfigError(
                    f"tool {fn.__name__}: cannot resolve annotation {ann!r} of parameter {name!r}: {e}"
                ) from e
        hints[name] = ann
    return hints


class Tool:
    """A typed function the agent can call. Build one with :func:`tool`.

    Calling the :class:`Tool` object calls the function directly (no validation); use
    :meth:`Toolbox.call` in an environment.

    Attributes:
        name: the name the model calls.
        description: what the tool does (docstring summary unless given).
        parameters: the JSON schema of the model-visible parameters.
        context_params: names of keyword-only parameters the environment injects.
    """

    def __init__(
        self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ):
        if not callable(fn):
            raise ConfigError(f"tool needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", self.name):
            raise ConfigError(f"tool name {self.name!r} must match [A-Za-z_][A-Za-z0-9_.-]{{0,63}}")
        summary, arg_docs = _parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        sig = inspect.signature(fn)
        self.context_params: tuple[str, ...] = tuple(
            p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
        )
        self._context_required = frozenset(
            p.name
            for p in sig.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
        )
        params = [
            p
            for p in sig.parameters.values()
            if p.kind
            in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
        ]
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
            raise ConfigError(f"tool {self.name}: *args cannot be described by a JSON schema")
        hints = _resolve_hints(fn, [p.name for p in params])
        properties: dict[str, Any] = {}
        required: list[str] = []
        fields: dict[str, Any] = {}
        for p in params:
            ann = hints.get(p.name, inspect.Parameter.empty)
            prop = _json_schema(ann, f"tool {self.name}, parameter {p.name!r}")
            if arg_docs.get(p.name):
                prop["description"] = arg_docs[p.name]
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
            elif p.default is not None and isinstance(p.default, (str, int, float, bool)):
                prop["default"] = p.default.value if isinstance(p.default, enum.Enum) else p.default
            properties[p.name] = prop
            pyann = Any if ann is inspect.Parameter.empty else ann
            fields[p.name] = (pyann, ... if p.default is inspect.Parameter.empty else p.default)
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": required,
        }
        self._model = create_model(  # lax mode: "3" -> 3 for an int, but 3 is no str
            f"{self.name}_params",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``params`` against the signature and return them converted.

        Raises:
            ValueError: naming every missing, unknown or wrongly typed parameter.
        """
        if not isinstance(params, Mapping):
            raise ValueError(
                f"parameters of {self.name} must be an object, got {type(params).__name__}"
            )
        try:
            model = self._model.model_validate(dict(params))
        except ValidationError as e:
            raise ValueError(self._explain(e)) from None
        return {k: getattr(model, k) for k in self.parameters["properties"]}

    def _explain(self, err: ValidationError) -> str:
        problems = []
        for e in err.errors():
            name = str(e["loc"][0]) if e["loc"] else "?"
            sub = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"][1:])
            if e["type"] == "missing":
                problems.append(f"missing required parameter {name!r}")
            elif e["type"] == "extra_forbidden":
                known = ", ".join(self.parameters["properties"]) or "none"
                problems.append(f"unknown parameter {name!r} (parameters: {known})")
            else:
                expected = self.parameters["properties"].get(name, {})
                want = expected.get("type") or expected.get("enum") or "valid value"
                problems.append(
                    f"parameter {name + sub!r} {e['msg'].lower()} (expected {want}, got {e.get('input')!r:.80})"
                )
        return f"{self.name}: " + "; ".join(problems)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name}({', '.join(self.parameters['properties'])})>"


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Turn a typed function into a :class:`Tool` (usable as ``@tool`` or ``@tool(name=...)``).

    Args:
        fn: the function; positional-or-keyword parameters are the model's arguments,
            keyword-only parameters are context injected by :meth:`Toolbox.call`.
        name: tool name (default: the function's name).
        description: tool description (default: the docstring summary).

    Example:
        >>> @tool(name="echo")
        ... def _echo(text: str) -> str:
        ...     '''Repeat the text.'''
        ...     return text
        >>> _echo.schema["function"]["name"]
        'echo'
    """
    if fn is None:
        return lambda f: Tool(f, name=name, description=description)
    return Tool(fn, name=name, description=description)


def _to_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult(output="")
    if isinstance(value, str):
        return ToolResult(output=value)
    if isinstance(value, bytes):
        return ToolResult(output=value.decode("utf-8", "replace"))
    try:
        return ToolResult(output=orjson.dumps(value, default=str).decode(), data={"value": value})
    except TypeError:
        return ToolResult(output=str(value))


class Toolbox:
    """Tools by name, with a :meth:`call` that validates and never raises for a tool error.

    Example:
        >>> @tool
        ... def shout(text: str) -> str:
        ...     '''Upper-case the text.'''
        ...     return text.upper()
        >>> box = Toolbox([shout])
        >>> box.call("shout", {"text": "hi"}).output
        'HI'
        >>> box.call("whisper", {}).error
        "unknown tool 'whisper'; available: shout"
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()):
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool | Callable[..., Any]) -> Tool:
        """Register a tool (a plain function is wrapped with :func:`tool`)."""
        t = t if isinstance(t, Tool) else Tool(t)
        if t.name in self._tools:
            raise ConfigError(f"tool {t.name!r} is already in this toolbox")
        self._tools[t.name] = t
        return t

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of every tool (for chat templates and TRL)."""
        return [t.schema for t in self._tools.values()]

    def subset(self, names: Iterable[str]) -> Toolbox:
        """A toolbox with only ``names`` (KeyError naming the unknown one)."""
        picked = []
        for n in names:
            if n not in self._tools:
                raise ConfigError(f"unknown tool {n!r}; available: {', '.join(self._tools)}")
            picked.append(self._tools[n])
        return Toolbox(picked)

    def call(
        self, name: str, params: Mapping[str, Any] | None = None, **context: Any
    ) -> ToolResult:
        """Validate ``params`` and run tool ``name``; errors come back as a :class:`ToolResult`.

        Args:
            name: the tool to call.
            params: the model's arguments (``None`` means none).
            **context: values for the tools' keyword-only parameters (for instance
                ``sandbox=sb``); each tool receives only the ones it declares.

        Raises:
            ConfigError: only when the *caller* forgot a context value the tool requires
                (a programming error, not a model error).
        """
        t = self._tools.get(name)
        if t is None:
            return ToolResult.failure(
                f"unknown tool {name!r}; available: {', '.join(self._tools)}", exit_code=127
            )
        try:
            kwargs = t.validate(params if params is not None else {})
        except ValueError as e:
            return ToolResult.failure(str(e), exit_code=2)
        missing = t._context_required - context.keys()
        if missing:
            raise ConfigError(
                f"tool {name!r} needs context {sorted(missing)}: pass them to Toolbox.call(..., {next(iter(missing))}=...)"
            )
        for key in t.context_params:
            if key in context:
                kwargs[key] = context[key]
        try:
            return _to_result(t.fn(**kwargs))
        except Exception as e:  # a tool's failure is an observation
            tb = traceback.extract_tb(e.__traceback__)
            where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
            return ToolResult.failure(f"{name} failed: {type(e).__name__}: {e}{where}", exit_code=1)

    def __repr__(self) -> str:
        return f"<Toolbox {', '.join(self._tools)}>"

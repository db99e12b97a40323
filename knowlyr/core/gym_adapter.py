"""Gymnasium interop: any :class:`~knowlyr.core.env.AgentEnv` as a real ``gymnasium.Env``.

Observations are text (:class:`TextSpace`); actions are ``{"tool": str, "params": dict}`` or
the same as a JSON string (:class:`ToolCallSpace`, whose ``sample()`` fills the params from
each tool's JSON schema). :func:`make_vec` builds Gymnasium's own vector envs (sync or async,
one process per env) over them, so many episodes run at once with the standard autoreset
semantics.

The built-in envs are in Gymnasium's registry as ``knowlyr/<name>-v0`` once ``knowlyr`` and
``gymnasium`` are both imported (in either order; ``gymnasium.make("knowlyr:knowlyr/...-v0")``
imports knowlyr itself); :func:`register_gymnasium_envs` adds envs you registered yourself.

Example:
    >>> import gymnasium, knowlyr
    >>> env = gymnasium.make("knowlyr/conversation-v0")  # doctest: +SKIP
    >>> from knowlyr.core.gym_adapter import GymnasiumEnv, make_vec
    >>> env = GymnasiumEnv(knowlyr.make("knowlyr/conversation"))  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(
    ...     {"tool": "query_stats", "params": {"order_id": "AB12C"}})  # doctest: +SKIP
    >>> envs = make_vec("knowlyr/conversation", num_envs=4)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
import orjson
from gymnasium import spaces

from knowlyr.core.env import AgentEnv, parse_action
from knowlyr.errors import ActionError

__all__ = [
    "GYMNASIUM_ENTRY_POINT",
    "GymnasiumEnv",
    "TextSpace",
    "ToolCallSpace",
    "make_vec",
    "register_gymnasium_envs",
]

# what Gymnasium's registry holds for a knowlyr env: this class, with ``kwargs={"env": id}``
GYMNASIUM_ENTRY_POINT = "knowlyr.core.gym_adapter:GymnasiumEnv"


class TextSpace(spaces.Space[str]):
    """Any text of at most ``max_length`` characters (Gymnasium's ``Text`` limits the charset)."""

    def __init__(self, max_length: int = 1 << 20, *, seed: int | np.random.Generator | None = None):
        if max_length <= 0:
            raise ValueError(f"max_length must be positive, got {max_length}")
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(1, min(self.max_length, 32) + 1))
        letters = "abcdefghijklmnopqrstuvwxyz "
        return "".join(letters[i] for i in self.np_random.integers(0, len(letters), n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class ToolCallSpace(spaces.Space[dict]):
    """Actions ``{"tool": name, "params": {...}}`` over a tool list (or a JSON string of one).

    Each tool is a name or an OpenAI function schema (``{"type": "function", "function":
    {"name", "parameters"}}``, or the inner ``{"name", "parameters"}``). :meth:`sample` picks a
    tool and fills its params from the schema: every required parameter and about half of
    the optional ones, strings, integers and numbers within their bounds, enums, booleans,
    arrays and nested objects, drawn from the space's RNG (``seed=`` or :meth:`seed`). A tool
    given by name alone samples empty params.

    Example:
        >>> space = ToolCallSpace([{"name": "add", "parameters": {"type": "object",
        ...     "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}},
        ...     "required": ["n"]}}], seed=0)
        >>> call = space.sample()
        >>> call["tool"], 1 <= call["params"]["n"] <= 3
        ('add', True)
    """

    def __init__(
        self,
        tools: Sequence[str | Mapping[str, Any]],
        *,
        seed: int | np.random.Generator | None = None,
    ):
        self.schemas: dict[str, dict[str, Any]] = {}
        for t in tools:
            name, params = _tool_schema(t)
            self.schemas[name] = params
        self.tools = list(self.schemas)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        if not self.tools:
            raise ValueError("cannot sample from a ToolCallSpace with no tools")
        name = self.tools[int(self.np_random.integers(len(self.tools)))]
        schema = self.schemas[name]
        params = _sample_json(schema, self.np_random, schema, 0) if schema else {}
        return {"tool": name, "params": params if isinstance(params, dict) else {}}

    def contains(self, x: Any) -> bool:
        try:
            parse_action(_decode(x), self.tools or None)
        except ActionError:
            return False
        return True

    def __repr__(self) -> str:
        return f"ToolCallSpace({self.tools})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolCallSpace) and other.schemas == self.schemas


def _tool_schema(tool: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, parameters schema)`` of a tool name or an OpenAI function schema."""
    if isinstance(tool, str):
        return tool, {}
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            "a ToolCallSpace tool must be a name or a function schema with a 'name', "
            f"got {tool!r:.200}"
        )
    params = fn.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise ValueError(f"tool {name!r}: 'parameters' must be a JSON schema object")
    return name, dict(params)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_MAX_DEPTH = 4  # nested arrays / objects below this sample as empty


def _sample_json(schema: Any, rng: np.random.Generator, root: Mapping[str, Any], depth: int) -> Any:
    """A value valid against the JSON schema ``schema`` (the subset tool schemas use)."""
    if not isinstance(schema, Mapping) or not schema:
        return _sample_string({}, rng)  # any value: a short string
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return _sample_json(target, rng, root, depth)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key) or [] if o.get("type") != "null"] or schema.get(key)
        if options:
            return _sample_json(options[int(rng.integers(len(options)))], rng, root, depth)
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
        return _sample_json(schema["allOf"][0], rng, root, depth)
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"] or kind
        kind = kinds[int(rng.integers(len(kinds)))] if kinds else None
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if kind == "object":
        return _sample_object(schema, rng, root, depth)
    if kind == "array":
        return _sample_array(schema, rng, root, depth)
    if kind == "integer":
        lo, hi = _bounds(schema, integer=True)
        return int(rng.integers(lo, hi + 1))
    if kind == "number":
        lo, hi = _bounds(schema, integer=False)
        return float(rng.uniform(lo, hi))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    return _sample_string(schema, rng)


def _sample_object(
    schema: Mapping[str, Any], rng: np.random.Generator, root: Mapping[str, Any], depth: int
) -> dict[str, Any]:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or (depth < _MAX_DEPTH and rng.random() < 0.5):
            out[name] = _sample_json(sub, rng, root, depth + 1)
    for name in required - set(props):  # required without a schema: any value
        out[name] = _sample_string({}, rng)
    return out


def _sample_array(
    schema: Mapping[str, Any], rng: np.random.Generator, root: Mapping[str, Any], depth: int
) -> list[Any]:
    lo = int(schema.get("minItems", 0))
    hi = int(schema.get("maxItems", lo + 3 if depth < _MAX_DEPTH else lo))
    items = schema.get("items") or {}
    return [_sample_json(items, rng, root, depth + 1) for _ in range(int(rng.integers(lo, hi + 1)))]


def _bounds(schema: Mapping[str, Any], *, integer: bool) -> tuple[float, float]:
    """The closed range ``[lo, hi]`` the schema allows (100 wide when a side is open)."""
    step = 1 if integer else 1e-9
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        lo = schema["exclusiveMinimum"] + step
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        hi = schema["exclusiveMaximum"] - step
    if lo is None:
        lo = 0 if hi is None or hi >= 0 else hi - 100
    if hi is None:
        hi = lo + 100
    if integer:
        lo, hi = math.ceil(lo), math.floor(hi)
    if hi < lo:
        raise ValueError(f"cannot sample from the empty range of {dict(schema)!r}")
    return lo, hi


def _sample_string(schema: Mapping[str, Any], rng: np.random.Generator) -> str:
    lo = int(schema.get("minLength", 1))
    hi = int(schema.get("maxLength", max(lo, 12)))
    n = int(rng.integers(lo, max(lo, hi) + 1))
    return "".join(_LETTERS[i] for i in rng.integers(0, len(_LETTERS), n))


def _decode(action: Any) -> Any:
    if isinstance(action, str | bytes):
        try:
            return orjson.loads(action)
        except orjson.JSONDecodeError:
            return action
    return action


class GymnasiumEnv(gymnasium.Env):
    """Exposes an :class:`AgentEnv` through the ``gymnasium.Env`` API.

    ``reset(seed=..., options={"task": ...})`` returns ``(observation, info)``; ``step``
    takes a dict or a JSON string and returns ``(obs, reward, terminated, truncated, info)``.
    A malformed action is an error observation (``info["error"]``), as in the AgentEnv.
    The action space carries the env's tool schemas (its ``tool_schemas()``), so
    ``action_space.sample()`` gives calls with params.

    Args:
        env: the environment to expose, a callable building it, or a registered env id
            (what ``gymnasium.make("knowlyr/...-v0")`` passes).
        max_observation_chars: bound of the observation space.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
        **make_kwargs: with an env id, the arguments of :func:`knowlyr.make` (``max_steps``,
            ``family``, ``split``...).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012 - gymnasium's API

    def __init__(
        self,
        env: AgentEnv | Callable[[], AgentEnv] | str,
        *,
        max_observation_chars: int = 1 << 20,
        render_mode: str | None = None,
        **make_kwargs: Any,
    ):
        if isinstance(env, str):
            from knowlyr.core.registry import make

            env = make(env, **make_kwargs)
        elif make_kwargs:
            raise TypeError(
                f"GymnasiumEnv takes make() arguments only with an env id, got {sorted(make_kwargs)}"
            )
        self.env = env if isinstance(env, AgentEnv) else env()
        if not isinstance(self.env, AgentEnv):
            raise TypeError(f"GymnasiumEnv wraps an AgentEnv, got {type(self.env).__name__}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_observation_chars)
        self.action_space = self._action_space()
        self._last_obs = ""

    def _action_space(self) -> ToolCallSpace:
        """The env's tools, with their schemas where the env exposes them."""
        schemas = getattr(self.env.unwrapped, "tool_schemas", None)
        by_name: dict[str, Any] = {}
        if callable(schemas):
            for s in schemas() or []:
                fn = s.get("function", s) if isinstance(s, Mapping) else {}
                if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                    by_name[fn["name"]] = s
        return ToolCallSpace([by_name.get(n, n) for n in self.env.available_tools])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        opts = dict(options or {})
        task = opts.pop("task", None)
        ts = self.env.reset(task=task, seed=seed, options=opts or None)
        space = self._action_space()
        if space != self.action_space:  # the tools changed: keep a seeded space otherwise
            self.action_space = space
        self._last_obs = ts.observation
        return ts.observation, ts.info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = _decode(action)
        if not isinstance(action, dict):
            action = {"tool": "", "params": {"raw": str(action)[:2000]}}
        ts = self.env.step(action)
        self._last_obs = ts.observation
        return ts.observation, float(ts.reward), bool(ts.terminated), bool(ts.truncated), ts.info

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.env.close()


def _env_fn(env_id: str, kwargs: dict[str, Any]) -> Callable[[], GymnasiumEnv]:
    def build(**overrides: Any) -> GymnasiumEnv:
        from knowlyr.core.registry import make

        render_mode = overrides.pop("render_mode", None)
        return GymnasiumEnv(make(env_id, **{**kwargs, **overrides}), render_mode=render_mode)

    return build


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    mode: str = "sync",
    **kwargs: Any,
) -> gymnasium.vector.VectorEnv:
    """``num_envs`` copies of a registered env as a Gymnasium vector env.

    ``mode="sync"`` steps them in this process; ``"async"`` runs one process per env
    (``shared_memory=False``: text observations cannot live in shared arrays). Autoreset
    follows Gymnasium's default (next-step) semantics.

    Raises:
        ValueError: ``num_envs`` < 1 or an unknown ``mode``.
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    fns = [_env_fn(env_id, kwargs) for _ in range(num_envs)]
    if mode == "sync":
        return gymnasium.vector.SyncVectorEnv(fns)
    if mode == "async":
        return gymnasium.vector.AsyncVectorEnv(fns, shared_memory=False)
    raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")


def register_gymnasium_envs(version: int = 0) -> list[str]:
    """Register every knowlyr env with Gymnasium as ``<namespace>/<name>-v<version>``.

    The built-in ``knowlyr/*`` envs are registered as ``-v0`` on import already; call this
    for envs you registered yourself. Afterwards ``gymnasium.make("my-project/my-env-v0")``
    works. Returns the ids.
    """
    from knowlyr.core.registry import list_envs

    ids = []
    for env_id in list_envs():
        ns, name = env_id.split("/", 1)
        gid = f"{ns}/{name}-v{version}"
        if gid not in gymnasium.registry:
            gymnasium.register(
                id=gid,
                entry_point=GYMNASIUM_ENTRY_POINT,
                kwargs={"env": env_id},
                disable_env_checker=True,
            )
        ids.append(gid)
    return ids

"""The MDP protocol: :class:`AgentEnv`, :class:`TimeStep` and :class:`EnvWrapper`.

An action is ``{"tool": str, "params": dict}``. ``reset`` starts an episode and returns the
first observation (the task); ``step`` runs one action. ``terminated`` means the task ended
(the agent submitted, answered, or failed for good); ``truncated`` means the episode was cut
off (step or time limit). Both are separate, as in Gymnasium.

Example:
    >>> from knowlyr.core import AgentEnv, TimeStep, register, make
    >>> class EchoEnv(AgentEnv):
    ...     domain = "generic"
    ...     available_tools = ["echo", "submit"]
    ...     def reset(self, *, task=None, seed=None, options=None):
    ...         return TimeStep(observation="say something")
    ...     def step(self, action):
    ...         tool, params = self.parse_action(action)
    ...         return TimeStep(observation=str(params), terminated=tool == "submit")
    >>> register("docs/echo", EchoEnv)
    >>> env = make("docs/echo")
    >>> env.reset().observation
    'say something'
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

from knowlyr.errors import ActionError

__all__ = ["Action", "AgentEnv", "EnvWrapper", "TimeStep", "error_timestep", "parse_action"]

Action = dict[str, Any]


@dataclass(slots=True)
class TimeStep:
    """What ``reset`` and ``step`` return.

    ``info`` carries structured extras. Keys with a meaning across knowlyr:
    ``task`` (on reset: a dict with ``task_id``, ``domain``, ``instruction``...),
    ``exit_code`` and ``error`` (the tool's result), ``outcome`` (on the last step: a dict
    with ``success``, ``score``, ``tests_passed``, ``tests_failed``...),
    ``episode`` (set by :class:`~knowlyr.core.wrappers.EpisodeStatisticsWrapper`).
    """

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def parse_action(action: Any, tools: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    """Validate an action and return ``(tool, params)``.

    Raises:
        ActionError: the action is not ``{"tool": str, "params": dict}`` or names a tool that
            is not in ``tools``. The message says what was wrong and what is expected.
    """
    if not isinstance(action, dict):
        raise ActionError(
            f'action must be a dict {{"tool": str, "params": dict}}, got {type(action).__name__}: {action!r:.200}'
        )
    tool = action.get("tool")
    if not isinstance(tool, str) or not tool:
        raise ActionError(f'action needs a non-empty string "tool", got {tool!r:.100}')
    params = action.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ActionError(
            f'action "params" must be a dict, got {type(params).__name__}: {params!r:.200}'
        )
    extra = set(action) - {"tool", "params", "thought", "call_id"}
    if extra:
        raise ActionError(
            f"action has unknown keys {sorted(extra)}; expected tool, params (and optional thought)"
        )
    if tools is not None and tool not in tools:
        raise ActionError(f"unknown tool {tool!r}; available tools: {', '.join(tools)}")
    return tool, params


def error_timestep(message: str, *, exit_code: int = 2, **info: Any) -> TimeStep:
    """An observation reporting an error to the agent (the episode goes on)."""
    return TimeStep(
        observation=f"Error: {message}", info={"exit_code": exit_code, "error": message, **info}
    )


class AgentEnv(abc.ABC):
    """Base class of every environment.

    Subclasses set ``domain`` and ``available_tools`` and implement :meth:`reset` and
    :meth:`step`. Inside ``step`` call :meth:`parse_action` and turn an :class:`ActionError`
    into an error observation (``make`` adds a checker wrapper that does this for envs that
    forget).
    """

    domain: ClassVar[str] = "generic"
    available_tools: list[str] = []  # noqa: RUF012 - overridden per class or instance
    metadata: ClassVar[dict[str, Any]] = {}

    @abc.abstractmethod
    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        """Start an episode; the observation is the task as the agent sees it."""

    @abc.abstractmethod
    def step(self, action: Action) -> TimeStep:
        """Run one action."""

    def close(self) -> None:
        """Release resources (sandboxes, processes). Idempotent."""

    def parse_action(self, action: Any) -> tuple[str, dict[str, Any]]:
        return parse_action(action, list(self.available_tools) or None)

    @property
    def unwrapped(self) -> AgentEnv:
        return self

    def __enter__(self) -> AgentEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} domain={self.domain!r}>"


class EnvWrapper(AgentEnv):
    """Wraps an env and forwards everything; subclasses override one hook."""

    def __init__(self, env: AgentEnv):
        if not isinstance(env, AgentEnv):
            raise TypeError(f"{type(self).__name__} wraps an AgentEnv, got {type(env).__name__}")
        self.env = env

    @property
    def domain(self) -> str:  # type: ignore[override]
        return self.env.domain

    @property
    def available_tools(self) -> list[str]:  # type: ignore[override]
        return self.env.available_tools

    @property
    def unwrapped(self) -> AgentEnv:
        return self.env.unwrapped

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        return self.env.reset(task=task, seed=seed, options=options)

    def step(self, action: Action) -> TimeStep:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"

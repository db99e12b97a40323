"""Gymnasium interop: any :class:`~knowlyr.core.env.AgentEnv` as a real ``gymnasium.Env``.

Observations are text (:class:`TextSpace`); actions are ``{"tool": str, "params": dict}`` or
the same as a JSON string (:class:`ToolCallSpace`). :func:`make_vec` builds Gymnasium's own
vector envs (sync or async, one process per env) over them, so many episodes run at once
with the standard autoreset semantics.

Example:
    >>> import knowlyr
    >>> from knowlyr.core.gym_adapter import GymnasiumEnv, make_vec
    >>> env = GymnasiumEnv(knowlyr.make("knowlyr/conversation"))  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(
    ...     {"tool": "query_stats", "params": {"order_id": "AB12C"}})  # doctest: +SKIP
    >>> envs = make_vec("knowlyr/conversation", num_envs=4)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
import orjson
from gymnasium import spaces

from knowlyr.core.env import AgentEnv, parse_action
from knowlyr.errors import ActionError

__all__ = ["GymnasiumEnv", "TextSpace", "ToolCallSpace", "make_vec", "register_gymnasium_envs"]


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
    """Actions ``{"tool": name, "params": {...}}`` over a tool list (or a JSON string of one)."""

    def __init__(self, tools: Sequence[str], *, seed: int | np.random.Generator | None = None):
        self.tools = list(tools)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        if not self.tools:
            raise ValueError("cannot sample from a ToolCallSpace with no tools")
        return {"tool": self.tools[int(self.np_random.integers(len(self.tools)))], "params": {}}

    def contains(self, x: Any) -> bool:
        try:
            parse_action(_decode(x), self.tools or None)
        except ActionError:
            return False
        return True

    def __repr__(self) -> str:
        return f"ToolCallSpace({self.tools})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolCallSpace) and other.tools == self.tools


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

    Args:
        env: the environment to expose, or a callable building it.
        max_observation_chars: bound of the observation space.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012 - gymnasium's API

    def __init__(
        self,
        env: AgentEnv | Callable[[], AgentEnv],
        *,
        max_observation_chars: int = 1 << 20,
        render_mode: str | None = None,
    ):
        self.env = env if isinstance(env, AgentEnv) else env()
        if not isinstance(self.env, AgentEnv):
            raise TypeError(f"GymnasiumEnv wraps an AgentEnv, got {type(self.env).__name__}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_observation_chars)
        self.action_space = ToolCallSpace(list(self.env.available_tools))
        self._last_obs = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        opts = dict(options or {})
        task = opts.pop("task", None)
        ts = self.env.reset(task=task, seed=seed, options=opts or None)
        self.action_space = ToolCallSpace(list(self.env.available_tools))
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
    """Register every knowlyr env with Gymnasium as ``knowlyr/<name>-v<version>``.

    Afterwards ``gymnasium.make("knowlyr/conversation-v0")`` works. Returns the new ids.
    """
    from knowlyr.core.registry import list_envs

    ids = []
    for env_id in list_envs():
        ns, name = env_id.split("/", 1)
        gid = f"{ns}/{name}-v{version}"
        if gid not in gymnasium.registry:
            gymnasium.register(id=gid, entry_point=_env_fn(env_id, {}), disable_env_checker=True)
        ids.append(gid)
    return ids

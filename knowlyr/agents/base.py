"""The Agent protocol: a policy that maps observations to actions, one episode at a time.

Example:
    >>> class Echo(Agent):
    ...     name = "echo"
    ...     def act(self, observation, info):
    ...         return {"tool": "respond", "params": {"text": observation}}
"""

from __future__ import annotations

import abc
from typing import Any

from knowlyr.core.env import Action
from knowlyr.trajectory import AgentInfo

__all__ = ["Agent"]


class Agent(abc.ABC):
    """Base class of every policy (scripted, API model, local model).

    ``reset`` is called at the start of each episode with the reset timestep's ``info`` (which
    holds ``info["task"]``); ``act`` gets each observation and the timestep ``info`` and returns
    ``{"tool": str, "params": dict}``, optionally with a ``"thought"``. Agents keep their own
    per-episode history and must clear it in ``reset``.
    """

    name: str = "agent"
    model: str | None = None
    version: str | None = None

    def reset(self, info: dict[str, Any] | None = None) -> None:
        """Start a new episode."""

    @abc.abstractmethod
    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """The next action for ``observation``."""

    @property
    def agent_info(self) -> AgentInfo:
        return AgentInfo(name=self.name, model=self.model, version=self.version)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

"""Wrappers: each overrides one hook and validates its arguments up front.

They compose in any order, e.g.::

    env = RecorderWrapper(MaxStepsWrapper(ObservationTruncateWrapper(make("knowlyr/conversation"), 4000), 30))
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from knowlyr.core.env import Action, AgentEnv, EnvWrapper, TimeStep, error_timestep
from knowlyr.errors import ActionError
from knowlyr.trajectory import (
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)

__all__ = [
    "ActionCheckWrapper",
    "EpisodeStatisticsWrapper",
    "MaxStepsWrapper",
    "ObservationTruncateWrapper",
    "RecorderWrapper",
    "RewardWrapper",
    "TimeoutWrapper",
    "truncate_middle",
]


class ActionCheckWrapper(EnvWrapper):
    """Turns a malformed action into an error observation instead of an exception.

    ``make`` applies it by default (``check_actions=False`` to skip), so an agent that emits
    garbage sees an explanation and the episode goes on.
    """

    def step(self, action: Action) -> TimeStep:
        try:
            self.env.unwrapped.parse_action(action)
        except ActionError as e:
            return error_timestep(str(e))
        return self.env.step(action)


class MaxStepsWrapper(EnvWrapper):
    """Truncates the episode after ``max_steps`` steps."""

    def __init__(self, env: AgentEnv, max_steps: int):
        if not isinstance(max_steps, int) or max_steps <= 0:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        super().__init__(env)
        self.max_steps = max_steps
        self.elapsed_steps = 0

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        self.elapsed_steps = 0
        return self.env.reset(task=task, seed=seed, options=options)

    def step(self, action: Action) -> TimeStep:
        ts = self.env.step(action)
        self.elapsed_steps += 1
        if self.elapsed_steps >= self.max_steps and not ts.terminated:
            ts.truncated = True
            ts.info.setdefault("truncated_by", "max_steps")
        return ts


class TimeoutWrapper(EnvWrapper):
    """Truncates the episode once ``timeout_s`` seconds of wall-clock time have passed since reset."""

    def __init__(
        self, env: AgentEnv, timeout_s: float, *, clock: Callable[[], float] = time.monotonic
    ):
        if not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
        super().__init__(env)
        self.timeout_s = float(timeout_s)
        self._clock = clock
        self._start = clock()

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        self._start = self._clock()
        return self.env.reset(task=task, seed=seed, options=options)

    def step(self, action: Action) -> TimeStep:
        ts = self.env.step(action)
        if self._clock() - self._start >= self.timeout_s and not ts.terminated:
            ts.truncated = True
            ts.info.setdefault("truncated_by", "timeout")
        return ts


class RewardWrapper(EnvWrapper):
    """Replaces (or, with ``mode="add"``, adds to) each step's reward with ``reward_fn(action, timestep)``."""

    def __init__(
        self,
        env: AgentEnv,
        reward_fn: Callable[[Action, TimeStep], float],
        *,
        mode: str = "replace",
    ):
        if not callable(reward_fn):
            raise ValueError(f"reward_fn must be callable, got {reward_fn!r}")
        if mode not in ("replace", "add"):
            raise ValueError(f"mode must be 'replace' or 'add', got {mode!r}")
        super().__init__(env)
        self.reward_fn = reward_fn
        self.mode = mode

    def step(self, action: Action) -> TimeStep:
        ts = self.env.step(action)
        r = float(self.reward_fn(action, ts))
        ts.reward = r if self.mode == "replace" else ts.reward + r
        return ts


class ObservationTruncateWrapper(EnvWrapper):
    """Caps observations at ``max_chars``, keeping head and tail around a marker."""

    def __init__(self, env: AgentEnv, max_chars: int):
        if not isinstance(max_chars, int) or max_chars < 64:
            raise ValueError(f"max_chars must be an int >= 64, got {max_chars!r}")
        super().__init__(env)
        self.max_chars = max_chars

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        ts = self.env.reset(task=task, seed=seed, options=options)
        ts.observation = truncate_middle(ts.observation, self.max_chars)
        return ts

    def step(self, action: Action) -> TimeStep:
        ts = self.env.step(action)
        ts.observation = truncate_middle(ts.observation, self.max_chars)
        return ts


def truncate_middle(text: str, max_chars: int) -> str:
    """``text`` if short enough, else its head and tail joined by a marker naming what was cut."""
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    marker = f"\n[... {cut} characters truncated ...]\n"
    keep = max(max_chars - len(marker), 0)
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + marker + (text[-tail:] if tail else "")


class EpisodeStatisticsWrapper(EnvWrapper):
    """On the last step, puts ``info["episode"] = {"r": return, "l": length, "t": seconds}``.

    Like Gymnasium's ``RecordEpisodeStatistics``; completed episodes are also appended to
    ``self.episodes``.
    """

    def __init__(self, env: AgentEnv):
        super().__init__(env)
        self.episodes: list[dict[str, float]] = []
        self._ret = 0.0
        self._len = 0
        self._t0 = time.perf_counter()

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        self._ret, self._len, self._t0 = 0.0, 0, time.perf_counter()
        return self.env.reset(task=task, seed=seed, options=options)

    def step(self, action: Action) -> TimeStep:
        ts = self.env.step(action)
        self._ret += ts.reward
        self._len += 1
        if ts.done:
            stats = {"r": self._ret, "l": self._len, "t": round(time.perf_counter() - self._t0, 6)}
            ts.info["episode"] = stats
            self.episodes.append(stats)
        return ts


class RecorderWrapper(EnvWrapper):
    """Records every episode as a :class:`~knowlyr.trajectory.Trajectory`.

    The task comes from ``info["task"]`` of the reset timestep (or the ``task`` argument), the
    thought from an optional ``"thought"`` key in the action, the outcome from
    ``info["outcome"]`` of the last step. ``self.trajectory`` is the last finished episode and
    ``self.trajectories`` all of them.

    Example:
        >>> env = RecorderWrapper(make("docs/echo"), agent=AgentInfo(name="me"))  # doctest: +SKIP
    """

    def __init__(
        self, env: AgentEnv, *, agent: AgentInfo | None = None, source_format: str = "knowlyr"
    ):
        super().__init__(env)
        self.agent = agent or AgentInfo()
        self.source_format = source_format
        self.trajectories: list[Trajectory] = []
        self._task: TaskInfo | None = None
        self._steps: list[Step] = []
        self._last_t = 0.0
        self._open = False

    @property
    def trajectory(self) -> Trajectory | None:
        return self.trajectories[-1] if self.trajectories else None

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        ts = self.env.reset(task=task, seed=seed, options=options)
        self._task = _task_info(ts.info.get("task", task), ts.observation, self.env.domain)
        self._steps = []
        self._open = True
        self._last_t = time.perf_counter()
        return ts

    def step(self, action: Action) -> TimeStep:
        ts = self.env.step(action)
        now = time.perf_counter()
        tool = action.get("tool") if isinstance(action, dict) else None
        params = action.get("params") if isinstance(action, dict) else None
        self._steps.append(
            Step(
                index=len(self._steps),
                thought=str(action.get("thought") or "") if isinstance(action, dict) else "",
                action=ToolCall(tool=str(tool), params=params if isinstance(params, dict) else {})
                if tool
                else None,
                message=None if tool else repr(action)[:500],
                observation=Observation(
                    output=ts.observation,
                    exit_code=ts.info.get("exit_code"),
                    error=ts.info.get("error"),
                ),
                reward=ts.reward,
                timestamp=datetime.now(UTC),
                duration_s=round(now - self._last_t, 6),
            )
        )
        self._last_t = now
        if ts.done and self._open:
            self._finish(ts)
        return ts

    def _finish(self, ts: TimeStep) -> None:
        raw = dict(ts.info.get("outcome") or {})
        raw.setdefault("terminated", ts.terminated)
        raw.setdefault("truncated", ts.truncated)
        if ts.truncated and not ts.terminated:
            raw.setdefault("reason", ts.info.get("truncated_by", "truncated"))
        known = set(Outcome.model_fields)
        outcome = Outcome(**{k: v for k, v in raw.items() if k in known})
        self.trajectories.append(
            Trajectory(
                task=self._task or TaskInfo(task_id="unknown"),
                agent=self.agent,
                steps=self._steps,
                outcome=outcome,
                source=Source(format=self.source_format),
                metadata={k: v for k, v in raw.items() if k not in known},
            )
        )
        self._open = False


def _task_info(task: Any, observation: str, domain: str) -> TaskInfo:
    if isinstance(task, TaskInfo):
        return TaskInfo.model_validate(task.model_dump())
    if isinstance(task, dict):
        data = {"domain": domain, "instruction": observation, **task}
        data.setdefault("task_id", str(task.get("id", "unknown")))
        data.pop("id", None)
        return TaskInfo.model_validate(data)
    if isinstance(task, str):
        return TaskInfo(task_id=task, domain=domain, instruction=observation)
    return TaskInfo(task_id="unknown", domain=domain, instruction=observation)

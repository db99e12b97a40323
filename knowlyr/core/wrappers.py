"""Wrappers: each overrides one hook and validates its arguments up front.

They compose in any order, e.g.::

    env = RecorderWrapper(MaxStepsWrapper(ObservationTruncateWrapper(make("knowlyr/conversation"), 4000), 30))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from knowlyr.core.env import Action, AgentEnv, EnvWrapper, TimeStep, error_timestep
from knowlyr.errors import ActionError, KnowlyrError
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
    """Truncates the episode once ``timeout_s`` seconds of wall-clock time have passed since
    reset, cutting off a step that is still running then.

    Each step runs in a worker thread, and the wrapper waits for it only until the episode's
    time is up (plus 0.05 s for the env to wind down). If the env runs commands in a sandbox
    (an ``env.sandbox`` with a ``deadline``, as :class:`~knowlyr.envs.SandboxEnv` has), the
    deadline is passed down: the sandbox kills the command running at that instant, every
    process it started included, and refuses to start new ones. A step that ends in time is
    returned as it is (``truncated`` if the time ran out meanwhile); one still running is
    returned as a truncated step saying so, with ``info["truncated_by"] == "timeout"``, and
    finishes in the background (:meth:`reset` waits for it). A step started after the time
    ran out is not run.

    Args:
        env: the env to wrap.
        timeout_s: the episode's wall-clock budget in seconds.
        clock: seconds since some origin (default ``time.monotonic``; tests pass a fake).

    Example:
        >>> env = TimeoutWrapper(make("knowlyr/sandbox"), 60)  # doctest: +SKIP
    """

    grace_s = 0.05  # how long past the deadline a step may take to wind down (kill, drain pipes)
    stale_join_s = 30.0  # how long reset() waits for a step cut off earlier

    def __init__(
        self, env: AgentEnv, timeout_s: float, *, clock: Callable[[], float] = time.monotonic
    ):
        if not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
        super().__init__(env)
        self.timeout_s = float(timeout_s)
        self._clock = clock
        self._start = clock()
        self._stale: threading.Thread | None = None

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        self._wait_for_stale()
        self._set_deadline(None)
        self._start = self._clock()
        return self.env.reset(task=task, seed=seed, options=options)

    def step(self, action: Action) -> TimeStep:
        remaining = self.timeout_s - (self._clock() - self._start)
        if remaining <= 0 or (self._stale is not None and self._stale.is_alive()):
            return self._cut_off(
                "the episode's time limit had already run out; the step was not run"
            )
        deadline = time.monotonic() + remaining
        self._set_deadline(deadline)
        result: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                result.append(self.env.step(action))
            except BaseException as e:  # handed to the caller's thread
                result.append(e)
            finally:
                self._set_deadline(None, only=deadline)  # a cut-off step is over now
                done.set()

        worker = threading.Thread(target=run, name="knowlyr-timeout-step", daemon=True)
        worker.start()
        if not (done.wait(remaining) or done.wait(self.grace_s)):
            self._stale = worker  # the deadline stays until it ends: its later commands do not run
            return self._cut_off(
                f"the step was cut off: the episode's {self.timeout_s:g} s time limit ran out "
                "while it was running (its sandbox command, if any, was killed)"
            )
        out = result[0]
        if isinstance(out, BaseException):
            raise out
        ts: TimeStep = out
        late = time.monotonic() >= deadline or self._clock() - self._start >= self.timeout_s
        if late and not ts.terminated:
            ts.truncated = True
            ts.info.setdefault("truncated_by", "timeout")
        return ts

    def close(self) -> None:
        stale, self._stale = self._stale, None
        if stale is not None:
            stale.join(self.stale_join_s)
        self.env.close()

    def _cut_off(self, message: str) -> TimeStep:
        return TimeStep(
            observation=f"[{message}]",
            truncated=True,
            info={"truncated_by": "timeout", "exit_code": 124, "error": message},
        )

    def _set_deadline(self, deadline: float | None, *, only: float | None = None) -> None:
        """Pass the deadline down to the env's sandbox, if it has one that takes it (with
        ``only``: if its deadline is still that one)."""
        sandbox = getattr(self.env.unwrapped, "sandbox", None)
        has_one = sandbox is not None and hasattr(sandbox, "deadline")
        if has_one and (only is None or sandbox.deadline == only):
            sandbox.deadline = deadline

    def _wait_for_stale(self) -> None:
        stale, self._stale = self._stale, None
        if stale is None:
            return
        stale.join(self.stale_join_s)
        if stale.is_alive():
            self._stale = stale
            raise KnowlyrError(
                f"a step cut off by TimeoutWrapper({self.timeout_s:g}) is still running "
                f"{self.stale_join_s:g} s later (its env does not stop at the sandbox deadline); "
                "the env cannot be reset while it runs"
            )


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
    ``info["outcome"]`` of the last step, a step's ``metadata`` from its
    ``info["step_metadata"]`` (e.g. the blob of a browser screenshot). ``self.trajectory`` is
    the last finished episode and ``self.trajectories`` all of them.

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
                metadata=dict(ts.info.get("step_metadata") or {}),
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

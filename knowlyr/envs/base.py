"""``TaskEnv``: the episode loop shared by every built-in environment.

A task env owns a task pool (a suite, optionally one family and split, or an explicit task
list), a :class:`~knowlyr.core.tools.Toolbox` and a :class:`~knowlyr.core.profile.DomainProfile`.
``reset`` picks a task (the one given, or a seeded draw from the pool) and returns its
instruction with ``info["task"]`` (the task's public fields); ``step`` runs one tool call
through the toolbox, whose errors come back as observations with a non-zero
``info["exit_code"]``; a terminal tool of the profile (``submit``, ``respond``) ends the
episode, and ``info["outcome"]`` on that step says how it went (``success``, ``score``...).
The reward is sparse: 1.0 on a successful last step, 0 otherwise (``score`` grades partial
success in the outcome).
"""

from __future__ import annotations

import abc
import random
from collections.abc import Sequence
from typing import Any

from knowlyr.core.env import Action, AgentEnv, TimeStep, error_timestep, parse_action
from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.core.tools import Toolbox, ToolResult
from knowlyr.errors import ActionError, ConfigError
from knowlyr.taskset import Split, Suite, Task, get_suite, get_task
from knowlyr.trajectory import TaskInfo

__all__ = ["TaskEnv"]


class TaskEnv(AgentEnv):
    """Base of the built-in envs: task selection, tool dispatch, terminal tools, outcome.

    Subclasses set ``domain`` and implement :meth:`_build_toolbox`, :meth:`_start` (set up
    the episode's state for a task), :meth:`_context` (what the tools get injected) and
    :meth:`_outcome` (judge the episode when a terminal tool runs).

    Args:
        suite: suite name or :class:`~knowlyr.taskset.Suite` to draw tasks from.
        family: only tasks of this family (or families).
        split: only ``train`` or ``heldout`` tasks.
        tasks: an explicit pool (overrides suite / family / split for drawing).
        profile: the domain profile (default: the built-in one of ``domain``).
    """

    domain = "generic"

    def __init__(
        self,
        *,
        suite: str | Suite | None = None,
        family: str | Sequence[str] | None = None,
        split: Split | None = None,
        tasks: Sequence[Task] | None = None,
        profile: str | DomainProfile | None = None,
    ):
        self.profile = get_profile(profile or self.domain)
        self.suite = get_suite(suite or self.domain) if tasks is None or suite is not None else None
        if split not in (None, "train", "heldout"):
            raise ConfigError(f"split must be 'train', 'heldout' or None, got {split!r}")
        if family is not None and self.suite is not None:
            unknown = ({family} if isinstance(family, str) else set(family)) - set(
                self.suite.families
            )
            if unknown:
                raise ConfigError(
                    f"family {sorted(unknown)} is not in suite {self.suite.name!r}; "
                    f"its families are {list(self.suite.families)}"
                )
        self.family = family
        self.split = split
        self._pool_tasks = list(tasks) if tasks is not None else None
        if self._pool_tasks is not None and not self._pool_tasks:
            raise ConfigError("tasks must not be empty; pass tasks=None to draw from the suite")
        self._pool_ids: list[str] | None = None
        self.toolbox = self._build_toolbox()
        self.available_tools = self.toolbox.names
        self._rng = random.Random()
        self.task: Task | None = None
        self._done = True
        self.n_steps = 0

    # -- hooks ------------------------------------------------------------------------------

    @abc.abstractmethod
    def _build_toolbox(self) -> Toolbox:
        """The env's tools."""

    def _start(self, task: Task) -> None:
        """Set up the episode's state for ``task``."""

    def _context(self) -> dict[str, Any]:
        return {}

    @abc.abstractmethod
    def _outcome(self, tool: str, result: ToolResult) -> dict[str, Any]:
        """Judge the episode when terminal ``tool`` ran: ``success``, ``score`` and extras."""

    def _final_observation(self, output: str, outcome: dict[str, Any]) -> str:
        """The observation of the terminal step (the tool's output unless overridden)."""
        return output

    def _truncated_outcome(self) -> dict[str, Any]:
        """The outcome when the episode is cut off before a terminal tool."""
        return {"success": False, "score": 0.0}

    # -- protocol ---------------------------------------------------------------------------

    def parse_action(self, action: Any) -> tuple[str, dict[str, Any]]:
        """``(tool, params)``; a profile alias (``query_order``, ``answer``...) maps to its tool.

        Raises:
            ActionError: malformed action, or a tool that is neither ours nor an alias of one.
        """
        tool, params = parse_action(action, None)
        if tool not in self.toolbox:
            canon = self.profile.canonical(tool, params)
            if canon not in self.toolbox:
                raise ActionError(
                    f"unknown tool {tool!r}; available tools: {', '.join(self.toolbox.names)}"
                )
            tool = canon
        return tool, params

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of this env's tools (for model agents and export)."""
        return self.toolbox.schemas()

    def _pool(self) -> list[str]:
        if self._pool_ids is None:
            if self._pool_tasks is not None:
                self._pool_ids = [t.task_id for t in self._pool_tasks]
            else:
                self._pool_ids = self.suite.select(split=self.split, family=self.family)
            if not self._pool_ids:
                raise ConfigError(
                    f"{type(self).__name__}: no task in suite {self.suite.name!r} with "
                    f"family={self.family!r}, split={self.split!r}"
                )
        return self._pool_ids

    def _resolve(self, task: Any) -> Task:
        if task is None:
            tid = self._rng.choice(self._pool())
            if self._pool_tasks is not None:
                return next(t for t in self._pool_tasks if t.task_id == tid)
            return self.suite.get(tid)
        if isinstance(task, Task):
            return task
        if isinstance(task, int) and not isinstance(task, bool) and self.suite is not None:
            return self.suite.task(task)
        tid = (
            task.task_id
            if isinstance(task, TaskInfo)
            else task.get("task_id")
            if isinstance(task, dict)
            else task
        )
        if not isinstance(tid, str):
            raise ConfigError(
                "task must be a Task, a task id, a TaskInfo or a dict with task_id, "
                f"got {task!r:.100}"
            )
        if self._pool_tasks is not None:
            for t in self._pool_tasks:
                if t.task_id == tid:
                    return t
        if self.suite is not None and tid in self.suite._index:
            return self.suite.get(tid)
        return get_task(tid)

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        """Start an episode on ``task`` (a Task, task id, index or None for a seeded draw)."""
        if seed is not None:
            self._rng.seed(seed)
        t = self._resolve(task)
        if t.domain != self.domain:
            raise ConfigError(
                f"task {t.task_id!r} is a {t.domain!r} task; "
                f"{type(self).__name__} runs {self.domain!r}"
            )
        self._start(t)
        self.task = t
        self._done = False
        self.n_steps = 0
        return TimeStep(observation=t.instruction, info={"task": t.public_info()})

    def step(self, action: Action) -> TimeStep:
        if self.task is None or self._done:
            return error_timestep(
                "the episode is over; call reset() to start a new one", terminated=True
            )
        try:
            tool, params = self.parse_action(action)
        except ActionError as e:
            self.n_steps += 1
            return error_timestep(str(e))
        self.n_steps += 1
        result = self.toolbox.call(tool, params, **self._context())
        info: dict[str, Any] = {"exit_code": result.exit_code, "tool": tool}
        if result.error is not None:
            info["error"] = result.error
        ts = TimeStep(observation=result.output, info=info)
        if self.profile.is_terminal(tool, params) and result.exit_code == 0:
            outcome = self._outcome(tool, result)
            outcome.setdefault("reason", tool)
            ts.observation = self._final_observation(result.output, outcome)
            ts.terminated = True
            ts.reward = 1.0 if outcome.get("success") else 0.0
            ts.info["outcome"] = outcome
            self._done = True
        return ts

    def outcome_if_truncated(self) -> dict[str, Any]:
        """What the outcome is if the episode ends now without a terminal tool."""
        return self._truncated_outcome()

    def __repr__(self) -> str:
        fam = f" family={self.family!r}" if self.family else ""
        return f"<{type(self).__name__} domain={self.domain!r}{fam}>"

"""Re-run a trajectory's actions in a sandbox and say, step by step, where the observations differ.

A step with an action is re-run through the toolbox (the coding tools by default); a step
without one (a message) is skipped. Each replayed step is compared with what was recorded:
same exit code, same output (trailing whitespace aside). A tool the toolbox does not know comes
back as a differing step whose ``error`` names it, never as an exception.

Example:
    >>> from knowlyr.sandbox import create_sandbox
    >>> from knowlyr.trajectory import Trajectory
    >>> t = Trajectory.from_json(open("run.json").read())  # doctest: +SKIP
    >>> with create_sandbox() as sb:  # doctest: +SKIP
    ...     report = replay_trajectory(sb, t)
    ...     report.first_divergence
    2
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from knowlyr.sandbox._util import truncate_text

if TYPE_CHECKING:
    from knowlyr.core.tools import Toolbox
    from knowlyr.sandbox.base import Sandbox
    from knowlyr.trajectory import Trajectory

__all__ = ["ReplayReport", "ReplayStep", "replay_trajectory"]

DIFF_CHARS = 4000  # longest diff kept per step


@dataclass(slots=True)
class ReplayStep:
    """One replayed action: what was recorded, what happened now, and whether they agree."""

    index: int
    tool: str
    params: dict[str, Any]
    recorded_exit_code: int | None
    exit_code: int
    same_exit_code: bool
    same_output: bool
    error: str | None = None
    diff: str = ""

    @property
    def matches(self) -> bool:
        return self.same_exit_code and self.same_output


@dataclass(slots=True)
class ReplayReport:
    """The replay of one trajectory: its steps and where they first differ."""

    trajectory_id: str
    task_id: str
    steps: list[ReplayStep] = field(default_factory=list)
    skipped: int = 0  # steps without an action

    @property
    def first_divergence(self) -> int | None:
        """Index of the first step whose observation differs (None: all agree)."""
        return next((s.index for s in self.steps if not s.matches), None)

    @property
    def differing(self) -> int:
        return sum(1 for s in self.steps if not s.matches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory_id": self.trajectory_id,
            "task_id": self.task_id,
            "replayed": len(self.steps),
            "skipped": self.skipped,
            "differing": self.differing,
            "first_divergence": self.first_divergence,
            "steps": [{**asdict(s), "matches": s.matches} for s in self.steps],
        }


def _diff(recorded: str, now: str) -> str:
    lines = difflib.unified_diff(
        recorded.splitlines(keepends=True),
        now.splitlines(keepends=True),
        "recorded",
        "replayed",
        n=1,
    )
    return truncate_text("".join(lines), DIFF_CHARS)[0]


def replay_trajectory(
    sandbox: Sandbox,
    trajectory: Trajectory,
    *,
    toolbox: Toolbox | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Re-run ``trajectory``'s actions in ``sandbox`` and compare each observation.

    Args:
        sandbox: where to run them (as it is now: reset it first for a replay from scratch).
        trajectory: the recorded run.
        toolbox: the tools that run the actions (default: :func:`coding_toolbox`).
        progress: called with ``(steps done, steps to replay)`` after each action.

    Returns:
        A :class:`ReplayReport` with one :class:`ReplayStep` per action.
    """
    if toolbox is None:
        from knowlyr.sandbox.tools import coding_toolbox

        toolbox = coding_toolbox()
    actions = [s for s in trajectory.steps if s.action is not None]
    report = ReplayReport(
        trajectory.id, trajectory.task.task_id, skipped=len(trajectory.steps) - len(actions)
    )
    for done, step in enumerate(actions, 1):
        assert step.action is not None
        res = toolbox.call(step.action.tool, dict(step.action.params), sandbox=sandbox)
        obs = step.observation
        recorded = obs.output if obs is not None else ""
        rec_code = obs.exit_code if obs is not None else None
        same_out = recorded.rstrip() == res.output.rstrip()
        same_code = rec_code is None or rec_code == res.exit_code
        report.steps.append(
            ReplayStep(
                index=step.index,
                tool=step.action.tool,
                params=dict(step.action.params),
                recorded_exit_code=rec_code,
                exit_code=res.exit_code,
                same_exit_code=same_code,
                same_output=same_out,
                error=res.error,
                diff="" if same_out else _diff(recorded, res.output),
            )
        )
        if progress is not None:
            progress(done, len(actions))
    return report

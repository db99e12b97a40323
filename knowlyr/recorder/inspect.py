"""Check and compare trajectories: :func:`validate_trajectory`, :func:`diff_trajectories`.

Example:
    >>> from knowlyr.trajectory import Trajectory, TaskInfo
    >>> validate_trajectory(Trajectory(task=TaskInfo(task_id="t")))
    ['no steps', 'task has no instruction']
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from knowlyr.trajectory import Trajectory

__all__ = ["TrajectoryDiff", "diff_trajectories", "validate_trajectory"]


def validate_trajectory(t: Trajectory) -> list[str]:
    """Problems a user should know about before training on ``t`` (empty list = fine).

    Checks: the id is the content hash, there are steps, step indices run 0..n-1, every
    action has a tool name, no step is empty, the task has an instruction, and the outcome
    counts are not negative.
    """
    problems: list[str] = []
    if t.id != t.content_hash():
        problems.append(f"id {t.id[:12]}... is not the content hash {t.content_hash()[:12]}...")
    if not t.steps:
        problems.append("no steps")
    if not t.task.instruction:
        problems.append("task has no instruction")
    for i, s in enumerate(t.steps):
        if s.index != i:
            problems.append(f"step {i}: index is {s.index}, expected {i}")
        if s.action is not None and not s.action.tool:
            problems.append(f"step {i}: action has an empty tool name")
        if s.action is None and s.message is None and not s.thought:
            problems.append(f"step {i}: no action, message or thought")
    o = t.outcome
    for name in ("tests_passed", "tests_failed"):
        v = getattr(o, name)
        if v is not None and v < 0:
            problems.append(f"outcome.{name} is negative ({v})")
    return problems


@dataclass(slots=True)
class TrajectoryDiff:
    """Side-by-side comparison of two trajectories."""

    same_content: bool
    steps: tuple[int, int]
    tools: tuple[dict[str, int], dict[str, int]]
    outcome: tuple[dict[str, Any], dict[str, Any]]
    first_divergence: int | None
    rows: list[tuple[int, str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "same_content": self.same_content,
            "steps": list(self.steps),
            "tools": list(self.tools),
            "outcome": list(self.outcome),
            "first_divergence": self.first_divergence,
        }


def _label(t: Trajectory, i: int) -> str:
    if i >= len(t.steps):
        return ""
    s = t.steps[i]
    if s.action is not None:
        p = ", ".join(f"{k}={str(v)[:30]!s}" for k, v in list(s.action.params.items())[:2])
        return f"{s.action.tool}({p})"
    return f"message: {(s.message or s.thought)[:40]}"


def diff_trajectories(a: Trajectory, b: Trajectory) -> TrajectoryDiff:
    """Compare steps, tools used and outcome of ``a`` and ``b``.

    ``first_divergence`` is the first step index whose tool, params or output differ
    (``None`` when one is a prefix of the other and they have the same length).
    """

    def key(t: Trajectory, i: int) -> Any:
        s = t.steps[i]
        return (
            s.tool,
            s.action.params if s.action else None,
            s.observation.output if s.observation else None,
        )

    n = max(len(a.steps), len(b.steps))
    first = None
    for i in range(n):
        if i >= len(a.steps) or i >= len(b.steps) or key(a, i) != key(b, i):
            first = i
            break
    keep = {"success", "score", "terminated", "truncated", "tests_passed", "tests_failed", "reason"}
    return TrajectoryDiff(
        same_content=a.id == b.id,
        steps=(len(a.steps), len(b.steps)),
        tools=(dict(Counter(a.tools_used())), dict(Counter(b.tools_used()))),
        outcome=(a.outcome.model_dump(include=keep), b.outcome.model_dump(include=keep)),
        first_divergence=first,
        rows=[(i, _label(a, i), _label(b, i)) for i in range(n)],
    )

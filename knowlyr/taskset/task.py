"""The :class:`Task` model: a :class:`~knowlyr.trajectory.TaskInfo` plus what a suite needs.

A task carries everything needed to run and judge one episode: the files that set up the
workspace, hidden tests written only after ``submit``, the facts a reply must state, the
actions that must have been taken, a reference solution (what a scripted expert does) and
its length, and the split it belongs to. :meth:`Task.public_info` is what the agent is
allowed to see (it goes into ``info["task"]`` on reset); the rest stays with the env.

Example:
    >>> t = Task(task_id="demo-1", suite="demo", instruction="Say hi", expected_facts=["hi"])
    >>> t.public_info()["task_id"], t.split
    ('demo-1', 'train')
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from knowlyr.trajectory import TaskInfo

__all__ = ["Split", "Task"]

Split = Literal["train", "heldout"]


class Task(TaskInfo):
    """One task of a suite. A :class:`Task` is a :class:`TaskInfo`, so it goes anywhere one does.

    Attributes:
        family: the generator family inside the suite (``order_status``, ``refund``...).
        split: ``train`` or ``heldout``; tasks of a suite with the same instruction text
            share one (see :func:`knowlyr.taskset.split_of`).
        files: workspace files (path -> text) written before the episode starts.
        hidden_tests: test files (path -> text) written only after ``submit``.
        test_command: shell command that runs the hidden tests and prints a
            ``N passed, M failed`` summary line.
        expected_facts: strings the final answer must state (matched as whole tokens).
        forbidden_facts: strings that must not appear (the values of distractors), so listing
            every candidate never passes.
        required_actions: actions (``{"tool": ..., "params": {...}}``) whose effect on the
            task's state must be observable at the end (a refund, an address change).
        reference_answer: an answer that passes the checks.
        reference_solution: the actions of a correct episode.
        reference_length: number of steps of the reference solution.
        data: suite-specific state (a seeded database, a knowledge base, an image name).
    """

    family: str = ""
    split: Split = "train"
    files: dict[str, str] = Field(default_factory=dict)
    hidden_tests: dict[str, str] = Field(default_factory=dict)
    test_command: str = ""
    expected_facts: list[str] = Field(default_factory=list)
    forbidden_facts: list[str] = Field(default_factory=list)
    required_actions: list[dict[str, Any]] = Field(default_factory=list)
    reference_answer: str = ""
    reference_solution: list[dict[str, Any]] = Field(default_factory=list)
    reference_length: int = 0
    data: dict[str, Any] = Field(default_factory=dict)

    def public_info(self) -> dict[str, Any]:
        """What the agent may see: id, domain, suite, instruction and non-secret metadata."""
        return {
            "task_id": self.task_id,
            "domain": self.domain,
            "suite": self.suite,
            "instruction": self.instruction,
            "metadata": {"family": self.family, "split": self.split, **self.metadata},
        }

    def task_info(self) -> TaskInfo:
        """A plain :class:`TaskInfo` with only the public fields (for trajectories)."""
        return TaskInfo.model_validate(self.public_info())

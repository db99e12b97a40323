"""CounterEnv: the one stub environment the core tests share."""

from __future__ import annotations

from typing import Any, ClassVar

from knowlyr.core import AgentEnv, TimeStep, error_timestep
from knowlyr.errors import ActionError


class CounterEnv(AgentEnv):
    """Count up to a target: ``add`` adds ``n``, ``submit`` ends with success iff the count is right."""

    domain = "generic"
    available_tools: ClassVar[list[str]] = ["add", "read", "submit"]

    def __init__(self, target: int = 3, reward_per_step: float = 0.0):
        self.target = target
        self.reward_per_step = reward_per_step
        self.count = 0
        self.closed = False
        self.task_id = "count-3"

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        self.count = 0
        if isinstance(task, dict) and "target" in task:
            self.target = task["target"]
        self.task_id = f"count-{self.target}"
        instruction = f"Count to {self.target}."
        return TimeStep(
            observation=instruction,
            info={
                "task": {"task_id": self.task_id, "instruction": instruction, "domain": self.domain}
            },
        )

    def step(self, action: dict[str, Any]) -> TimeStep:
        try:
            tool, params = self.parse_action(action)
        except ActionError as e:
            return error_timestep(str(e))
        if tool == "add":
            n = params.get("n", 1)
            if not isinstance(n, int):
                return error_timestep(f"n must be an int, got {n!r}")
            self.count += n
            return TimeStep(
                observation=f"count={self.count}",
                reward=self.reward_per_step,
                info={"exit_code": 0},
            )
        if tool == "read":
            return TimeStep(observation="x" * params.get("size", 10), info={"exit_code": 0})
        ok = self.count == self.target
        return TimeStep(
            observation="correct" if ok else "wrong",
            reward=1.0 if ok else 0.0,
            terminated=True,
            info={"exit_code": 0, "outcome": {"success": ok, "score": float(ok)}},
        )

    def close(self) -> None:
        self.closed = True

"""Shared helpers for the store tests: a real store in a temp dir and small trajectories."""

from __future__ import annotations

import pytest

from knowlyr.store import Store
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


def make_traj(i: int, *, task: str = "t", n_steps: int = 3, blob: str | None = None) -> Trajectory:
    """A distinct small coding trajectory (content depends on ``i`` and ``task``)."""
    steps = [
        Step(
            index=k,
            thought=f"look at file {i}-{k}",
            action=ToolCall(tool="bash", params={"command": f"cat f{i}_{k}.py"}),
            observation=Observation(output=f"print({i * 100 + k})\n" * 5, exit_code=0),
        )
        for k in range(n_steps)
    ]
    return Trajectory(
        task=TaskInfo(
            task_id=f"{task}-{i % 7}", domain="coding", suite="unit", instruction=f"fix bug {i}"
        ),
        agent=AgentInfo(name="scripted", model="m1"),
        steps=steps,
        outcome=Outcome(success=i % 2 == 0, score=i / 10),
        source=Source(format="knowlyr", blob=blob),
    )


@pytest.fixture
def store(tmp_path) -> Store:
    return Store.open(str(tmp_path / "store"))

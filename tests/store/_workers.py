"""Functions run in child processes by the concurrency and crash tests (spawn-safe)."""

from __future__ import annotations

import os
import time

from knowlyr.store import Store
from tests.store.conftest import make_traj


def add_range(url: str, lo: int, hi: int, batch: int, go_file: str, locking: bool = True) -> None:
    """Wait for ``go_file``, then add trajectories lo..hi in batches."""
    store = Store.open(url)
    if not locking:
        store._lock_dir = None  # exercise the object-store path (MERGE + conflict retry)
    while not os.path.exists(go_file):
        time.sleep(0.005)
    for start in range(lo, hi, batch):
        store.add_trajectories([make_traj(i) for i in range(start, min(hi, start + batch))])


def big_write(url: str, n: int, ready_file: str) -> None:
    """Add n large trajectories (40 steps of 500 hard-to-compress characters) in one write."""
    import random

    from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory

    rng = random.Random(n)
    steps = [
        Step(
            index=k,
            action=ToolCall(tool="bash", params={"command": f"step {k}"}),
            observation=Observation(output=rng.randbytes(250).hex(), exit_code=0),
        )
        for k in range(40)
    ]
    store = Store.open(url)
    trajs = [Trajectory(task=TaskInfo(task_id=f"big-{n}-{i}"), steps=steps) for i in range(n)]
    with open(ready_file, "w") as f:
        f.write("go")
    store.add_trajectories(trajs)

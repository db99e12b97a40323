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
    """Add n large trajectories in one transaction, announcing when serialisation is done."""
    store = Store.open(url)
    trajs = [make_traj(i, task="big", n_steps=40) for i in range(10_000, 10_000 + n)]
    with open(ready_file, "w") as f:
        f.write("go")
    store.add_trajectories(trajs)

"""The recorder's pool workers do not outlive their parent (issue #17: no orphans)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Starts a pool of two workers, converts a few files, prints the workers' pids and then
# keeps the pool open (idle workers block reading their call queue) until it is killed.
_OWNER = r"""
import multiprocessing, sys, time
from pathlib import Path
from knowlyr.recorder.pool import iter_pool

files = sorted(str(p) for p in Path(sys.argv[1]).glob("*.json"))
it = iter_pool(files, None, False, 2, None)
next(it)
print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_workers_exit_when_their_parent_is_killed(tmp_path):
    for i in range(8):
        (tmp_path / f"bad{i}.json").write_text('{"not": "a trajectory"}')
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        workers = [int(p) for p in owner.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        end = time.monotonic() + 5.0
        while time.monotonic() < end and any(_alive(p) for p in workers):
            time.sleep(0.05)
        left = [p for p in workers if _alive(p)]
        assert not left, f"pool workers {left} outlived their killed parent"
    finally:
        owner.kill()
        owner.wait()
        for p in workers if "workers" in locals() else []:
            if _alive(p):
                os.kill(p, signal.SIGKILL)

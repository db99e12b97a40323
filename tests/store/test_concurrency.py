"""Real processes writing the same store at once, and a writer SIGKILLed mid-write."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from knowlyr.store import Store
from tests.store._workers import add_range, big_write
from tests.store.conftest import make_traj

CTX = mp.get_context("spawn")  # fresh interpreters: no forked tokio runtime, like real workers


def _run_two_writers(url: str, tmp_path, *, locking: bool) -> None:
    go = str(tmp_path / "go")
    # Both add the same 400 trajectories in the same order, so they race on every batch.
    procs = [CTX.Process(target=add_range, args=(url, 0, 400, 20, go, locking)) for _ in range(2)]
    for p in procs:
        p.start()
    time.sleep(1.5)  # let both import and open the store
    open(go, "w").close()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]


@pytest.mark.parametrize("locking", [True, False], ids=["local-lock", "merge-retry"])
def test_two_processes_adding_the_same_trajectories_end_with_no_duplicates(
    tmp_path, locking
) -> None:
    url = str(tmp_path / "store")
    Store.open(url).add_trajectories([make_traj(i) for i in range(0, 400, 7)])  # some already there
    _run_two_writers(url, tmp_path, locking=locking)
    store = Store.open(url)
    ids = store.read("trajectories", columns=["id"])["id"]
    assert ids.len() == ids.n_unique() == 400
    assert set(ids) == {make_traj(i).id for i in range(400)}
    v = store.version("trajectories")
    counts = [store.count("trajectories", version=k) for k in range(v + 1)]
    assert counts == sorted(counts) and counts[-1] == 400  # every version readable, only grows
    assert store.get_trajectory(make_traj(399).id) == make_traj(399)


def _kill_during_write(url: str, tmp_path, n: int) -> bool:
    """Start a writer of ``n`` trajectories; SIGSTOP it as soon as a new data file appears,
    and SIGKILL it if its commit is not there yet. True when it died before committing."""
    tdir = os.path.join(url, "tables", "trajectories")
    log = os.path.join(tdir, "_delta_log")
    known, commits = set(os.listdir(tdir)), set(os.listdir(log))
    p = CTX.Process(target=big_write, args=(url, n, str(tmp_path / f"ready-{n}")))
    p.start()
    killed = False
    while p.is_alive():
        if set(os.listdir(tdir)) - known:  # a data file of the next version is being written
            os.kill(p.pid, signal.SIGSTOP)
            if {f for f in set(os.listdir(log)) - commits if f.endswith(".json")}:
                os.kill(p.pid, signal.SIGCONT)  # too late: it committed; let it finish
            else:
                os.kill(p.pid, signal.SIGKILL)
                killed = True
            break
        time.sleep(0.0005)
    p.join(120)
    assert p.exitcode == (-signal.SIGKILL if killed else 0)
    return killed


def test_writer_killed_mid_write_leaves_last_version_readable(tmp_path) -> None:
    url = str(tmp_path / "store")
    store = Store.open(url)
    first = store.add_trajectories([make_traj(i) for i in range(50)])
    tdir = os.path.join(url, "tables", "trajectories")
    files_before = set(os.listdir(tdir))
    for n in (4000, 12000, 30000):  # a bigger write if the first one committed too fast
        store = Store.open(url)
        base = store.version("trajectories")
        rows = store.count("trajectories")
        if _kill_during_write(url, tmp_path, n):
            print(f"killed mid-write at n={n}")
            break
    else:
        pytest.fail("could not catch a writer between writing data and committing")

    orphans = set(os.listdir(tdir)) - files_before
    assert orphans, "the killed writer should have left an uncommitted data file"
    reopened = Store.open(url)
    assert reopened.version("trajectories") == base
    df = reopened.read("trajectories")
    assert df.height == rows and df["id"].n_unique() == rows
    assert len(reopened.read_trajectories(version=first.version)) == 50

    # the orphans are collectable, and removing them breaks no version
    listed = reopened.vacuum("trajectories", dry_run=True, retention_hours=0)
    assert {os.path.basename(f) for f in listed} == orphans
    reopened.vacuum("trajectories", dry_run=False, retention_hours=0)
    assert not set(os.listdir(tdir)) - files_before
    assert reopened.read("trajectories", version=first.version).height == 50

    # the store keeps working: the lock died with the writer, and a retry commits cleanly
    extra = [make_traj(i, task="late") for i in range(100)]
    v_now = reopened.version("trajectories")  # vacuum logs its own commits
    again = reopened.add_trajectories(extra)
    assert (again.new, again.version, again.rows) == (100, v_now + 1, rows + 100)
    assert reopened.read("trajectories", version=first.version).height == 50


def test_vacuum_removes_half_written_uploads_of_a_killed_local_writer(tmp_path) -> None:
    """A writer killed while its data file still has the local object store's temporary
    ``name#N`` leaves a file Delta does not track; vacuum lists it and removes it."""
    url = str(tmp_path / "store")
    store = Store.open(url)
    store.add_trajectories([make_traj(i) for i in range(20)])
    tdir = os.path.join(url, "tables", "trajectories")
    partial = os.path.join(tdir, "part-00000-deadbeef-c000.zstd.parquet#1")
    with open(partial, "wb") as f:
        f.write(b"PAR1 truncated")
    assert "part-00000-deadbeef-c000.zstd.parquet#1" in store.vacuum(
        "trajectories", dry_run=True, retention_hours=0
    )
    assert os.path.exists(partial)  # a dry run deletes nothing
    assert store.vacuum("trajectories", dry_run=True, retention_hours=1) == []  # too recent
    store.vacuum("trajectories", dry_run=False, retention_hours=0)
    assert not os.path.exists(partial)
    assert Store.open(url).count("trajectories") == 20

"""A run killed between writing a table's files and committing them leaves nothing behind
after ``store gc``, and its id is a row of ``runs`` (issue #38): lineage never names a run
that does not exist."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.store import Store, _append
from knowlyr.store.ingest import ingest
from tests.store.conftest import make_traj

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "data" / "fixtures"
HOUR = 3600


def _logs(root: Path, n: int = 6) -> Path:
    root.mkdir()
    log = (FIX / "openhands" / "basic.json").read_bytes()
    for i in range(n):
        (root / f"log_{i}.json").write_bytes(log.replace(b"2048", str(1000 + i).encode()))
    return root


def _parquet(store: Store, table: str) -> set[str]:
    folder = Path(store.table_uri(table))
    return {p.name for p in folder.glob("*.parquet")} if folder.is_dir() else set()


def _committed(store: Store, table: str) -> set[str]:
    from deltalake import DeltaTable

    return {os.path.basename(u) for u in DeltaTable(store.table_uri(table)).file_uris()}


def _stray(store: Store, table: str, name: str, age_s: float) -> Path:
    """A Parquet file in the table's folder that no commit names: a copy of a committed one
    (same schema, same rows), ``age_s`` old."""
    folder = Path(store.table_uri(table))
    src = folder / sorted(_committed(store, table))[0]
    dst = folder / name
    pq.write_table(pq.read_table(src), dst)
    t = time.time() - age_s
    os.utime(dst, (t, t))
    return dst


def test_gc_removes_table_files_no_commit_names_and_keeps_every_version(tmp_path) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories([make_traj(i) for i in range(3)])
    store.add_trajectories([make_traj(i) for i in range(3, 5)])
    store.append("runs", [{"run_id": "r1", "stage": "x", "status": "completed"}])
    before = {t: _committed(store, t) for t in ("trajectories", "runs")}
    old = _stray(store, "trajectories", "part-00000-dead-c000.zstd.parquet", 2 * HOUR)
    young = _stray(store, "trajectories", "part-00000-young-c000.zstd.parquet", 60)
    old_runs = _stray(store, "runs", "part-00001-dead.parquet", 2 * HOUR)

    rep = store.gc(dry_run=True)
    assert sorted(rep.table_files) == ["runs/part-00001-dead.parquet",
                                       "trajectories/part-00000-dead-c000.zstd.parquet"]  # fmt: skip
    assert rep.table_bytes == old.stat().st_size + old_runs.stat().st_size
    assert old.exists() and old_runs.exists()  # a dry run deletes nothing

    res = runner.invoke(app, ["store", "gc", "--store", store.url])
    assert res.exit_code == 0, res.output
    assert "uncommitted table files" in res.output and "deleted 2" in res.output
    assert not old.exists() and not old_runs.exists()
    assert young.exists()  # younger than --min-age: maybe a writer about to commit it
    for table, files in before.items():
        assert files <= _parquet(store, table)
    # every version still reads, with its rows
    assert [store.count("trajectories", version=v) for v in (0, 1)] == [3, 5]
    assert store.read("runs")["run_id"].to_list() == ["r1"]
    assert store.gc(dry_run=False, min_age_s=0).table_files == [young.relative_to(
        young.parents[1]).as_posix()]  # fmt: skip
    assert _parquet(store, "trajectories") == before["trajectories"]


def test_gc_keeps_the_table_files_a_live_run_has_not_committed_yet(tmp_path) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories([make_traj(0)])
    table = store.read("trajectories").to_arrow()
    uri = store.table_uri("trajectories")
    with pytest.raises(RuntimeError), store.blob_journal():
        written = _append.write_files(uri, table.schema, table.to_batches())
        (name, _, _) = written.files[0]
        rep = store.gc(dry_run=False, min_age_s=0)  # no age protection at all
        assert rep.table_files == [] and rep.in_flight == 1
        assert name in _parquet(store, "trajectories")
        raise RuntimeError("the run fails before its commit")
    rep = store.gc(dry_run=False)  # its run is gone: the file goes, whatever its age
    assert rep.table_files == [f"trajectories/{name}"]
    assert _parquet(store, "trajectories") == _committed(store, "trajectories")


_KILLER = """
import os, signal, sys
from knowlyr.store import Store, _append
from knowlyr.store.store import Store as S
from knowlyr.store.ingest import ingest

where, batches = sys.argv[3], int(sys.argv[4])
if where == "commit":  # the trajectories' files are written; the commit never comes
    commit = _append.commit_files

    def die(written, **k):
        if written.uri.endswith("/trajectories"):
            os.kill(os.getpid(), signal.SIGKILL)
        commit(written, **k)

    _append.commit_files = die
else:  # killed once `batches` adds have written their sightings, before the run's last row
    add = S._add_sightings
    done = []

    def die(self, *a, **k):
        add(self, *a, **k)
        done.append(1)
        if len(done) == batches:
            os.kill(os.getpid(), signal.SIGKILL)

    S._add_sightings = die
ingest(Store.open(sys.argv[1]), [sys.argv[2]], workers=1, batch_size=batches if batches > 1 else None)
"""


def _kill(tmp_path: Path, where: str, batches: int = 1) -> Store:
    url = str(tmp_path / "store")
    proc = subprocess.run(
        [sys.executable, "-c", _KILLER, url, str(_logs(tmp_path / "logs")), where, str(batches)],
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    return Store.open(url)


def test_gc_removes_the_table_files_of_an_ingest_killed_before_its_commit(tmp_path) -> None:
    store = _kill(tmp_path, "commit")
    left = _parquet(store, "trajectories")
    assert left and "trajectories" not in store.tables()  # written, never committed
    (run,) = store.runs(stage="ingest")
    assert run.status == "running"
    res = runner.invoke(app, ["store", "gc", "--store", store.url])  # default --min-age
    assert res.exit_code == 0, res.output
    assert f"deleted {len(left)}" in res.output and _parquet(store, "trajectories") == set()
    assert f"runs marked killed (their process is gone): {run.run_id}" in res.output
    (run,) = store.runs(stage="ingest")
    assert run.status == "killed" and "died" in (run.error or "")
    assert store.blobs.iter_hashes() is not None and list(store.blobs.iter_hashes()) == []
    # the store takes the same logs again
    assert ingest(store, [tmp_path / "logs"]).new == 6


@pytest.mark.parametrize("batches", [1, 2])
def test_every_run_sightings_name_is_a_row_of_runs_after_a_kill(tmp_path, batches) -> None:
    store = _kill(tmp_path, "sightings", batches)
    seen = set(store.sightings()["run_id"])
    assert seen  # the kill came after the sightings were committed
    runs = {r.run_id: r for r in store.runs()}
    assert seen <= set(runs)
    (run_id,) = seen
    assert runs[run_id].status == "running" and runs[run_id].stage == "ingest"
    lin = store.lineage(f"trajectories@{store.version('trajectories')}")
    assert {r.run_id for r in lin.runs} <= set(runs)
    store.gc(dry_run=False)
    assert {r.run_id: r.status for r in store.runs()}[run_id] == "killed"
    assert _parquet(store, "trajectories") == _committed(store, "trajectories")


def test_an_ingest_that_raises_marks_its_run_failed(tmp_path, monkeypatch) -> None:
    store = Store.open(str(tmp_path / "store"))

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(_append, "commit_files", boom)
    with pytest.raises(OSError, match="disk full"):
        ingest(store, [_logs(tmp_path / "logs")])
    monkeypatch.undo()
    (run,) = store.runs(stage="ingest")
    assert run.status == "failed" and run.error == "OSError: disk full"
    assert store.gc(dry_run=False).table_files  # its written files are reclaimed at once
    assert _parquet(store, "trajectories") == set()
    shutil.rmtree(tmp_path / "logs")


def test_a_long_add_keeps_its_files_from_gc_until_it_commits(tmp_path) -> None:
    store = Store.open(str(tmp_path / "store"))
    big = [make_traj(i, n_steps=1) for i in range(2500)]
    checked = []

    def items():  # a slow producer: gc runs between its rows, with no age protection at all
        yield from big[:2100]  # two batches of 1000 rows go to a Parquet file...
        deadline = time.monotonic() + 30  # ...that a writer thread creates: wait for it
        while not list((tmp_path / "store" / "tables" / "trajectories").glob("*.parquet")):
            assert time.monotonic() < deadline, "the writer made no Parquet file"
            time.sleep(0.05)
        rep = store.gc(dry_run=False, min_age_s=0)
        checked.append((rep.table_files, rep.in_flight))
        yield from big[2100:]

    assert store.add_trajectories(items()).new == 2500
    assert checked == [([], 1)]  # the file in progress was kept
    assert store.count("trajectories") == 2500
    assert _parquet(store, "trajectories") == _committed(store, "trajectories")

"""``store gc`` with its defaults reclaims the blobs of an ingest that died before its commit,
and keeps those of a run still in flight."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.store import Store, _append
from knowlyr.store.ingest import ingest

runner = CliRunner()
FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"


def _logs(root: Path, n: int = 6) -> Path:
    root.mkdir()
    log = (FIX / "openhands" / "basic.json").read_bytes()
    for i in range(n):
        (root / f"log_{i}.json").write_bytes(log.replace(b"2048", str(1000 + i).encode()))
    (root / "bad.json").write_bytes(b"{not json")
    return root


def _blobs(store: Store) -> set[str]:
    return set(store.blobs.iter_hashes())


def test_gc_defaults_reclaim_the_blobs_of_an_ingest_that_raised(tmp_path, monkeypatch) -> None:
    store = Store.open(str(tmp_path / "store"))
    ingest(store, [FIX / "openhands" / "basic.json"])  # a committed ingest: its blobs stay
    kept = _blobs(store)
    assert kept

    def boom(*_a, **_k):
        raise RuntimeError("killed before the commit")

    # the ingest streams its records into the table's files; it dies at the commit
    monkeypatch.setattr(_append, "commit_files", boom)
    with pytest.raises(RuntimeError, match="before the commit"):
        ingest(store, [_logs(tmp_path / "logs")])
    monkeypatch.undo()
    orphans = _blobs(store) - kept
    assert len(orphans) == 7  # six raw logs and the rejected file, written ahead of the commit

    res = runner.invoke(app, ["store", "gc", "--store", store.url, "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "would delete 7" in res.output and "1 run(s) that died" in res.output
    assert _blobs(store) - kept == orphans  # a dry run deletes nothing
    res = runner.invoke(app, ["store", "gc", "--store", store.url])
    assert res.exit_code == 0, res.output
    assert "deleted 7" in res.output
    assert _blobs(store) == kept
    assert os.listdir(os.path.join(store.root, "_inflight")) == []
    # the store still reads, and a second gc finds nothing more
    assert store.count("trajectories") == 1
    assert store.gc(dry_run=False).deleted == 0


def test_a_finished_ingest_leaves_no_journal(tmp_path) -> None:
    store = Store.open(str(tmp_path / "store"))
    res = ingest(store, [_logs(tmp_path / "logs")])
    assert res.new == 6 and res.n_rejected == 1
    assert os.listdir(os.path.join(store.root, "_inflight")) == []
    assert store.gc(dry_run=True).unreferenced == []


def test_gc_keeps_the_blobs_of_a_run_in_flight(tmp_path) -> None:
    store = Store.open(str(tmp_path / "store"))
    with store.blob_journal() as j:
        h = j.put(b"raw log of a run that has not committed yet")
        rep = store.gc(dry_run=False, min_age_s=0)  # even with no age protection at all
        assert h not in rep.unreferenced and rep.in_flight == 1
        assert store.has_blob(h)
    # left normally: the journal is gone, the blob is an ordinary young unreferenced blob
    assert store.gc(dry_run=True).unreferenced == []
    assert store.gc(dry_run=True, min_age_s=0).unreferenced == [h]


_KILLER = """
import os, signal, sys
from knowlyr.store import Store, _append
from knowlyr.store.ingest import ingest

def die(*a, **k):  # every raw blob is written by now
    os.kill(os.getpid(), signal.SIGKILL)

_append.commit_files = die  # the records are streamed into files; the commit never comes
ingest(Store.open(sys.argv[1]), [sys.argv[2]], workers=int(sys.argv[3]))
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_gc_defaults_reclaim_the_blobs_of_a_killed_ingest(tmp_path, workers) -> None:
    url = str(tmp_path / "store")
    logs = _logs(tmp_path / "logs", 8)
    if workers > 1:  # enough files for the recorder's pool (its workers write the blobs)
        for i in range(200):
            shutil.copy(logs / "log_0.json", logs / f"copy_{i}.json")
    proc = subprocess.run(
        [sys.executable, "-c", _KILLER, url, str(logs), str(workers)],
        capture_output=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    store = Store.open(url)
    assert len(_blobs(store)) >= 9  # 8 raw logs + the rejected one
    assert "trajectories" not in store.tables()
    res = runner.invoke(app, ["store", "gc", "--store", url])
    assert res.exit_code == 0, res.output
    assert _blobs(store) == set(), res.output

"""``Store.add_trajectories`` streaming an iterator into one commit (knowlyr.store._append):
the same rows as adding a list, dedup inside the stream and against the table, several
Parquet files in one version, file statistics that prune correctly, and the fallback for a
table another writer widened."""

from __future__ import annotations

import polars as pl
import pytest

from knowlyr.store import Store, _adds, _append
from knowlyr.trajectory import AgentInfo, Observation, Source, Step, TaskInfo, ToolCall, Trajectory


def _traj(i: int, agent: str = "a") -> Trajectory:
    return Trajectory(
        task=TaskInfo(task_id=f"t{i % 3}", instruction=f"fix bug {i} — ünïcode ✓"),
        agent=AgentInfo(name=agent, model="m"),
        steps=[
            Step(
                index=0,
                thought="look",
                action=ToolCall(tool="bash", params={"command": f"ls {i}"}),
                observation=Observation(output="x" * i, exit_code=0),
            )
        ],
        source=Source(format="knowlyr", path=f"logs/{i}.json"),
    )


def _rows(store: Store) -> pl.DataFrame:
    return store.read("trajectories").drop("created_at").sort("id")


@pytest.fixture
def small_files(monkeypatch):
    """A few rows per Arrow batch and per Parquet file, so a commit holds several files."""
    monkeypatch.setattr(_adds, "_STREAM_ROWS", 2)
    monkeypatch.setattr(_append, "_FILE_BYTES", 1)


def test_a_stream_writes_the_rows_a_list_writes(tmp_path, small_files) -> None:
    trajs = [_traj(i) for i in range(7)]
    a, b = Store.open(tmp_path / "a"), Store.open(tmp_path / "b")
    ma = a.add_trajectories(trajs)
    mb = b.add_trajectories(t for t in trajs)
    assert (ma.new, ma.version, mb.new, mb.version) == (7, 0, 7, 0)
    assert _rows(a).equals(_rows(b))
    assert ma.digest == mb.digest
    files = [f for f in (tmp_path / "b" / "tables" / "trajectories").iterdir() if f.is_file()]
    assert len(files) > 1  # one version, several files
    # the files' statistics prune correctly: every id is found by an equality filter
    for t in trajs:
        got = b.read("trajectories", filter=pl.col("id") == t.id, columns=["id"])
        assert got["id"].to_list() == [t.id]
    assert b.get_trajectory(trajs[3].id) == trajs[3]


def test_a_stream_dedups_against_the_table_and_itself(tmp_path, small_files) -> None:
    store = Store.open(tmp_path / "s")
    first = [_traj(i) for i in range(3)]
    store.add_trajectories(iter(first))
    again = [_traj(1, "b"), _traj(5), _traj(5, "c"), _traj(2), _traj(6)]
    m = store.add_trajectories(iter(again), run_id="r2")
    assert (m.new, m.duplicates, m.version, m.rows, m.committed) == (2, 3, 1, 5, True)
    assert store.count("trajectories") == 5
    assert sorted(store.trajectory_ids()) == sorted({t.id for t in first + again})
    seen = store.sightings().filter(pl.col("run_id") == "r2")
    assert sorted(zip(seen["trajectory_id"], seen["agent"], strict=True)) == sorted(
        (t.id, t.agent.name) for t in again
    )
    # nothing new: no commit, and the version stays
    m = store.add_trajectories(iter(first))
    assert (m.new, m.duplicates, m.committed, m.version) == (0, 3, False, 1)
    assert store.version("trajectories") == 1
    empty = Store.open(tmp_path / "empty").add_trajectories(iter([]))
    assert (empty.new, empty.committed, empty.version) == (0, False, -1)


def test_a_table_another_writer_widened_takes_the_stream_too(tmp_path) -> None:
    store = Store.open(tmp_path / "s")
    store.add_trajectories([_traj(0)])
    wide = store.read("trajectories").with_columns(pl.lit("x").alias("note"))
    wide = wide.with_columns(pl.col("id").str.replace("^.", "f"))  # another id
    store.append("trajectories", wide)
    m = store.add_trajectories(_traj(i) for i in range(4))
    assert (m.new, m.duplicates) == (3, 1)
    assert store.count("trajectories") == 5
    assert "note" in store.read("trajectories").columns


def test_a_failed_write_commits_nothing_and_the_next_add_works(tmp_path, monkeypatch) -> None:
    import pyarrow.parquet as pq

    store = Store.open(tmp_path / "s")
    store.add_trajectories([_traj(0)])

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", full)
    pulled = []

    def items():
        for i in range(1, 5):
            pulled.append(i)
            yield _traj(i)

    with pytest.raises(OSError, match="No space left"):
        store.add_trajectories(items())
    assert pulled  # the writer's error reached the caller while the stream was being read
    monkeypatch.undo()
    assert store.version("trajectories") == 0 and store.count("trajectories") == 1
    m = store.add_trajectories(_traj(i) for i in range(1, 5))  # the lock was released
    assert (m.new, m.version) == (4, 1)


def test_what_another_writer_commits_during_a_stream_is_left_out(tmp_path, small_files) -> None:
    """The stream's files are written without the table lock; rows another writer committed
    meanwhile are dropped from them at the commit, so no id is stored twice."""
    store = Store.open(tmp_path / "s")
    store.add_trajectories([_traj(0)])
    other = Store.open(tmp_path / "s")

    def items():
        for i in range(8):
            if i == 4:  # another writer adds 2 that this stream already wrote, and one it will
                other.add_trajectories([_traj(1), _traj(2, "b"), _traj(6)])
            yield _traj(i)

    m = store.add_trajectories(items(), run_id="mine")
    assert (m.new, m.duplicates, m.version) == (4, 4, 2)  # 3, 4, 5, 7 are this stream's
    assert store.count("trajectories") == 8
    ids = store.read("trajectories")["id"].to_list()
    assert len(ids) == len(set(ids)) == 8
    assert sorted(store.trajectory_ids()) == sorted(_traj(i).id for i in range(8))
    mine = store.sightings().filter(pl.col("run_id") == "mine")
    assert mine.height == 8  # every item it saw, new or not


def test_a_table_widened_during_a_stream_takes_its_rows_through_delta_rs(
    tmp_path, small_files
) -> None:
    store = Store.open(tmp_path / "s")
    store.add_trajectories([_traj(0)])
    other = Store.open(tmp_path / "s")

    def items():
        for i in range(6):
            if i == 3:
                wide = other.read("trajectories").with_columns(pl.lit("x").alias("note"))
                other.append("trajectories", wide.with_columns(pl.lit("f" * 64).alias("id")))
            yield _traj(i)

    m = store.add_trajectories(items())
    assert (m.new, m.duplicates, m.version) == (5, 1, 2)
    got = store.read("trajectories")
    assert got.height == 7 and "note" in got.columns
    assert sorted(got["id"]) == sorted(["f" * 64] + [_traj(i).id for i in range(6)])
    assert store.get_trajectory(_traj(4).id) == _traj(4)

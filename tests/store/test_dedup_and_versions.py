from __future__ import annotations

import polars as pl
import pytest

from knowlyr.errors import ConfigError, NotFoundError
from knowlyr.store import Manifest, Store
from tests.store.conftest import make_traj


def test_readding_same_content_adds_nothing(store: Store) -> None:
    trajs = [make_traj(i) for i in range(20)]
    first = store.add_trajectories(trajs)
    assert (first.new, first.duplicates, first.version, first.rows) == (20, 0, 0, 20)
    assert first.committed

    again = store.add_trajectories(trajs)
    assert (again.new, again.duplicates, again.version, again.rows) == (0, 20, 0, 20)
    assert not again.committed
    assert again.digest == first.digest
    assert store.version("trajectories") == 0
    assert store.read("trajectories").height == 20


def test_a_store_under_a_path_with_spaces_reads_its_keys_from_the_files(tmp_path) -> None:
    # the data files' URIs are percent-encoded ("my%20runs"): the key set is read from them
    store = Store.open(str(tmp_path / "my runs é#" / "store"))
    trajs = [make_traj(i) for i in range(6)]
    store.add_trajectories(trajs[:4])
    again = Store.open(store.url)  # a new handle: the keys come from the table's files
    v = again.version("trajectories")
    assert again._key_column("trajectories", "id", v) == ({t.rehash().id for t in trajs[:4]}, 4)
    m = again.add_trajectories(trajs)
    assert (m.new, m.duplicates, m.rows) == (2, 4, 6)


def test_overlapping_batch_and_repeats_within_a_batch(store: Store) -> None:
    store.add_trajectories([make_traj(i) for i in range(10)])
    batch = [make_traj(i) for i in range(5, 15)] + [make_traj(14)]
    m = store.add_trajectories(batch)
    assert (m.new, m.duplicates, m.version, m.rows) == (5, 6, 1, 15)
    ids = store.read("trajectories", columns=["id"])["id"]
    assert ids.n_unique() == ids.len() == 15


def test_same_steps_under_another_task_is_not_a_duplicate(store: Store) -> None:
    a = make_traj(1, task="a")
    b = make_traj(1, task="b")
    assert store.add_trajectories([a, b]).new == 2


def test_trajectory_round_trips_exactly(store: Store) -> None:
    t = make_traj(3, blob="ab" * 32)
    store.add_trajectories([t])
    back = store.get_trajectory(t.id)
    assert back == t
    assert store.get_trajectory(t.id[:12]) == t
    row = store.read("trajectories").row(0, named=True)
    assert (
        row["task_id"] == t.task.task_id and row["n_steps"] == 3 and row["source_blob"] == "ab" * 32
    )
    assert row["success"] is False and row["agent"] == "scripted"


def test_time_travel_reads_every_past_version(store: Store) -> None:
    manifests = [
        store.add_trajectories([make_traj(i) for i in range(k * 5, k * 5 + 5)]) for k in range(3)
    ]
    assert [m.version for m in manifests] == [0, 1, 2]
    for m in manifests:
        assert store.read("trajectories", version=m.version).height == m.rows == 5 * (m.version + 1)
        assert len(store.read_trajectories(version=m.version)) == m.rows
    assert set(store.added("trajectories", 1)["id"]) == {make_traj(i).id for i in range(5, 10)}
    with pytest.raises(NotFoundError, match="no version 7"):
        store.read("trajectories", version=7)
    first_only = make_traj(0).id
    assert store.get_trajectory(first_only, version=0).id == first_only
    with pytest.raises(NotFoundError):
        store.get_trajectory(make_traj(12).id, version=1)


def test_filters_on_query_columns(store: Store) -> None:
    store.add_trajectories([make_traj(i) for i in range(10)])
    wins = store.read_trajectories(filter=pl.col("success"))
    assert len(wins) == 5 and all(t.outcome.success for t in wins)
    some = [make_traj(i).id for i in (1, 2)]
    assert {t.id for t in store.iter_trajectories(ids=some)} == set(some)


def test_iter_data_reads_slices_in_table_order(store: Store, tmp_path) -> None:
    store.add_trajectories([make_traj(i) for i in range(13)])
    store.add_trajectories([make_traj(i) for i in range(13, 30)])  # a second file
    table = store.read("trajectories")
    data = table["data"].to_list()
    for k in (1, 4, 7, 30, 1000):  # slices across the files' boundary, one slice, a partial one
        slices = list(store.iter_data(slice_rows=k))
        assert [len(s) for s in slices] == [min(k, 30 - a) for a in range(0, 30, k)]
        assert [d for s in slices for d in s] == data
        assert [d for s in store.iter_data(rows=(5, 22), slice_rows=k) for d in s] == data[5:22]
    won = table.filter(pl.col("success"))["data"].to_list()
    assert [d for s in store.iter_data(filter=pl.col("success"), slice_rows=4) for d in s] == won
    some = [make_traj(i).id for i in (2, 3, 25)]  # matches in two of eight slices: two reads
    got = list(store.iter_data(filter=pl.col("id").is_in(some), slice_rows=4, rows=(1, 30)))
    assert len(got) == 2
    assert [d for s in got for d in s] == table.filter(pl.col("id").is_in(some))["data"].to_list()
    assert [t.id for t in store.iter_trajectories(ids=some, batch_size=3)] == [
        i for i in table["id"].to_list() if i in some
    ]
    assert list(store.iter_data(filter=pl.col("id").is_in([]))) == []
    with pytest.raises(ConfigError, match="slice_rows"):
        next(store.iter_data(slice_rows=0))
    for bad in ((-1, 5), (6, 5)):
        with pytest.raises(ConfigError, match=r"rows must be \(start, stop\)"):
            next(store.iter_data(rows=bad))
    with pytest.raises(ConfigError, match="slice_rows"):  # before the table is looked at
        next(Store.open(str(tmp_path / "empty")).iter_data(slice_rows=0))


def test_generic_append_dedups_on_declared_key_and_updates_on_request(store: Store) -> None:
    rows = [
        {"trajectory_id": "t1", "config_hash": "c1", "total": 0.5, "per_step": [0.1, 0.4]},
        {"trajectory_id": "t2", "config_hash": "c1", "total": 0.9, "per_step": [0.9]},
    ]
    m = store.append("rewards", rows)
    assert (m.new, m.duplicates, m.version) == (2, 0, 0)
    m2 = store.append(
        "rewards", [*rows, {"trajectory_id": "t1", "config_hash": "c2", "total": 0.1}]
    )
    assert (m2.new, m2.duplicates, m2.version) == (1, 2, 1)
    df = store.read("rewards")
    assert df.schema["per_step"] == pl.List(pl.Float64) and df.height == 3
    m3 = store.append(
        "rewards",
        [{"trajectory_id": "t1", "config_hash": "c1", "total": 1.0}],
        on_duplicate="update",
    )
    assert (m3.new, m3.duplicates, m3.version, m3.rows) == (0, 1, 2, 3)
    t1 = store.read(
        "rewards", filter=(pl.col("trajectory_id") == "t1") & (pl.col("config_hash") == "c1")
    )
    assert t1["total"].to_list() == [1.0]
    assert store.read("rewards", version=1).filter(pl.col("trajectory_id") == "t1")[
        "total"
    ].sort().to_list() == [0.1, 0.5]


def test_bad_input_names_the_problem(store: Store) -> None:
    with pytest.raises(ConfigError, match="key column"):
        store.append("rewards", [{"trajectory_id": "t1", "total": 1.0}])
    with pytest.raises(ConfigError, match="no declared key"):
        store.append("scratch", [{"a": 1}])
    assert store.append("scratch", [{"a": 1}, {"a": 1}], key="a").new == 1
    with pytest.raises(ConfigError, match="table name"):
        store.read("../etc")


def test_manifest_is_small_and_json_able(store: Store) -> None:
    m = store.add_trajectories([make_traj(i) for i in range(100)])
    blob = m.model_dump_json()
    assert len(blob) < 400
    assert Manifest.model_validate_json(blob) == m
    assert str(m.ref) == "trajectories@0"
    assert store.ref("trajectories") == m.ref
    again = store.add_trajectories([make_traj(i) for i in range(100)])
    assert again != m and again.ref == m.ref  # same version: downstream cache keys still hit
    with pytest.raises(NotFoundError, match="no table 'rewards'"):
        store.ref("rewards")


def test_open_defaults_to_env_then_cwd(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KNOWLYR_STORE", raising=False)
    assert Store.open().root == str(tmp_path / ".knowlyr" / "store")
    monkeypatch.setenv("KNOWLYR_STORE", str(tmp_path / "elsewhere"))
    assert Store.open().root == str(tmp_path / "elsewhere")
    s = Store.open(f"file://{tmp_path / 'viaurl'}")
    assert s.add_trajectories([make_traj(1)]).new == 1
    assert Store.open(tmp_path / "viaurl").read("trajectories").height == 1


def test_every_optional_field_survives_the_store(store: Store) -> None:
    from datetime import UTC, datetime

    from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory, Usage

    t = Trajectory(
        task=TaskInfo(
            task_id="full", instruction="do it", metadata={"repo": "x/y"}, difficulty="hard"
        ),
        steps=[
            Step(
                index=0,
                thought="think",
                action=ToolCall(
                    tool="edit_file", params={"path": "a.py", "n": [1, 2.5, None]}, call_id="c0"
                ),
                observation=Observation(output="ok ✓", exit_code=0, error=None),
                reward=0.5,
                usage=Usage(prompt_tokens=10, completion_tokens=3, cost_usd=0.001),
                token_ids=[1, 2, 3],
                logprobs=[-0.1, -0.2, -0.3],
                timestamp=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
                duration_s=1.25,
                metadata={"k": {"nested": True}},
            ),
            Step(index=1, message="done"),
        ],
        metadata={"run_id": "r1"},
    )
    store.add_trajectories([t])
    back = store.get_trajectory(t.id)
    assert back == t
    assert back.task.model_extra == {"difficulty": "hard"}
    assert back.steps[0].token_ids == [1, 2, 3] and back.steps[0].timestamp == t.steps[0].timestamp


def test_empty_batch_adds_nothing(store: Store) -> None:
    m = store.add_trajectories([])
    assert (m.new, m.duplicates, m.committed, m.version) == (0, 0, False, -1)
    assert store.version("trajectories") is None
    assert store.read("trajectories").height == 0
    store.add_trajectories([make_traj(1)])
    assert store.add_trajectories([]).version == 0
    assert store.append("rewards", []).version == -1
    assert store.append("rewards", [{"trajectory_id": "t", "config_hash": "c"}]).version == 0
    m = store.append("rewards", [])
    assert (m.version, m.rows, m.new, m.committed) == (0, 1, 0, False)

"""The store on ``s3://``: a local S3-compatible server process (moto's server mode) on loopback,
reached with the same code a real bucket uses (endpoint and credentials as AWS settings)."""

from __future__ import annotations

import multiprocessing as mp
import os
import weakref

import pytest

from knowlyr.errors import ConfigError
from knowlyr.store import Store
from tests.store._workers import add_range
from tests.store.conftest import make_traj
from tests.store.s3_server import S3Server, aws_env, s3_server

pytest.importorskip("s3fs", reason="s3:// stores need s3fs: pip install 'knowlyr-gym[s3]'")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("s3")) as server, aws_env(server.env):
        yield server


def test_tables_blobs_and_time_travel_in_a_bucket(s3: S3Server):
    store = Store.open(s3.url("basic"))
    first = store.add_trajectories([make_traj(i) for i in range(6)])
    again = store.add_trajectories([make_traj(i) for i in range(4, 9)])
    assert (first.new, again.new, again.duplicates) == (6, 3, 2)
    assert store.count("trajectories") == 9 and store.count("trajectories", version=0) == 6
    blob = store.put_blob(b"raw log bytes")
    assert Store.open(s3.url("basic")).get_blob(blob) == b"raw log bytes"
    assert set(store.tables()) >= {"trajectories", "sightings"}
    assert store.identity == Store.open(s3.url("basic")).identity  # one id, in the bucket
    assert store.gc(dry_run=True, min_age_s=0).unreferenced == [blob]


def test_an_iterator_is_spooled_not_held_and_merged_once(s3: S3Server, monkeypatch):
    from knowlyr.store import _adds

    monkeypatch.setattr(_adds, "_STREAM_ROWS", 7)  # several batches through the spool file
    store = Store.open(s3.url("spooled"))
    store.add_trajectories([make_traj(i) for i in range(5)])
    refs: list[weakref.ref] = []
    most = 0

    def items():
        nonlocal most
        for i in [*range(3, 40), 10, 11]:  # 2 known, 2 repeated
            t = make_traj(i)
            refs.append(weakref.ref(t))
            most = max(most, sum(r() is not None for r in refs))
            yield t

    m = store.add_trajectories(items())
    assert (m.new, m.duplicates, m.committed) == (35, 4, True)
    assert most <= 2  # the one being added and the next: nothing collected into a list
    assert store.count("trajectories") == 40 == len(store.trajectory_ids())
    assert {t.id for t in store.read_trajectories()} == {make_traj(i).id for i in range(40)}
    again = store.add_trajectories(make_traj(i) for i in range(38, 42))
    assert (again.new, again.duplicates) == (2, 2)
    assert store.sightings(make_traj(10).id).height >= 1
    fresh = Store.open(s3.url("spooled-first"))  # the table's first commit from a stream
    m = fresh.add_trajectories(make_traj(i) for i in [1, 2, 2, 3])
    assert (m.new, m.duplicates, m.version) == (3, 1, 0) and fresh.count("trajectories") == 3


def test_storage_options_in_deltalakes_names_serve_tables_and_blobs(s3: S3Server):
    opts = {k: v for k, v in s3.env.items() if k != "AWS_DEFAULT_REGION"}
    saved = {k: os.environ.pop(k) for k in s3.env}  # only the options say where the bucket is
    try:
        store = Store.open(s3.url("options"), storage_options=opts)
        assert store.add_trajectories([make_traj(1)]).new == 1
        assert store.get_blob(store.put_blob(b"x")) == b"x"
    finally:
        os.environ.update(saved)


def test_two_writers_committing_at_once_lose_and_duplicate_nothing(s3: S3Server, tmp_path):
    url = s3.url("race")
    Store.open(url).add_trajectories([make_traj(0)])  # the table exists: both writers MERGE
    go = str(tmp_path / "go")
    ctx = mp.get_context("spawn")
    writers = [
        ctx.Process(target=add_range, args=(url, 0, 30, 5, go)),
        ctx.Process(target=add_range, args=(url, 15, 45, 5, go)),
    ]
    for w in writers:
        w.start()
    open(go, "w").close()
    for w in writers:
        w.join(180)
    assert [w.exitcode for w in writers] == [0, 0]
    ids = Store.open(url).read("trajectories", columns=["id"])["id"].to_list()
    assert len(ids) == len(set(ids)) == 45  # every trajectory once
    assert set(ids) == {make_traj(i).id for i in range(45)}


def test_urls_the_tables_cannot_use_are_clear_errors():
    with pytest.raises(ConfigError, match=r"memory://.*s3://bucket/prefix"):
        Store.open("memory://scratch/store")

from __future__ import annotations

import hashlib
import os

import pytest

from knowlyr.errors import BlobCorruptedError, ConfigError, NotFoundError
from knowlyr.store import Store
from tests.store.conftest import make_traj


def test_blob_is_content_addressed_and_round_trips(store: Store) -> None:
    data = b"raw agent log \x00\xff" * 100
    h = store.put_blob(data)
    assert h == hashlib.sha256(data).hexdigest()
    assert store.has_blob(h)
    assert store.get_blob(h) == data
    path = os.path.join(store.root, "blobs", "sha256", h[:2], h[2:])
    assert os.path.isfile(path)
    assert store.put_blob(data) == h  # idempotent
    assert not [f for f in os.listdir(os.path.dirname(path)) if ".tmp-" in f]


def test_corrupted_blob_is_detected_on_read(store: Store) -> None:
    h = store.put_blob(b"checkpoint weights v1")
    path = os.path.join(store.root, "blobs", "sha256", h[:2], h[2:])
    with open(path, "r+b") as f:  # flip one byte in place, same length
        f.seek(3)
        f.write(b"X")
    with pytest.raises(BlobCorruptedError, match=h):
        store.get_blob(h)


def test_truncated_blob_is_detected(store: Store) -> None:
    h = store.put_blob(b"0123456789" * 50)
    path = os.path.join(store.root, "blobs", "sha256", h[:2], h[2:])
    os.truncate(path, 10)
    with pytest.raises(BlobCorruptedError):
        store.get_blob(h)


def test_missing_and_malformed_addresses(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.get_blob("0" * 64)
    with pytest.raises(ConfigError, match="64 lowercase hex"):
        store.get_blob("../../etc/passwd")
    with pytest.raises(BlobCorruptedError, match="not to the given address"):
        store.add_trajectories([make_traj(1)], raw={"1" * 64: b"bytes that hash elsewhere"})


def test_gc_deletes_only_unreferenced_blobs(store: Store) -> None:
    raw = b'{"log": 1}'
    t = make_traj(1, blob=hashlib.sha256(raw).hexdigest())
    store.add_trajectories([t], raw={t.source.blob: raw})
    ckpt = store.put_blob(b"checkpoint")
    store.record_run("train", outputs={"checkpoint": ckpt})
    orphan = store.put_blob(b"nobody points here")

    young = store.gc(dry_run=True)  # default min age protects blobs just written
    assert young.unreferenced == []

    dry = store.gc(dry_run=True, min_age_s=0)
    assert (
        dry.unreferenced == [orphan]
        and dry.deleted == 0
        and dry.bytes == len(b"nobody points here")
    )
    assert store.has_blob(orphan)

    done = store.gc(dry_run=False, min_age_s=0)
    assert done.deleted == 1
    assert not store.has_blob(orphan)
    assert store.get_blob(t.source.blob) == raw
    assert store.get_blob(ckpt) == b"checkpoint"


def test_interrupted_blob_write_is_invisible_and_collected(store: Store) -> None:
    h = store.put_blob(b"complete")
    d = os.path.join(store.root, "blobs", "sha256", h[:2])
    leftover = os.path.join(d, ".tmp-deadbeef")  # what a writer killed before its rename leaves
    with open(leftover, "wb") as f:
        f.write(b"compl")
    assert list(store.blobs.iter_hashes()) == [h]
    store.record_run("keep", outputs={"blob": h})
    assert store.gc(dry_run=False, min_age_s=0).deleted == 0
    assert not os.path.exists(leftover)
    assert store.get_blob(h) == b"complete"


def test_fsspec_blob_backend_round_trips_and_detects_corruption() -> None:
    """The object-store code path (fsspec) of the blob layer, on fsspec's in-memory filesystem."""
    import fsspec

    from knowlyr.store.blobs import BlobStore

    blobs = BlobStore("memory://knowlyr-test-blobs", local=False)
    h = blobs.put(b"remote log")
    assert blobs.has(h) and blobs.get(h) == b"remote log"
    assert list(blobs.iter_hashes()) == [h] and blobs.size(h) == 10
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"/knowlyr-test-blobs/sha256/{h[:2]}/{h[2:]}", b"tampered!!")
    with pytest.raises(BlobCorruptedError):
        blobs.get(h)
    blobs.remove(h)
    assert not blobs.has(h)
    with pytest.raises(NotFoundError):
        blobs.get(h)


def test_gc_keeps_blobs_that_steps_name_in_their_metadata(store: Store) -> None:
    """The browser env's screenshots are blobs named only inside a step's metadata."""
    png = store.put_blob(b"\x89PNG screenshot")
    orphan = store.put_blob(b"nobody points here")
    t = make_traj(2)
    t.steps[0].metadata["screenshot"] = png
    store.add_trajectories([t])
    done = store.gc(dry_run=False, min_age_s=0)
    assert done.unreferenced == [orphan]
    assert store.get_blob(png) == b"\x89PNG screenshot"

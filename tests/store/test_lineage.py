from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from knowlyr.errors import NotFoundError
from knowlyr.store import Store
from tests.store.conftest import make_traj


def _ingest(store: Store, lo: int, hi: int):
    trajs, raw = [], {}
    for i in range(lo, hi):
        data = f'{{"episode": {i}}}'.encode()
        h = hashlib.sha256(data).hexdigest()
        raw[h] = data
        trajs.append(make_traj(i, blob=h))
    m = store.add_trajectories(trajs, raw=raw)
    run = store.record_run("ingest", outputs={"trajectories": m}, params={"lo": lo, "hi": hi})
    return trajs, m, run


def _pipeline(store: Store):
    a, _m1, ingest1 = _ingest(store, 0, 10)
    b, m2, ingest2 = _ingest(store, 10, 20)
    chosen = [a[0], a[2], b[0], b[2]]  # successful ones, from both ingests
    rew = store.append(
        "rewards", [{"trajectory_id": t.id, "config_hash": "cfg1", "total": 1.0} for t in a + b]
    )
    reward_run = store.record_run(
        "reward", inputs={"trajectories": m2}, outputs={"rewards": rew}, params={"config": "cfg1"}
    )
    ds = store.append(
        "datasets",
        [
            {"dataset": "sft-1", "row_id": t.id, "trajectory_id": t.id, "kind": "sft", "data": "{}"}
            for t in chosen
        ],
    )
    export_run = store.record_run(
        "export", inputs={"trajectories": m2, "rewards": rew}, outputs={"datasets": ds}
    )
    ckpt = store.put_blob(b"fake safetensors bytes")
    train_run = store.record_run(
        "train",
        inputs={"datasets": ds},
        outputs={"checkpoint": ckpt},
        params={"lr": 1e-4},
        code_version="abc123",
        started=datetime(2026, 1, 1, tzinfo=UTC),
        ended=datetime(2026, 1, 1, 1, tzinfo=UTC),
    )
    return a, b, chosen, ds, ckpt, (ingest1, ingest2, reward_run, export_run, train_run)


def test_checkpoint_walks_back_to_dataset_trajectories_and_raw_logs(store: Store) -> None:
    _, _, chosen, ds, ckpt, (ingest1, ingest2, reward_run, export_run, train_run) = _pipeline(store)
    lin = store.lineage(ckpt)
    stages = [r.stage for r in lin.runs]
    assert stages[:2] == ["train", "export"]
    assert {r.run_id for r in lin.runs} == {
        train_run.run_id,
        export_run.run_id,
        reward_run.run_id,
        ingest1.run_id,
        ingest2.run_id,
    }
    assert lin.tables == {"datasets": ds.version, "trajectories": 1, "rewards": 0}
    assert lin.blobs == [ckpt]
    assert lin.trajectory_ids == sorted(t.id for t in chosen)
    assert lin.raw_blobs == sorted(t.source.blob for t in chosen)
    assert all(store.get_blob(h) for h in lin.raw_blobs)
    train = lin.runs[0]
    assert train.params == {"lr": 1e-4} and train.code_version == "abc123"
    assert train.ended_at == datetime(2026, 1, 1, 1, tzinfo=UTC)


def test_dataset_version_lineage_skips_ingests_that_contributed_nothing(store: Store) -> None:
    a, _, _, _, _, (ingest1, *_rest) = _pipeline(store)
    # a second export that only uses trajectories of the first ingest
    ds2 = store.append(
        "datasets",
        [
            {"dataset": "sft-2", "row_id": t.id, "trajectory_id": t.id, "kind": "sft", "data": "{}"}
            for t in a[:3]
        ],
    )
    store.record_run("export", inputs={"trajectories": 1}, outputs={"datasets": ds2})
    lin = store.lineage(f"datasets@{ds2.version}")
    assert lin.trajectory_ids == sorted(t.id for t in a[:3])
    ingests = [r.run_id for r in lin.runs if r.stage == "ingest"]
    assert ingests == [ingest1.run_id]


def test_trajectory_lineage_finds_its_ingest_run_and_raw_log(store: Store) -> None:
    a, b, *_rest, (ingest1, ingest2, *_) = _pipeline(store)
    lin = store.lineage(b[2].id)
    assert [r.run_id for r in lin.runs] == [ingest2.run_id]
    assert lin.raw_blobs == [b[2].source.blob]
    assert lin.tables == {"trajectories": 1}
    assert store.lineage(a[0].id[:16]).runs[0].run_id == ingest1.run_id


def test_lineage_of_unknown_ref_says_what_it_accepts(store: Store) -> None:
    _pipeline(store)
    with pytest.raises(NotFoundError, match="TABLE@VERSION"):
        store.lineage("nothing-like-this")
    with pytest.raises(NotFoundError, match="no version 9"):
        store.lineage("datasets@9")


def test_runs_can_be_updated_from_running_to_completed(store: Store) -> None:
    r = store.record_run("collect", status="running", params={"n": 4})
    store.record_run("collect", status="completed", run_id=r.run_id, outputs={"trajectories": 0})
    runs = store.runs(stage="collect")
    assert len(runs) == 1 and runs[0].status == "completed"
    assert runs[0].outputs == {"trajectories": 0}


def test_lineage_accepts_manifests_and_table_names(store: Store) -> None:
    *_, ds, _ckpt, (_i1, _i2, _reward, export_run, _train) = _pipeline(store)
    by_manifest = store.lineage(ds)
    assert by_manifest.ref == f"datasets@{ds.version}"
    assert by_manifest.runs[0].run_id == export_run.run_id
    assert store.lineage("datasets").trajectory_ids == by_manifest.trajectory_ids


def test_run_refs_must_be_versions_or_blob_hashes(store: Store) -> None:
    from knowlyr.errors import ConfigError

    with pytest.raises(ConfigError, match="'trajectories' must be a table version"):
        store.record_run("export", inputs={"trajectories": 1.5})

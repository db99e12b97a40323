from __future__ import annotations

import pytest

from knowlyr.store import Store
from knowlyr.store.ingest import ingest


def test_ingest_in_batches_commits_per_batch_and_records_a_run_per_commit(
    store: Store, fixtures_dir
) -> None:
    res = ingest(store, fixtures_dir / "openhands", batch_size=1)
    assert res.new >= 2 and res.read == res.new + res.duplicates + res.n_rejected
    assert store.version("trajectories") == res.new - 1  # one version per new trajectory
    runs = store.runs(stage="ingest")
    # a run row per committed batch (each names its version), then the ingest's own
    batches = sorted((r for r in runs if "batch" in r.params), key=lambda r: r.params["batch"])
    assert [r.outputs["trajectories"] for r in batches] == list(range(res.new))
    assert [r.params["batch"] for r in batches] == list(range(1, res.new + 1))
    (final,) = [r for r in runs if r.run_id == res.run_id]
    assert final.params["batches"] == res.new and len(runs) == res.new + 1
    assert all(r.params["paths"] == [str(fixtures_dir / "openhands")] for r in runs)
    lin = store.lineage(f"trajectories@{res.version}")
    assert len(lin.trajectory_ids) == res.new and len(lin.raw_blobs) >= 1


def test_ingest_keeps_rejected_records_with_reasons(store: Store, tmp_path) -> None:
    bad = tmp_path / "broken.jsonl"
    bad.write_bytes(b'{"not": "a log"}\nnot json at all\n')
    res = ingest(store, bad, format="openhands_output")
    assert res.new == 0 and res.n_rejected == 2 and res.rejected is not None
    rows = store.read("rejected")
    assert sorted(rows["line"].to_list()) == [1, 2]
    assert all(rows["reason"].str.len_chars() > 0)
    assert {store.get_blob(h) for h in rows["raw_blob"]} == {
        b'{"not": "a log"}',
        b"not json at all",
    }
    again = ingest(store, bad, format="openhands_output")
    assert again.rejected is not None and again.rejected.new == 0  # quarantined once


def test_ingest_validates_batch_size(store: Store, fixtures_dir) -> None:
    with pytest.raises(ValueError, match="batch_size must be positive"):
        ingest(store, fixtures_dir, batch_size=0)


def test_encoded_records_make_the_same_table_as_trajectories(tmp_path, fixtures_dir) -> None:
    import polars as pl

    from knowlyr.recorder import Converted, Encoded, iter_encoded, iter_records

    objects, rows = Store.open(str(tmp_path / "a")), Store.open(str(tmp_path / "b"))
    m1 = objects.add_trajectories(
        [r.trajectory for r in iter_records([fixtures_dir]) if isinstance(r, Converted)]
    )
    enc = [r for r in iter_encoded([fixtures_dir], workers=1) if isinstance(r, Encoded)]
    m2 = rows.add_trajectories(enc + enc[:2])  # repeated records are duplicates
    assert (m2.new, m2.duplicates) == (m1.new, m1.duplicates + 2) and m1.new >= 5
    a, b = (s.read("trajectories").drop("created_at").sort("id") for s in (objects, rows))
    assert a.equals(b)  # every column, the JSON included
    assert b.filter(pl.col("data").str.len_bytes() == 0).height == 0
    assert rows.get_trajectory(enc[0].id) == enc[0].trajectory()


def test_identical_bad_files_are_each_named_and_a_rerun_adds_no_rejected_rows(
    store: Store, tmp_path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.json", "b.json", "c.json"):
        (logs / name).write_bytes(b'{"not": "a log"}')  # same bytes, same reason, three files
    res = ingest(store, logs)
    assert res.n_rejected == 3
    rows = store.read("rejected")
    assert sorted(rows["path"].to_list()) == [str(logs / n) for n in ("a.json", "b.json", "c.json")]
    assert rows["raw_blob"].n_unique() == 1  # one blob for the three
    again = ingest(store, logs)
    assert again.n_rejected == 3 and store.count("rejected") == 3  # already kept: no new rows


def test_a_rejected_table_written_before_the_where_column_still_dedups(tmp_path) -> None:
    from datetime import UTC, datetime

    import polars as pl

    store = Store.open(str(tmp_path / "store"))
    store.append("runs", [{"run_id": "r0", "stage": "setup"}])
    # the rejected table as earlier versions wrote it: keyed on (raw_blob, reason), no `where`
    pl.DataFrame(
        {
            "raw_blob": ["a" * 64],
            "reason": ["bad"],
            "path": ["/x/a.json"],
            "line": pl.Series([None], dtype=pl.Int64),
            "format": pl.Series([None], dtype=pl.String),
            "created_at": [datetime.now(UTC)],
        }
    ).write_delta(str(tmp_path / "store" / "tables" / "rejected"))
    rows = [{"raw_blob": "a" * 64, "reason": "bad", "path": p, "line": None}
            for p in ("/x/a.json", "/x/b.json")]  # fmt: skip
    m = store.append("rejected", rows)
    assert (m.new, m.duplicates) == (1, 1)  # a.json was kept already; b.json is named now
    assert sorted(store.read("rejected")["path"].to_list()) == ["/x/a.json", "/x/b.json"]

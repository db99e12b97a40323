from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.store import Store

runner = CliRunner()


def _counts(out: str) -> tuple[int, int, int, int]:
    m = re.search(r"read (\d+): (\d+) new, (\d+) duplicate, (\d+) rejected", out)
    assert m, out
    return tuple(int(x) for x in m.groups())  # type: ignore[return-value]


@pytest.fixture
def ingested(tmp_path, fixtures_dir):
    url = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", str(fixtures_dir), "--store", url])
    assert res.exit_code == 0, res.output
    return url, res.output


def test_ingest_records_real_logs_and_reingest_adds_nothing(ingested, fixtures_dir) -> None:
    url, out = ingested
    read, new, dup, rej = _counts(out)
    assert new >= 3 and read == new + dup + rej
    assert "trajectories@0 (new version" in out
    store = Store.open(url)
    assert store.count("trajectories") == new
    for t in store.read_trajectories():  # raw logs are kept as verified blobs
        assert store.get_blob(t.source.blob)
    if rej:
        rows = store.read("rejected")
        assert rows.height == rej and rows["reason"].str.len_chars().min() > 0
        assert all(store.has_blob(h) for h in rows["raw_blob"])

    again = runner.invoke(app, ["ingest", str(fixtures_dir), "--store", url])
    assert again.exit_code == 0, again.output
    read2, new2, dup2, rej2 = _counts(again.output)
    assert (read2, new2, dup2, rej2) == (read, 0, new + dup, rej)
    assert "trajectories@0 (unchanged" in again.output
    assert Store.open(url).version("trajectories") == 0


def test_store_env_var_is_the_default(tmp_path, fixtures_dir, monkeypatch) -> None:
    url = str(tmp_path / "envstore")
    monkeypatch.setenv("KNOWLYR_STORE", url)
    res = runner.invoke(app, ["ingest", str(fixtures_dir / "openhands")])
    assert res.exit_code == 0, res.output
    assert Store.open(url).count("trajectories") >= 1
    ls = runner.invoke(app, ["store", "ls"])
    assert re.search(r"trajectories\s+v0\s+\d+ rows", ls.output), ls.output


def test_ls_log_show_lineage_gc(ingested) -> None:
    url, _ = ingested
    store = Store.open(url)
    tid = store.read("trajectories", columns=["id"])["id"][0]

    ls = runner.invoke(app, ["store", "ls", "--store", url])
    assert ls.exit_code == 0 and "trajectories" in ls.output and "runs" in ls.output

    log = runner.invoke(app, ["store", "log", "trajectories", "--store", url])
    assert log.exit_code == 0 and log.output.startswith("v0") and "new=" in log.output

    show = runner.invoke(app, ["store", "show", tid[:12], "--store", url])
    assert show.exit_code == 0 and tid in show.output and "steps" in show.output
    full = runner.invoke(app, ["store", "show", tid, "--store", url, "--json"])
    assert full.exit_code == 0
    assert store.get_trajectory(tid).model_dump_json(indent=2, exclude_none=True) in full.output

    lin = runner.invoke(app, ["store", "lineage", tid, "--store", url])
    assert lin.exit_code == 0 and "ingest" in lin.output and "raw logs: 1" in lin.output

    gc = runner.invoke(app, ["store", "gc", "--store", url, "--dry-run", "--min-age", "0"])
    assert gc.exit_code == 0 and "would delete 0" in gc.output


def test_errors_name_the_problem(ingested, tmp_path) -> None:
    url, _ = ingested
    res = runner.invoke(app, ["store", "show", "f" * 64, "--store", url])
    assert res.exit_code == 1 and "no trajectory" in res.output
    res = runner.invoke(app, ["store", "log", "nope", "--store", url])
    assert res.exit_code == 1 and "no table 'nope'" in res.output
    res = runner.invoke(app, ["ingest", str(tmp_path), "--store", url, "-f", "no-such-format"])
    assert res.exit_code == 1 and "no-such-format" in res.output


def test_ingest_batch_size_commits_per_batch(tmp_path, fixtures_dir) -> None:
    url = str(tmp_path / "batched")
    res = runner.invoke(app, ["ingest", str(fixtures_dir), "--store", url, "--batch-size", "2"])
    assert res.exit_code == 0, res.output
    read, new, dup, rej = _counts(res.output)
    assert new >= 3 and read == new + dup + rej
    store = Store.open(url)
    assert store.count("trajectories") == new
    assert store.version("trajectories") >= (new + 1) // 2 - 1  # a commit per 2 trajectories
    # every committed version has the run row that wrote it: lineage resolves each one
    written = {r.outputs["trajectories"] for r in store.runs(stage="ingest")
               if "trajectories" in r.outputs}  # fmt: skip
    versions = {v for v in range(store.version("trajectories") + 1) if store.count(
        "trajectories", version=v) > (store.count("trajectories", version=v - 1) if v else 0)}  # fmt: skip
    assert versions <= written and len(versions) >= 2
    for v in versions:
        assert store.lineage(f"trajectories@{v}").runs, v
    bad = runner.invoke(app, ["ingest", str(fixtures_dir), "--store", url, "--batch-size", "0"])
    assert bad.exit_code != 0 and "batch-size" in bad.output


def test_ingest_of_nothing_usable_exits_1_and_names_this_inputs_reasons(tmp_path) -> None:
    url = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", str(tmp_path / "nonexistent"), "--store", url])
    assert res.exit_code == 1 and "no such file" in res.output
    assert "nothing was recorded" in res.output
    bad = tmp_path / "logs" / "bad.json"
    bad.parent.mkdir()
    bad.write_text('{"not": "a log"}')
    res = runner.invoke(app, ["ingest", str(bad.parent), "--store", url])
    assert res.exit_code == 1 and "no adapter recognises" in res.output
    # the first input again: its rejection is already kept, and still its own reason is shown
    res = runner.invoke(app, ["ingest", str(tmp_path / "nonexistent"), "--store", url])
    assert res.exit_code == 1 and "no such file" in res.output
    assert "no adapter recognises" not in res.output

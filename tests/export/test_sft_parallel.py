"""save_sft_files: JSONL files exported by several processes give the folder one process writes,
byte for byte, and a bad line is reported as file:line whichever process read it."""

from __future__ import annotations

import orjson
import pytest

from knowlyr.errors import RecordError
from knowlyr.export import sft as sft_module
from knowlyr.export.sft_parallel import _lines, save_sft_files, split_ranges
from tests.export.test_sft_columns import generated_corpus

_FILES = (
    "README.md",
    "card.json",
    "data.parquet",
    "dataset/data-00000-of-00001.arrow",
    "dataset/dataset_info.json",
    "dataset/state.json",
)


@pytest.fixture(scope="module")
def jsonl_files(tmp_path_factory):
    """Two JSONL files of trajectories, with blank lines, CRLF and a last line without \\n."""
    trajs = generated_corpus(21, n=70)
    root = tmp_path_factory.mktemp("in")
    a, b = root / "a.jsonl", root / "b.jsonl"
    lines = [t.to_json() for t in trajs]
    a.write_bytes(b"\n".join(lines[:40]) + b"\n\n" + lines[40] + b"\r\n")
    b.write_bytes(b"\n\n".join(lines[41:]))
    return [a, b]


@pytest.mark.parametrize(
    "kw", [{}, {"only_success": False, "max_steps_per_row": 2}, {"system_prompt": None}], ids=str
)
def test_any_number_of_processes_writes_the_same_folder(tmp_path, monkeypatch, jsonl_files, kw):
    monkeypatch.setattr(sft_module, "_SPILL_BATCH_ROWS", 7)  # batches cut across the runs
    one = save_sft_files(jsonl_files, tmp_path / "one", workers=1, **kw)
    assert one.card.rows > 20
    for n in (2, 3):
        got = save_sft_files(jsonl_files, tmp_path / f"w{n}", workers=n, **kw)
        assert got.card.to_dict() == one.card.to_dict() and got.rejected == one.rejected
        for name in _FILES:
            assert (tmp_path / f"w{n}" / name).read_bytes() == (
                tmp_path / "one" / name
            ).read_bytes()
    assert not list(tmp_path.glob(".knowlyr-sft-*"))  # the spill files are gone


def test_runs_are_the_lines_in_order(tmp_path, jsonl_files):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    files = [jsonl_files[0], empty, jsonl_files[1]]
    want = [line for p in files for line in p.read_bytes().split(b"\n")]
    want = [line.strip() for line in want if line.strip()]
    for n in (1, 2, 3, 5, 200):
        runs = split_ranges(files, n)
        assert len(runs) == n
        got = [line.strip() for run in runs for r in run for _, line in _lines(*r)]
        assert [line for line in got if line] == want


def _with_bad_lines(tmp_path, jsonl_files, at: list[int]):
    lines = [line for p in jsonl_files for line in p.read_bytes().split(b"\n") if line.strip()]
    for i in at:
        bad = orjson.loads(lines[i])
        bad["steps"][0]["observation"] = {"exit_code": "boom"}
        lines[i] = orjson.dumps(bad)
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    return src


@pytest.mark.parametrize(("bad", "line"), [([60], 61), ([5, 60], 6)])
def test_the_first_bad_line_is_named_and_nothing_is_written(tmp_path, jsonl_files, bad, line):
    src = _with_bad_lines(tmp_path, jsonl_files, bad)
    ((_, cut, _),) = split_ranges([src], 2)[1]
    assert src.read_bytes()[:cut].count(b"\n") < 60  # line 61 is the second process's
    with pytest.raises(RecordError, match=rf"in\.jsonl:{line}: not a trajectory \(steps\.0\."):
        save_sft_files([src], tmp_path / "out", workers=2, only_success=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_store_read_by_two_processes_gives_the_same_folder(tmp_path, monkeypatch):
    """The store's runs are forked only from a process without polars (this one has it, so
    it reads alone): the command line, run as its own process, reads a two-file table with
    two processes."""
    import subprocess
    import sys

    from knowlyr.export import save_sft_store
    from knowlyr.export.rewards import store_rewards
    from knowlyr.reward.store_io import score_unscored
    from knowlyr.store import Store

    trajs = generated_corpus(22, n=60)
    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(trajs[:25])
    store.add_trajectories(trajs[25:])
    score_unscored(store)  # the command line exports the store's rewards
    source = store_rewards(store)
    one = save_sft_store(store.url, tmp_path / "w1", workers=2, only_success=False,
                         transform=source.apply, rewards=source.totals,
                         reward_source=source.info)  # fmt: skip
    assert one.card.params["input_trajectories"] == 60
    argv = [sys.executable, "-m", "knowlyr.cli", "export", "sft", "--store", store.url]
    argv += ["-o", str(tmp_path / "w2"), "--include-failed", "--workers", "2"]
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert f"{one.card.rows} rows from 60 trajectories" in r.stdout
    for name in _FILES:
        assert (tmp_path / "w2" / name).read_bytes() == (tmp_path / "w1" / name).read_bytes()
    # a run is read a slice of READ_ROWS rows at a time: slices across the two files, and
    # runs that start inside a slice, give the same documents in the same order
    from knowlyr.export import sft_parallel
    from knowlyr.store import store as store_module

    whole = list(sft_parallel.store_documents(store.url))
    monkeypatch.setattr(store_module, "READ_ROWS", 7)
    assert [d for i in range(3) for d in sft_parallel._store_run(store.url, i, 3)[0]] == whole
    assert [d["id"] for d in whole] == [r["id"] for r in store.read("trajectories").to_dicts()]
    sliced = save_sft_store(store.url, tmp_path / "w3", workers=2, only_success=False,
                            transform=source.apply, rewards=source.totals,
                            reward_source=source.info)  # fmt: skip
    assert sliced.card.rows == one.card.rows
    for name in _FILES:
        assert (tmp_path / "w3" / name).read_bytes() == (tmp_path / "w1" / name).read_bytes()

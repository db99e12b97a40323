"""write_jsonl (``knowlyr record convert``): the lines iter_encoded gives, byte for byte, in
one process and with workers that write their units' lines to files of their own."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from knowlyr.errors import UnknownFormatError
from knowlyr.recorder import Encoded, Rejected, Written, iter_encoded, write_jsonl
from knowlyr.recorder import jsonl as jsonl_mod
from knowlyr.recorder import pool as pool_mod

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def logs(tmp_path_factory, fixtures_dir: Path) -> Path:
    """Every fixture, a JSONL of rows big enough to be cut into slices, and a broken file."""
    root = tmp_path_factory.mktemp("logs")
    shutil.copytree(fixtures_dir, root / "fixtures")
    shutil.copytree(DATA, root / "data")
    rows = (fixtures_dir / "openhands" / "resolver_output.jsonl").read_bytes()
    big = rows * (1 + (pool_mod._CHUNK_BYTES * 2) // len(rows))  # > 2 slices
    (root / "rows.jsonl").write_bytes(big + b"{not json\n")
    (root / "broken.json").write_bytes(b'[{"action": "run", "args": {"command": "ls"}')
    return root


def _expected(logs: Path) -> tuple[bytes, list[tuple]]:
    lines, records = [], []
    for r in iter_encoded([logs], workers=1):
        if isinstance(r, Encoded):
            lines.append(r.json + b"\n")
            records.append((r.id, r.format, r.path, r.line, r.redactions))
        else:
            records.append((r.path, r.line, r.reason, r.raw))
    return b"".join(lines), records


def _written(logs: Path, out: Path, workers: int) -> list[tuple]:
    got = []
    for r in write_jsonl([logs], out, workers=workers):
        if isinstance(r, Written):
            got.append((r.id, r.format, r.path, r.line, r.redactions))
        else:
            assert isinstance(r, Rejected)
            got.append((r.path, r.line, r.reason, r.raw))
    return got


@pytest.mark.parametrize("workers", [1, 2])
def test_the_lines_are_iter_encoded_s(logs: Path, tmp_path: Path, workers, monkeypatch) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)  # the pool for workers=2, however small
    data, records = _expected(logs)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"an older file, truncated")
    assert _written(logs, out, workers) == records
    assert out.read_bytes() == data
    assert any(len(r) == 4 for r in records) and sum(len(r) == 5 for r in records) > 20
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # the units' files are gone


def test_units_are_copied_through_this_process_where_the_kernel_cannot(
    logs: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    monkeypatch.setattr(jsonl_mod, "_copy_range", None)
    out = tmp_path / "out.jsonl"
    _written(logs, out, 2)
    assert out.read_bytes() == _expected(logs)[0]


def test_a_caller_that_stops_early_leaves_no_unit_files(
    logs: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    it = write_jsonl([logs], tmp_path / "out.jsonl", workers=2)
    next(it)
    it.close()
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_bad_arguments_fail_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(UnknownFormatError, match="openhands"):
        next(write_jsonl([tmp_path], tmp_path / "out.jsonl", format="openhand"))
    with pytest.raises(ValueError, match="workers must be >= 0, got -1"):
        next(write_jsonl([tmp_path], tmp_path / "out.jsonl", workers=-1))
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_the_output_may_be_a_pipe(logs: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    _written(logs, fifo, 2)  # the kernel copies to regular files only: here through this process
    reader.join(timeout=60)
    assert got == [_expected(logs)[0]]

"""One bad input never aborts the recorder, ``knowlyr ingest`` or ``knowlyr record convert``:
unreadable gzip files, file names that are not UTF-8, odd suffixes, secrets in file names."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import Converted, Rejected, convert, iter_files, iter_records, shown_path
from knowlyr.store import Store

runner = CliRunner()
FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"
BASIC = FIX / "openhands" / "basic.json"
JSONL = FIX / "openhands" / "resolver_output.jsonl"


def _bytes_name(directory: Path, name: bytes, data: bytes) -> str:
    """Write a file whose name is raw bytes (not UTF-8); returns the path as Python sees it."""
    path = os.path.join(os.fsencode(directory), name)
    with open(path, "wb") as f:
        f.write(data)
    return os.fsdecode(path)


def test_truncated_and_fake_gzip_are_rejected_with_path_and_reason(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(BASIC, d / "good.json")
    (d / "trunc.json.gz").write_bytes(gzip.compress(BASIC.read_bytes())[:200])
    (d / "fake.json.gz").write_bytes(b"this is not gzip at all")
    (d / "fake.jsonl.gz").write_bytes(b"\x1f\x8b\x08garbage")
    rep = convert([d])
    assert rep.converted == 1 and rep.rejected == 3
    reasons = {Path(r.path).name: r.reason for r in rep.rejected_records}
    assert set(reasons) == {"trunc.json.gz", "fake.json.gz", "fake.jsonl.gz"}
    assert "EOFError" in reasons["trunc.json.gz"]
    assert "BadGzipFile" in reasons["fake.json.gz"]
    assert all("gzip" in r for r in reasons.values())


def test_a_jsonl_gz_cut_off_keeps_its_first_records_and_rejects_the_rest(tmp_path: Path) -> None:
    lines = JSONL.read_bytes().splitlines()
    data = gzip.compress(b"\n".join(lines * 40) + b"\n")
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(data[: len(data) * 2 // 3])
    out = list(iter_records([p]))
    assert isinstance(out[0], Converted)
    assert isinstance(out[-1], Rejected) and out[-1].path == str(p)
    assert "truncated" in out[-1].reason
    assert all(isinstance(r, Converted) for r in out[:-1])


def test_ingest_of_broken_gzip_exits_0_and_names_them(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(BASIC, d / "good.json")
    (d / "trunc.json.gz").write_bytes(gzip.compress(BASIC.read_bytes())[:300])
    (d / "fake.traj.gz").write_bytes(b"not gzip")
    url = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", str(d), "--store", url])
    assert res.exit_code == 0, res.output
    assert "read 3: 1 new, 0 duplicate, 2 rejected" in res.output
    rej = Store.open(url).read("rejected")
    assert sorted(Path(p).name for p in rej["path"]) == ["fake.traj.gz", "trunc.json.gz"]
    assert all(rej["reason"].str.contains("gzip"))


def test_non_utf8_file_names_are_kept_escaped(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    good = _bytes_name(d, b"run-\xff\xfe.json", BASIC.read_bytes())
    _bytes_name(d, b"bad-\xe9.json", b"{not json")
    assert shown_path(good).endswith("run-\\xff\\xfe.json")
    shown_path(good).encode("utf-8")  # valid UTF-8

    # the library
    rep = convert([d])
    assert rep.converted == 1 and rep.rejected == 1
    assert rep.trajectories[0].source.path == shown_path(good)
    assert rep.rejected_records[0].path.endswith("bad-\\xe9.json")

    # knowlyr record convert: no traceback, both paths in its outputs
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["record", "convert", str(d), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    (row,) = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert row["source"]["path"].endswith("run-\\xff\\xfe.json")
    quarantine = orjson.loads(out.with_name("out.rejected.jsonl").read_bytes())
    assert quarantine["path"].endswith("bad-\\xe9.json")

    # knowlyr ingest: the Delta append takes the escaped path
    url = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", str(d), "--store", url])
    assert res.exit_code == 0, res.output
    s = Store.open(url)
    assert s.read("trajectories")["source_path"].to_list() == [shown_path(good)]
    assert s.read("rejected")["path"].to_list()[0].endswith("bad-\\xe9.json")


def test_walks_match_suffixes_in_any_case_and_report_what_they_skip(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "sub").mkdir(parents=True)
    shutil.copy(BASIC, d / "UPPER.JSON")
    shutil.copy(FIX / "swe_agent" / "pydicom__pydicom-1458.traj", d / "sub" / "RUN.TRAJ")
    (d / "sub" / "gz.Json.GZ").write_bytes(gzip.compress(BASIC.read_bytes()))
    (d / "agent.log").write_text("plain text log\n")
    (d / "notes.txt").write_text("notes\n")
    (d / "noext").write_bytes(b"{}")
    skipped: list[Path] = []
    files = list(iter_files([d], on_skip=skipped.append))
    assert sorted(p.name for p in files) == ["RUN.TRAJ", "UPPER.JSON", "gz.Json.GZ"]
    assert sorted(p.name for p in skipped) == ["agent.log", "noext", "notes.txt"]

    rep = convert([d])
    assert rep.converted == 3 and rep.rejected == 0
    assert sorted(Path(p).name for p in rep.skipped) == ["agent.log", "noext", "notes.txt"]

    url = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", str(d), "--store", url])
    assert res.exit_code == 0, res.output
    assert "from 3 files" in res.output
    assert "skipped 3 files of no log format" in res.output and "agent.log" in res.output
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["record", "convert", str(d), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "skipped 3 file(s) of no log format" in res.output

    # nothing at all to read: the skipped files are named in the error
    (e := tmp_path / "only_logs").mkdir()
    (e / "x.log").write_text("x")
    res = runner.invoke(app, ["ingest", str(e), "--store", url])
    assert res.exit_code == 1
    assert "1 files of no log format skipped" in res.output


SECRET_NAMES = {
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_8fJ2kL9qR4tY7uI1oP3aS6dF0gH5jK2lZ4xC",
}


@pytest.mark.parametrize("kind", sorted(SECRET_NAMES))
def test_a_secret_in_a_file_name_reaches_no_file_of_the_store(tmp_path: Path, kind: str) -> None:
    secret = SECRET_NAMES[kind]
    d = tmp_path / "logs" / secret  # in a directory name too
    d.mkdir(parents=True)
    shutil.copy(BASIC, d / f"{secret}.json")
    (d / f"{secret}.jsonl").write_bytes(b"{broken\n")
    url = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", str(tmp_path / "logs"), "--store", url])
    assert res.exit_code == 0, res.output
    assert secret not in res.output
    s = Store.open(url)
    (path,) = s.read("trajectories")["source_path"].to_list()
    assert "[REDACTED:" in path and secret not in path
    leaks = []
    for root, _dirs, files in os.walk(url):  # tables, _delta_log statistics, blobs, runs
        for f in files:
            data = Path(root, f).read_bytes()
            if secret.encode() in data or secret.encode() in gzip_or_none(data):
                leaks.append(os.path.relpath(os.path.join(root, f), url))
    assert leaks == []
    for table in s.tables():  # parquet pages are compressed: read the cells back too
        assert secret not in str(s.read(table).rows()), table

    # a directory named on the command line is redacted in the run's params too
    res = runner.invoke(app, ["ingest", str(d), "--store", url])
    assert res.exit_code == 0, res.output
    assert all(secret not in str(r.params) for r in s.runs())


def gzip_or_none(data: bytes) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError):
        return b""


def test_redaction_off_keeps_the_file_name(tmp_path: Path) -> None:
    p = tmp_path / f"{SECRET_NAMES['aws']}.json"
    shutil.copy(BASIC, p)
    (r,) = iter_records([p], redact=False)
    assert r.trajectory.source.path == str(p)


def test_ingest_of_a_non_utf8_directory_with_nothing_usable_names_it(tmp_path: Path) -> None:
    d = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"dir-\xff"))
    os.mkdir(d)
    _bytes_name(Path(d), b"x.json", b"{broken")
    res = runner.invoke(app, ["ingest", d, "--store", str(tmp_path / "store")])
    assert res.exit_code == 1 and not isinstance(res.exception, UnicodeError), res.output
    assert "nothing was recorded from" in res.output and "dir-\\xff" in res.output


def test_a_walk_yields_files_in_the_order_sorted_paths_have(tmp_path: Path) -> None:
    # names around the separator: a plain string sort puts "a-b/x" before "a/b" ("-" < "/"),
    # sorted paths compare part by part ("a" < "a-b")
    names = ["a/b.json", "a-b/x.json", "a.json", "a/a/z.json", "A.json", "a b/c.json", "ab.json"]
    for n in names:
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / n).write_bytes(b"[]")
    files = list(iter_files([tmp_path]))
    assert files == sorted(tmp_path / n for n in names)
    assert files != sorted(files, key=str)  # the tree does tell the two orders apart

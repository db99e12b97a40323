"""Legitimate logs in odd shapes are ingested, and files that are no logs say what they are
(issue #38): a UTF-8 BOM, UTF-16, ``NaN``/``Infinity`` as Python's ``json.dump`` writes them,
symlink loops, FIFOs and sockets, and a file identical to another in the same ingest."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import threading
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import (
    Converted,
    Rejected,
    convert,
    detect_format,
    iter_records,
    write_jsonl,
)
from knowlyr.store import Store
from knowlyr.store.ingest import ingest

runner = CliRunner()
FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"
BASIC = FIX / "openhands" / "basic.json"
JSONL = FIX / "openhands" / "resolver_output.jsonl"
BOM = b"\xef\xbb\xbf"


def _store(tmp_path: Path) -> Store:
    return Store.open(str(tmp_path / "store"))


# -- encodings ----------------------------------------------------------------------------------


def _encodings(d: Path) -> dict[str, Path]:
    """The same two logs (a JSON file, a JSONL file) in every encoding a Python or Windows tool
    writes: a UTF-8 BOM, UTF-16 with its BOM (LE and BE)."""
    d.mkdir()
    text, lines = BASIC.read_text("utf-8"), JSONL.read_text("utf-8")
    out = {}
    for name, enc in (("bom", "utf-8-sig"), ("u16", "utf-16"), ("u16le", "utf-16-le"),
                      ("u16be", "utf-16-be")):  # fmt: skip
        prefix = {"u16le": "\ufeff", "u16be": "\ufeff"}.get(name, "")
        for stem, src, suffix in (("basic", text, ".json"), ("resolver", lines, ".jsonl")):
            p = d / f"{stem}_{name}{suffix}"
            p.write_bytes((prefix + src).encode(enc))
            out[p.name] = p
    return out


def test_bom_and_utf16_logs_convert_as_their_utf8_twins(tmp_path: Path) -> None:
    files = _encodings(tmp_path / "logs")
    assert (
        files["basic_u16be.json"].read_bytes()[:2],
        files["basic_u16le.json"].read_bytes()[:2],
    ) == (
        b"\xfe\xff",
        b"\xff\xfe",
    )
    want = {
        ".json": [r.trajectory.id for r in iter_records([BASIC])],
        ".jsonl": [r.trajectory.id for r in iter_records([JSONL])],
    }
    for name, p in files.items():
        out = list(iter_records([p]))
        assert all(isinstance(r, Converted) for r in out), (name, [str(r) for r in out])
        assert [r.trajectory.id for r in out] == want[p.suffix], name
        assert detect_format(p) == ("openhands" if p.suffix == ".json" else "openhands_output")
        # the raw blob is the log's text as UTF-8, so redaction and readers see plain text
        for r in out:
            assert not r.raw.startswith(BOM) and b"\x00" not in r.raw


def test_ingest_stores_bom_and_utf16_logs(tmp_path: Path) -> None:
    files = _encodings(tmp_path / "logs")
    store = _store(tmp_path)
    res = ingest(store, [tmp_path / "logs"])
    assert res.n_rejected == 0 and res.files == len(files)
    assert res.read == len(files) // 2 * 3  # one record per JSON file, two per JSONL file
    assert res.new == 3  # every encoding converts to the same trajectories
    paths = set(store.sightings()["source_path"])
    assert paths == {str(p) for p in files.values()}  # each file named in sightings


def test_a_big_jsonl_with_a_bom_read_by_workers_keeps_its_first_line(tmp_path: Path) -> None:
    line = JSONL.read_bytes().splitlines()[0]
    n = (1 << 20) // len(line) + 50  # over the pool's 1 MB slice: read in slices
    p = tmp_path / "big.jsonl"
    p.write_bytes(BOM + b"\n".join([line] * n) + b"\n")
    rep = convert([p], workers=2)
    assert rep.rejected == 0 and rep.converted == n


def test_a_utf16_log_with_a_secret_is_redacted(tmp_path: Path) -> None:
    doc = json.loads(BASIC.read_text())
    key = "AKIA" + "Q3EGRTYUIOPASDFG"
    doc[0]["args"]["content"] += f" use {key}"
    p = tmp_path / "secret.json"
    p.write_bytes(json.dumps(doc).encode("utf-16"))
    (r,) = iter_records([p])
    assert isinstance(r, Converted)
    assert key.encode() not in r.raw and key not in r.trajectory.to_json().decode()


# -- NaN and Infinity -------------------------------------------------------------------------------


def _with_nonfinite(d: Path) -> tuple[Path, Path]:
    """A JSON log and a JSONL log holding NaN, Infinity and -Infinity, as ``json.dump`` writes
    them (orjson and the JSON standard reject them)."""
    d.mkdir()
    doc = json.loads(BASIC.read_text())
    doc[0]["timeout"] = math.nan
    doc[1]["extras"] = {"reward": math.inf, "low": -math.inf}
    one = d / "nan.json"
    one.write_text(json.dumps(doc))
    lines = [json.loads(x) for x in JSONL.read_text().splitlines()]
    lines[0]["metrics"] = {"cost": math.nan}
    lines[1]["metrics"] = {"cost": math.inf, "tokens": math.nan}
    many = d / "nan.jsonl"
    many.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert b"NaN" in one.read_bytes() and b"-Infinity" in one.read_bytes()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(one.read_bytes())
    return one, many


def test_nan_and_infinity_are_stored_as_null_and_counted(tmp_path: Path) -> None:
    one, many = _with_nonfinite(tmp_path / "logs")
    rep = convert([tmp_path / "logs"])
    assert rep.rejected == 0, [str(r) for r in rep.rejected_records]
    assert rep.converted == 3
    assert rep.nulled == {str(one): 3, str(many): 3}
    assert rep.summary()["nulled"] == {str(one): 3, str(many): 3}
    for t in rep.trajectories:  # valid JSON again: the values are null
        assert b"NaN" not in t.to_json() and b"Infinity" not in t.to_json()

    store = _store(tmp_path)
    res = ingest(store, [tmp_path / "logs"])
    assert (res.new, res.n_rejected) == (3, 0)
    assert res.nulled == {str(one): 3, str(many): 3} and res.n_nulled == 6
    (run,) = store.runs(stage="ingest")
    assert run.params["nulled"] == 6
    for data in store.read("trajectories")["data"]:
        orjson.loads(data)  # strict JSON
    # the raw blob keeps the log as written
    (blob,) = store.sightings().filter(store.sightings()["source_path"] == str(one))["source_blob"]
    assert b"NaN" in store.get_blob(blob)


def test_ingest_cli_says_how_many_values_were_nulled(tmp_path: Path) -> None:
    one, _ = _with_nonfinite(tmp_path / "logs")
    res = runner.invoke(app, ["ingest", str(one), "--store", str(tmp_path / "store")])
    assert res.exit_code == 0, res.output
    assert "3 NaN/Infinity values stored as null" in res.output
    assert str(one) in res.output


def test_a_nan_in_a_string_or_a_broken_log_is_not_touched(tmp_path: Path) -> None:
    doc = json.loads(BASIC.read_text())
    doc[0]["args"]["content"] = "NaN Infinity"
    ok = tmp_path / "text.json"
    ok.write_text(json.dumps(doc))
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": NaN, broken')
    out = {Path(r.path if isinstance(r, Rejected) else r.trajectory.source.path).name: r
           for r in iter_records([ok, bad])}  # fmt: skip
    assert isinstance(out["text.json"], Converted) and out["text.json"].nulled == 0
    assert "NaN Infinity" in out["text.json"].trajectory.to_json().decode()
    assert isinstance(out["bad.json"], Rejected) and "not valid JSON" in out["bad.json"].reason


# -- special files ------------------------------------------------------------------------------


@pytest.fixture
def specials(tmp_path: Path):
    """A folder of special files named like logs: a symlink loop, a FIFO, a socket, a
    dangling link; and a good log."""
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(BASIC, d / "good.json")
    os.symlink("loop_b.json", d / "loop_a.json")
    os.symlink("loop_a.json", d / "loop_b.json")
    os.mkfifo(d / "pipe.jsonl")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock.json"))
    os.symlink("gone.json", d / "dangling.json")
    yield d
    sock.close()


def _reasons(rejected) -> dict[str, str]:
    return {Path(r.path).name: r.reason for r in rejected}


def test_special_files_are_rejected_with_their_true_reason(specials: Path) -> None:
    named = [specials / n for n in ("loop_a.json", "pipe.jsonl", "sock.json", "dangling.json",
                                    "missing.json", "good.json")]  # fmt: skip
    done = threading.Event()
    out: list = []

    def run() -> None:  # a FIFO nobody writes to must not block the conversion
        out.extend(iter_records(named))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), "the recorder blocked on a FIFO"
    reasons = _reasons(r for r in out if isinstance(r, Rejected))
    assert "symlink loop" in reasons["loop_a.json"]
    assert "FIFO" in reasons["pipe.jsonl"] and "not a regular file" in reasons["pipe.jsonl"]
    assert "socket" in reasons["sock.json"]
    assert "dangling" in reasons["dangling.json"] and "gone.json" in reasons["dangling.json"]
    assert reasons["missing.json"].startswith("no such file")
    assert sum(isinstance(r, Converted) for r in out) == 1
    for name in ("loop_a.json", "pipe.jsonl", "sock.json", "dangling.json"):
        assert "no such file" not in reasons[name], (name, reasons[name])


def test_ingest_of_a_folder_with_special_files_names_each_in_rejected(
    tmp_path: Path, specials: Path
) -> None:
    store = _store(tmp_path)
    done = threading.Event()
    res = []
    threading.Thread(target=lambda: (res.append(ingest(store, [specials])), done.set()),
                     daemon=True).start()  # fmt: skip
    assert done.wait(120), "ingest blocked on a FIFO"
    assert res[0].new == 1
    reasons = dict(zip(*(store.read("rejected")[c].to_list() for c in ("path", "reason")),
                       strict=True))  # fmt: skip
    reasons = {Path(p).name: r for p, r in reasons.items()}
    assert "symlink loop" in reasons["loop_a.json"] and "symlink loop" in reasons["loop_b.json"]
    assert "FIFO" in reasons["pipe.jsonl"]
    assert "socket" in reasons["sock.json"]
    assert not any(r.startswith("no such file") for r in reasons.values()), reasons


# -- sightings of identical files ------------------------------------------------------------------


def test_every_file_of_an_ingest_is_named_in_sightings(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "copy").mkdir(parents=True)
    shutil.copy(BASIC, d / "a.json")
    shutil.copy(BASIC, d / "copy" / "a.json")  # byte for byte the same log, another path
    shutil.copy(JSONL, d / "r.jsonl")
    shutil.copy(JSONL, d / "copy" / "r.jsonl")
    store = _store(tmp_path)
    for batch_size in (None, 1):
        res = ingest(store, [d], batch_size=batch_size)
        seen = store.sightings().filter(store.sightings()["run_id"] == res.run_id)
        assert set(seen["source_path"]) == {
            str(d / "a.json"),
            str(d / "copy" / "a.json"),
            str(d / "r.jsonl"),
            str(d / "copy" / "r.jsonl"),
        }
        assert seen.height == 6  # each record of each file once


def test_a_fifo_swapped_in_after_the_check_is_not_waited_on(tmp_path: Path) -> None:
    from knowlyr.recorder import files

    fifo = tmp_path / "late.json.gz"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def read() -> None:  # what the recorder does once a path was found to be a regular file
        for opener in (files._read, lambda p: list(files._read_lines(p))):
            try:
                opener(fifo)
            except files._ReadError as e:
                errors.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "opening a FIFO blocked"
    assert len(errors) == 2 and all("FIFO" in e.reason for e in errors)


def test_record_convert_writes_nan_as_null_and_says_so(tmp_path: Path) -> None:
    one, many = _with_nonfinite(tmp_path / "logs")
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["record", "convert", str(tmp_path / "logs"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "converted 3  rejected 0" in res.output
    assert "6 NaN/Infinity values written as null" in res.output
    assert f"{one} (3)" in res.output and f"{many} (3)" in res.output
    assert len([orjson.loads(x) for x in out.read_bytes().splitlines()]) == 3


def test_workers_count_the_nulled_values_too(tmp_path: Path) -> None:
    line = json.loads(JSONL.read_text().splitlines()[0])
    rows = []
    for i in range(max(2, (1 << 20) // len(json.dumps(line)) + 20)):  # over a 1 MB slice
        line["metrics"] = {"i": i, "cost": math.nan}
        line["instance_id"] = f"inst-{i}"
        rows.append(json.dumps(line))
    p = tmp_path / "big.jsonl"
    p.write_text("\n".join(rows) + "\n")
    store = _store(tmp_path)
    res = ingest(store, [p], workers=2)
    assert res.n_rejected == 0 and res.n_nulled == len(rows) == res.nulled[str(p)]
    written = list(write_jsonl([p], tmp_path / "out.jsonl", workers=2))
    assert sum(w.nulled for w in written) == len(rows)

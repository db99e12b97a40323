"""Walking, detection, streaming and quarantine: read == converted + rejected, always."""

from __future__ import annotations

import hashlib
import multiprocessing
import shutil
from pathlib import Path

import orjson
import pytest

from knowlyr.errors import RecordError, UnknownFormatError
from knowlyr.recorder import (
    Converted,
    Encoded,
    Rejected,
    convert,
    detect_format,
    iter_encoded,
    iter_records,
    list_formats,
    register_adapter,
    unregister_adapter,
)
from knowlyr.recorder import pipeline as pipeline_mod
from knowlyr.recorder import pool as pool_mod
from knowlyr.recorder.adapters.openhands import OpenHandsEventsAdapter

DATA = Path(__file__).parent / "data"


@pytest.fixture
def batch(tmp_path: Path, fixtures_dir: Path) -> Path:
    """A directory tree with good logs, bad logs and files that are not logs."""
    root = tmp_path / "logs"
    (root / "nested" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    shutil.copy(fixtures_dir / "openhands/basic.json", root / "a.json")
    shutil.copy(
        fixtures_dir / "swe_agent/pydicom__pydicom-1458.traj", root / "nested" / "deeper" / "p.traj"
    )
    rows = (fixtures_dir / "openhands/resolver_output.jsonl").read_bytes().splitlines()
    # a JSONL with a good row, a truncated row, a blank line, a non-object row and a good row
    (root / "nested" / "out.jsonl").write_bytes(
        rows[0] + b"\n" + rows[1][:500] + b"\n\n" + b"[1, 2]\n" + rows[1] + b"\n"
    )
    (root / "broken.json").write_bytes(b'[{"action": "run", "args": {"command": "ls"}')
    (root / "unknown.json").write_bytes(b'{"hello": "world"}')
    (root / "notes.txt").write_text("not a log")
    (root / ".hidden" / "x.json").write_bytes(b"[]")
    return root


def test_batch_goes_on_and_counts_add_up(batch: Path) -> None:
    results = list(iter_records([batch]))
    conv = [r for r in results if isinstance(r, Converted)]
    rej = [r for r in results if isinstance(r, Rejected)]
    assert len(results) == len(conv) + len(rej) == 8
    assert len(conv) == 4
    by_where = {(Path(r.path).name, r.line): r.reason for r in rej}
    assert set(by_where) == {
        ("broken.json", None),
        ("unknown.json", None),
        ("out.jsonl", 2),
        ("out.jsonl", 4),
    }
    assert "not valid JSON" in by_where[("broken.json", None)]
    assert "Known formats:" in by_where[("unknown.json", None)]
    assert "not valid JSON" in by_where[("out.jsonl", 2)]
    assert "expected a JSON object per row" in by_where[("out.jsonl", 4)]
    # the good rows around the bad ones keep their own line numbers
    lines = sorted(
        r.trajectory.source.line for r in conv if r.trajectory.source.format == "openhands_output"
    )
    assert lines == [1, 5]
    report = convert([batch])
    assert (report.read, report.converted, report.rejected) == (8, 4, 4)
    assert report.summary()["formats"] == {"openhands": 1, "swe_agent": 1, "openhands_output": 2}


def test_rejected_raw_is_the_bad_record(batch: Path) -> None:
    rej = {(Path(r.path).name, r.line): r for r in iter_records([batch]) if isinstance(r, Rejected)}
    assert rej[("out.jsonl", 4)].raw == b"[1, 2]"
    assert rej[("broken.json", None)].raw == (batch / "broken.json").read_bytes()
    assert str(rej[("out.jsonl", 4)]).startswith(f"{batch / 'nested' / 'out.jsonl'}:4: ")
    d = rej[("out.jsonl", 4)].to_dict()
    assert d["line"] == 4 and d["raw"] == "[1, 2]" and d["reason"]


def test_source_points_at_the_raw_blob(fixtures_dir: Path) -> None:
    path = fixtures_dir / "openhands/resolver_output.jsonl"
    for r in iter_records([path]):
        assert isinstance(r, Converted)
        assert r.trajectory.source.blob == hashlib.sha256(r.raw).hexdigest()
        assert r.trajectory.source.path == str(path)
        assert r.trajectory.source.format == "openhands_output"


def test_jsonl_is_streamed_not_loaded_whole(
    tmp_path: Path, fixtures_dir: Path, monkeypatch
) -> None:
    row = (fixtures_dir / "openhands/resolver_output.jsonl").read_bytes().splitlines()[0]
    p = tmp_path / "big.jsonl"
    p.write_bytes((row + b"\n") * 50)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"read {self} whole"))
    monkeypatch.setattr(pipeline_mod, "_read", lambda path: pytest.fail(f"read {path} whole"))
    it = iter_records([p])
    first = next(it)
    assert isinstance(first, Converted) and first.trajectory.source.line == 1
    assert sum(1 for _ in it) == 49


def test_missing_path_is_rejected_not_raised(tmp_path: Path) -> None:
    (r,) = iter_records([tmp_path / "nope.json"])
    assert isinstance(r, Rejected) and "no such file" in r.reason


def test_explicit_format(fixtures_dir: Path) -> None:
    (r,) = iter_records([fixtures_dir / "openhands/basic.json"], format="swe_agent")
    assert isinstance(r, Rejected) and r.reason.startswith("swe_agent: expected a JSON object")
    with pytest.raises(
        UnknownFormatError, match=r"Did you mean 'openhands'\?.*Known formats: .*swe_agent"
    ):
        list(iter_records([fixtures_dir], format="openhand"))


def test_detect_format_errors(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(b'{"foo": 1}')
    with pytest.raises(UnknownFormatError) as e:
        detect_format(p)
    assert str(p) in str(e.value) and "Known formats:" in str(e.value) and "atif" in str(e.value)
    with pytest.raises(RecordError, match="no such file"):
        detect_format(tmp_path / "missing.json")


def test_json_array_of_records_keeps_good_ones(tmp_path: Path) -> None:
    items = orjson.loads((DATA / "agentgym_webshop.json").read_bytes())
    items.insert(1, {"item_id": "webshop_bad", "conversations": [{"value": "no from"}]})
    p = tmp_path / "ag.json"
    p.write_bytes(orjson.dumps(items))
    results = list(iter_records([p]))
    assert [type(r).__name__ for r in results] == ["Converted", "Rejected", "Converted"]
    assert results[1].reason.startswith("record 1: agentgym: conversations[0] needs 'from'")
    assert results[2].trajectory.metadata["record_index"] == 2
    assert results[2].trajectory.source.blob == hashlib.sha256(results[2].raw).hexdigest()


def test_session_with_a_corrupt_line_keeps_the_rest(tmp_path: Path) -> None:
    lines = (DATA / "claude_code_session.jsonl").read_bytes().splitlines()
    lines.insert(3, b'{"type": "assistant", "message": {')
    p = tmp_path / "s.jsonl"
    p.write_bytes(b"\n".join(lines))
    results = list(iter_records([p]))
    assert [type(r).__name__ for r in results] == ["Rejected", "Converted"]
    assert results[0].line == 4 and "not valid JSON" in results[0].reason
    assert results[1].trajectory.tools_used() == ["Read", "Edit", "Bash"]


def test_workers_give_the_same_results_in_order(batch: Path, monkeypatch) -> None:
    # small chunks so the JSONL file is split across processes too
    monkeypatch.setattr(pool_mod, "_CHUNK_BYTES", 4096)
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    one = list(iter_records([batch], workers=1))
    two = list(iter_records([batch], workers=2))
    key = [
        (r.trajectory.id, r.trajectory.source.line)
        if isinstance(r, Converted)
        else (r.path, r.line, r.reason)
        for r in one
    ]
    assert key == [
        (r.trajectory.id, r.trajectory.source.line)
        if isinstance(r, Converted)
        else (r.path, r.line, r.reason)
        for r in two
    ]
    with pytest.raises(ValueError, match="workers must be >= 0"):
        list(iter_records([batch], workers=-1))


def test_encoded_records_of_a_json_array_of_rows_keep_their_index(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    """Rows saved as one JSON array: each is its own record, its position in metadata; the
    document path (no models) writes what the models do."""
    from knowlyr.store.tables import trajectory_row

    rows = (fixtures_dir / "openhands/resolver_output.jsonl").read_bytes().splitlines()
    path = tmp_path / "rows.json"
    path.write_bytes(b"[" + b",".join(rows[:2]) + b', {"history": 3}]')
    plain = list(iter_records([path]))
    enc = list(iter_encoded([path], workers=1))
    assert [type(r) for r in plain] == [Converted, Converted, Rejected]
    assert [type(r) for r in enc] == [Encoded, Encoded, Rejected]
    for p, e in zip(plain[:2], enc[:2], strict=True):
        assert e.row == trajectory_row(p.trajectory)
    assert [r.trajectory.metadata["record_index"] for r in plain[:2]] == [0, 1]
    assert enc[2].reason == plain[2].reason and enc[2].reason.startswith("record 2: ")


@pytest.mark.parametrize("workers", [1, 2])
def test_encoded_results_are_the_records_serialised(
    batch: Path, tmp_path: Path, monkeypatch, workers
) -> None:
    from knowlyr.store.blobs import BlobStore
    from knowlyr.store.tables import TRAJECTORY_ROW, trajectory_row

    monkeypatch.setattr(pool_mod, "_CHUNK_BYTES", 4096)
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    (batch / "leak.json").write_bytes(
        b'[{"action": "run", "args": {"command": "export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx"}}]'
    )
    started = []
    real_pool = pool_mod.iter_pool
    monkeypatch.setattr(
        pool_mod, "iter_pool", lambda *a, **k: started.append(1) or real_pool(*a, **k)
    )
    blobs = BlobStore(str(tmp_path / "blobs"), local=True)
    plain = list(iter_records([batch]))
    enc = list(iter_encoded([batch], workers=workers, put_raw=blobs.put))
    assert bool(started) == (workers > 1)
    assert len(enc) == len(plain) == 9
    for p, e in zip(plain, enc, strict=True):
        assert type(e) is (Encoded if isinstance(p, Converted) else Rejected)
        if isinstance(p, Rejected):
            assert (e.path, e.line, e.reason, e.raw) == (p.path, p.line, p.reason, p.raw)
            continue
        t = p.trajectory
        assert e.row == trajectory_row(t)
        assert e.json == t.to_json() == e.row[TRAJECTORY_ROW.index("data")]
        assert (e.id, e.format, e.path, e.line, e.blob) == (
            t.id,
            t.source.format,
            t.source.path,
            t.source.line,
            t.source.blob,
        )
        assert (e.id, e.format, e.path, e.blob) == tuple(
            e.row[TRAJECTORY_ROW.index(c)]
            for c in ("id", "source_format", "source_path", "source_blob")
        )
        assert e.redactions == p.redactions
        assert e.trajectory() == t
        assert blobs.get(e.blob) == p.raw  # stored where it was converted
    assert sum(1 for _ in blobs.iter_hashes()) == len(
        {e.blob for e in enc if isinstance(e, Encoded)}
    )
    leak = next(e for e in enc if isinstance(e, Encoded) and e.path.endswith("leak.json"))
    assert [r.kind for r in leak.redactions] == ["openai_key"]
    assert b"sk-abcdefghij" not in leak.json and b"sk-abcdefghij" not in blobs.get(leak.blob)


def test_small_inputs_skip_the_pool(batch: Path, monkeypatch) -> None:
    # five small files: starting processes would cost more than converting them here
    monkeypatch.setattr(pool_mod, "iter_pool", lambda *a: pytest.fail("started a pool"))
    assert len(list(iter_records([batch], workers=2))) == len(list(iter_records([batch]))) == 8


def test_progress_called_per_file(batch: Path) -> None:
    seen: list[Path] = []
    list(iter_records([batch], progress=seen.append))
    assert sorted(p.name for p in seen) == [
        "a.json",
        "broken.json",
        "out.jsonl",
        "p.traj",
        "unknown.json",
    ]


def test_register_a_custom_adapter(tmp_path: Path) -> None:
    class Shouty(OpenHandsEventsAdapter):
        name = "shouty_openhands"
        priority = 1

        def sniff(self, obj):
            return isinstance(obj, list) and obj and obj[0].get("source") == "SHOUT"

    register_adapter(Shouty)
    try:
        assert "shouty_openhands" in list_formats()
        p = tmp_path / "s.json"
        p.write_bytes(b'[{"source": "SHOUT", "action": "run", "args": {"command": "ls"}}]')
        assert detect_format(p) == "shouty_openhands"

        class Clash(OpenHandsEventsAdapter):
            name = "openhands"

        with pytest.raises(ValueError, match="already registered"):
            register_adapter(Clash)
    finally:
        unregister_adapter("shouty_openhands")
    assert "shouty_openhands" not in list_formats()


def test_progress_with_workers_once_per_file(batch: Path, monkeypatch) -> None:
    monkeypatch.setattr(pool_mod, "_CHUNK_BYTES", 4096)
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    seen: list[Path] = []
    list(iter_records([batch], workers=2, progress=seen.append))
    assert sorted(p.name for p in seen) == [
        "a.json",
        "broken.json",
        "out.jsonl",
        "p.traj",
        "unknown.json",
    ]


def test_gzipped_logs(tmp_path: Path, fixtures_dir: Path) -> None:
    import gzip

    (tmp_path / "d").mkdir()
    src = fixtures_dir / "openhands/resolver_output.jsonl"
    (tmp_path / "d" / "out.jsonl.gz").write_bytes(gzip.compress(src.read_bytes()))
    traj = fixtures_dir / "swe_agent/pydicom__pydicom-1458.traj"
    (tmp_path / "d" / "p.traj.gz").write_bytes(gzip.compress(traj.read_bytes()))
    results = list(iter_records([tmp_path / "d"]))
    assert [r.trajectory.source.format for r in results] == [
        "openhands_output",
        "openhands_output",
        "swe_agent",
    ]
    assert [r.trajectory.source.line for r in results] == [1, 2, None]
    assert (
        results[0].raw == src.read_bytes().splitlines()[0]
    )  # the record's own (uncompressed) bytes
    assert detect_format(tmp_path / "d" / "p.traj.gz") == "swe_agent"


def test_rows_saved_as_one_json_array(tmp_path: Path, fixtures_dir: Path) -> None:
    rows = [
        orjson.loads(x)
        for x in (fixtures_dir / "openhands/resolver_output.jsonl").read_bytes().splitlines()
    ]
    p = tmp_path / "output.json"
    p.write_bytes(orjson.dumps(rows))
    results = list(iter_records([p]))
    assert [r.trajectory.task.task_id for r in results] == [
        "neubig/pr-viewer#5",
        "neubig/pr-viewer#1",
    ]
    assert [r.trajectory.metadata["record_index"] for r in results] == [0, 1]


def _many_logs(root: Path, n: int = 24) -> Path:
    root.mkdir()
    log = (Path(__file__).resolve().parents[1] / "data/fixtures/openhands/basic.json").read_bytes()
    for i in range(n):
        (root / f"log_{i:03d}.json").write_bytes(log.replace(b"2048", str(i).encode()))
    return root


def test_pool_reports_a_worker_failure(tmp_path: Path, monkeypatch) -> None:
    class Crashing(OpenHandsEventsAdapter):
        name = "crashing_openhands"

        def convert(self, obj, *, path=None, line=None):
            raise RuntimeError(f"adapter bug on {Path(path).name}")

    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    register_adapter(Crashing)
    try:
        root = _many_logs(tmp_path / "logs")
        with pytest.raises(RuntimeError, match="adapter bug on log_"):
            list(iter_records([root], format="crashing_openhands", workers=3))
    finally:
        unregister_adapter("crashing_openhands")
    assert multiprocessing.active_children() == []  # the workers were stopped


def test_pool_stops_its_workers_when_the_caller_stops_early(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    root = _many_logs(tmp_path / "logs", 60)
    it = iter_records([root], workers=3)
    first = [next(it) for _ in range(5)]
    assert all(isinstance(r, Converted) for r in first)
    assert multiprocessing.active_children()
    it.close()
    assert multiprocessing.active_children() == []
    # and a full run gives every log once, in order
    names = [Path(r.trajectory.source.path).name for r in iter_records([root], workers=3)]
    assert names == sorted(p.name for p in root.iterdir())


def test_pool_workers_collect_garbage_even_when_forked_with_gc_paused(
    tmp_path: Path, monkeypatch
) -> None:
    import gc

    from knowlyr._gc import paused

    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)
    for i in range(4):
        (tmp_path / f"{i}.json").write_bytes(b'[{"action": "run", "args": {"command": "ls"}}]')
    with (
        pool_mod.ProcessPoolExecutor(
            1, initializer=pool_mod._worker_init, mp_context=pool_mod._context()
        ) as ex,
        paused(),
    ):
        assert ex.submit(gc.isenabled).result() is True
    with paused():  # and the results are the same as without a pool
        got = list(iter_encoded([tmp_path], workers=2))
    assert [type(r) for r in got] == [Encoded] * 4


def test_a_record_with_no_steps_is_rejected_and_counted(tmp_path: Path) -> None:
    from knowlyr.recorder import Encoded, iter_encoded

    p = tmp_path / "runs.jsonl"
    p.write_text(
        '{"messages": [{"role": "user", "content": "fix it"}], "instance_id": "a"}\n'
        '{"messages": [{"role": "user", "content": "fix it"}, {"role": "assistant", '
        '"content": "", "tool_calls": [{"id": "c1", "type": "function", "function": '
        '{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}}]}], "instance_id": "b"}\n'
    )
    for results in (list(iter_records([p])), list(iter_encoded([p]))):
        kept = [r for r in results if isinstance(r, Converted | Encoded)]
        bad = [r for r in results if isinstance(r, Rejected)]
        assert len(kept) == 1 and len(bad) == 1
        assert bad[0].line == 1 and "no steps" in bad[0].reason

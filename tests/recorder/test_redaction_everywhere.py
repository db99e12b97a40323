"""Planted secrets stay out of everything the recorder and the store write: trajectories, raw
blobs, table files (parquet statistics included), the Delta log, rejected reasons, CLI output
and side files; placeholders are keyed, never bare hashes."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import Converted, RedactionPolicy, Rejected, iter_records, redact_text
from knowlyr.recorder import files as files_mod
from knowlyr.recorder import redaction_key as redact_mod
from knowlyr.recorder.redact import PLACEHOLDER_RE
from knowlyr.store import Store
from knowlyr.store.ingest import ingest
from tests.recorder.redaction_corpus import load_corpus

LOG = Path(__file__).parent / "data" / "mini_swe_agent" / "django__django-11163.traj.json"
SECRETS, FILES, _KEEP = load_corpus()
AWS = "AKIAIOSFODNN7EXAMPLE"


def _planted(carrier: str) -> bytes:
    """A real mini-swe-agent run with ``carrier`` in its task, a thought, a command, an output
    and the submitted patch."""
    doc = orjson.loads(LOG.read_bytes())
    m = doc["messages"]
    m[1]["content"] = m[1]["content"].replace(
        "<pr_description>\n", f"<pr_description>\n{carrier}\n"
    )
    m[2]["content"] = m[2]["content"].replace("THOUGHT: ", f"THOUGHT: {carrier}\n", 1)
    m[4]["content"] = m[4]["content"].replace("```bash\n", f"```bash\necho '{carrier}'\n", 1)
    m[3]["content"] = m[3]["content"].replace("<output>\n", f"<output>\n{carrier}\n", 1)
    patch = "\n".join("+# " + line for line in carrier.split("\n"))
    doc["info"]["submission"] += f"--- a/settings.py\n+++ b/settings.py\n@@ -1 +1,2 @@\n{patch}\n"
    return orjson.dumps(doc)


def _must_not_appear() -> list[bytes]:
    out = {s.encode() for c in SECRETS for s in c.secrets if len(s) >= 8}
    return sorted(out | {s.encode() for f in FILES for s in f.secrets})


def _leaks(blob: bytes, secrets: list[bytes]) -> list[str]:
    return [s.decode()[:24] for s in secrets if s in blob]


def _tree(root: Path) -> bytes:
    """Every file under ``root``, concatenated (tables, Delta log, blobs, sightings...)."""
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_planted_secrets_reach_no_table_blob_or_output(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for i, case in enumerate(SECRETS):
        (logs / f"run{i:02d}.traj.json").write_bytes(_planted(case.text))
    (logs / f"{AWS}.traj.json").write_bytes(LOG.read_bytes())  # a key in a file name
    secrets = _must_not_appear()

    records = list(iter_records([logs]))
    assert all(isinstance(r, Converted) for r in records)
    for r in records:
        assert (
            _leaks(r.trajectory.to_json() + r.raw + str(r.trajectory.source).encode(), secrets)
            == []
        )
    planted = [r for r in records if r.redactions]
    assert len(planted) == len(SECRETS)
    where = {x.field for r in planted for x in r.redactions}
    assert {"task.instruction", "thought", "action.params.command", "observation.output"} <= where
    assert all("[REDACTED:" in (r.trajectory.outcome.submission or "") for r in planted)
    named = [r for r in records if not r.redactions]
    assert len(named) == 1 and "[REDACTED:aws_access_key#" in named[0].trajectory.source.path

    store = Store.open(str(tmp_path / "store"))
    res = ingest(store, [logs])
    assert (res.new, res.n_rejected) == (len(SECRETS) + 1, 0)
    assert _leaks(_tree(tmp_path / "store"), secrets) == []
    rows = store.read("trajectories").rows()
    assert _leaks(orjson.dumps(rows, default=str), secrets) == []

    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(app, ["record", "convert", str(logs), "-o", str(out)])
    assert res.exit_code == 0, res.output
    side = b"".join(p.read_bytes() for p in tmp_path.glob("out*.jsonl"))
    assert _leaks(res.output.encode() + side, secrets) == []


@pytest.fixture
def unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A log directory whose one file, named after an AWS key, cannot be opened (as a file
    mode 000 does for anyone but root): the OS error names the file."""
    logs = tmp_path / "logs"
    logs.mkdir()
    bad = logs / f"{AWS}.traj.json"
    bad.write_bytes(LOG.read_bytes())
    (logs / "ok.traj.json").write_bytes(LOG.read_bytes())
    real_open = files_mod._open

    def deny(path):
        if AWS in os.fspath(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_open(path)

    monkeypatch.setattr(files_mod, "_open", deny)
    return logs


def test_an_unreadable_files_name_stays_out_of_its_rejection(unreadable: Path) -> None:
    bad = [r for r in iter_records([unreadable]) if isinstance(r, Rejected)]
    assert len(bad) == 1
    assert "Permission denied" in bad[0].reason and "[REDACTED:aws_access_key#" in bad[0].reason
    assert AWS not in bad[0].reason + bad[0].path
    # with redaction off the reason is the OS's own words
    (off,) = [r for r in iter_records([unreadable], redact=False) if isinstance(r, Rejected)]
    assert AWS in off.reason


def test_an_unreadable_files_name_stays_out_of_the_cli_and_the_store(
    unreadable: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["record", "convert", str(unreadable), "-o", str(out)])
    assert res.exit_code == 0, res.output
    rejected = (tmp_path / "out.rejected.jsonl").read_bytes()
    assert b"Permission denied" in rejected
    assert AWS not in res.output and AWS.encode() not in rejected

    url = tmp_path / "store"
    res = runner.invoke(app, ["ingest", str(unreadable), "--store", str(url), "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert AWS not in res.output
    reasons = Store.open(str(url)).read("rejected")["reason"].to_list()
    assert len(reasons) == 1 and "Permission denied" in reasons[0]
    assert AWS.encode() not in _tree(url)  # rejected table, its statistics, the Delta log


def test_placeholders_are_keyed_hmacs_not_bare_hashes() -> None:
    pw = "Summer2024!"
    text = f"DB_PASSWORD={pw}"
    a1, a2, b = (redact_text(text, key=k)[1][0].fingerprint for k in (b"a", b"a", b"b"))
    assert a1 == a2 != b  # stable under one key, unrelated under another
    assert a1 != hashlib.sha256(pw.encode()).hexdigest()[:12]  # no wordlist can test it
    assert "s3cret" not in repr(RedactionPolicy(key=b"s3cret-key"))
    with pytest.raises(TypeError, match="key must be bytes"):
        RedactionPolicy(key="text")  # type: ignore[arg-type]


def test_the_installation_key_is_a_private_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(redact_mod.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setattr(redact_mod, "_installation_key", None)
    key = redact_mod.installation_key()
    path = tmp_path / "cfg" / "knowlyr" / "redaction.key"
    assert bytes.fromhex(path.read_text()) == key and len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    monkeypatch.setattr(redact_mod, "_installation_key", None)  # a new process reads it back
    assert redact_mod.installation_key() == key
    assert redact_text("password=hunter22")[1][0].fingerprint == redact_mod.fingerprint(
        "hunter22", key
    )
    monkeypatch.setenv(redact_mod.KEY_ENV, "from-the-environment")
    assert redact_mod.installation_key() == b"from-the-environment"


def test_a_store_keys_its_placeholders_and_still_deduplicates(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "run.traj.json").write_bytes(
        _planted("export OPENAI_API_KEY=sk-proj-Zq7RkP2vXw9LmN4bT6yHc1JdF8")
    )
    a, b = Store.open(str(tmp_path / "a")), Store.open(str(tmp_path / "b"))
    first = ingest(a, [logs])
    assert (first.new, ingest(a, [logs]).duplicates) == (1, 1)  # same key, same trajectory
    ingest(b, [logs])

    def placeholders(s: Store) -> set[str]:
        text = orjson.dumps(s.read("trajectories").rows(), default=str).decode()
        return set(PLACEHOLDER_RE.findall(text))

    assert placeholders(a) and placeholders(a).isdisjoint(placeholders(b))
    key_file = tmp_path / "a" / "redaction.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert bytes.fromhex(key_file.read_text()) == a.redaction_key != b.redaction_key
    assert key_file.read_text() not in orjson.dumps(a.runs()[-1].params).decode()

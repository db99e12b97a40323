"""Redaction measured on the corpus in tests/data/redaction/corpus.json (shared with the
hardening issue): every planted secret, in every encoding and form, is gone (recall 100%);
every look-alike (code, test data, placeholders) comes out byte for byte unchanged.
``pytest -s`` prints the report."""

from __future__ import annotations

import orjson
import pytest

from knowlyr.recorder import PII_CLASSES, RedactionPolicy, redact_bytes, shown_path
from tests.recorder.redaction_corpus import (
    ENCODINGS,
    PII,
    PII_LOOKALIKES,
    load_corpus,
)

SECRETS, FILES, KEEP = load_corpus()


def _leaks(out: bytes, value: str) -> bool:
    """``value`` readable in ``out``: in its bytes or in one of its JSON strings."""
    if value.encode() in out:
        return True
    return any(value in s for s in _all_strings(orjson.loads(out)))


def _all_strings(x: object) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for k, v in x.items() for s in _all_strings(k) + _all_strings(v)]
    if isinstance(x, list):
        return [s for v in x for s in _all_strings(v)]
    return []


@pytest.mark.parametrize("case", SECRETS, ids=[c.name for c in SECRETS])
def test_a_planted_secret_is_gone_in_every_encoding(case) -> None:
    misses = []
    for enc in case.encodings:
        out, hits = redact_bytes(case.encode(enc))
        orjson.loads(out)  # still valid JSON
        if not hits or (leaked := case.leaked(out, enc)):
            misses.append(f"{enc}: {'nothing redacted' if not hits else leaked}")
    assert misses == []


@pytest.mark.parametrize("case", SECRETS, ids=[c.name for c in SECRETS])
def test_a_planted_secret_gets_its_kind(case) -> None:
    _out, hits = redact_bytes(case.encode("plain"))
    assert case.kind in {h.kind for h in hits}


@pytest.mark.parametrize("case", FILES, ids=[c.name for c in FILES])
def test_a_secret_in_a_file_name_is_not_in_the_path_kept(case) -> None:
    shown = shown_path(case.path)
    assert "[REDACTED:" in shown
    assert not [s for s in case.secrets if s in shown]


@pytest.mark.parametrize("case", KEEP, ids=[c.name for c in KEEP])
def test_code_and_test_data_come_out_unchanged(case) -> None:
    for enc in case.encodings:
        data = case.encode(enc)
        assert redact_bytes(data) == (data, []), f"{enc} ({case.why})"


def test_recall_is_total_and_no_lookalike_is_touched() -> None:
    """The corpus's figures in one line (the README quotes them)."""
    caught = total = kept = seen = 0
    for case in SECRETS:
        for enc in case.encodings:
            out, hits = redact_bytes(case.encode(enc))
            total += 1
            caught += bool(hits) and not case.leaked(out, enc)
    for f in FILES:
        total += 1
        caught += not any(s in shown_path(f.path) for s in f.secrets)
    for case in KEEP:
        for enc in case.encodings:
            data = case.encode(enc)
            seen += 1
            kept += redact_bytes(data)[0] == data
    print(
        f"\nredaction corpus: {len(SECRETS)} secrets in {total - len(FILES)} encodings and "
        f"{len(FILES)} file names: {caught}/{total} caught; {len(KEEP)} look-alikes in "
        f"{seen} encodings: {kept}/{seen} kept"
    )
    assert (caught, kept) == (total, seen)
    assert total >= 566 and seen >= 189  # the corpus did not shrink


def test_the_secret_corpus_holds_with_every_pii_class_on() -> None:
    for case in SECRETS:
        out, hits = redact_bytes(case.encode("plain"), pii=PII_CLASSES)
        assert hits and not case.leaked(out, "plain"), case.name


def _report(title: str, m: dict) -> None:
    print(
        f"\n{title}: {m['tp'] + m['fn']} cases, {m['tn'] + m['fp']} look-alike cases; "
        f"recall {m['recall']:.1%}, look-alikes kept {m['specificity']:.1%}"
    )
    for x in m["misses"]:
        print(f"  MISSED   {x}")
    for x in m["false_alarms"]:
        print(f"  REDACTED {x}")


def test_pii_is_off_by_default_and_redacted_when_asked() -> None:
    for name, (_cls, carrier, _value) in PII.items():
        data = orjson.dumps({"content": carrier})
        assert redact_bytes(data)[0] == data, name  # off by default
    tp = fn = fp = tn = 0
    misses, alarms = [], []
    for name, (cls, carrier, value) in PII.items():
        for enc in ("plain", "after an escape", "nested json", "u-escaped", "object key"):
            data = ENCODINGS[enc](carrier)
            out, hits = redact_bytes(data, pii=[cls])
            orjson.loads(out)
            if hits and not _leaks(out, value):
                tp += 1
            else:
                fn += 1
                misses.append(f"{name} / {enc}")
    for name, text in PII_LOOKALIKES.items():
        for enc in ("plain", "after an escape"):
            data = ENCODINGS[enc](text)
            out, hits = redact_bytes(data, pii=PII_CLASSES)
            if hits:
                fp += 1
                alarms.append(f"{name} / {enc}: {[h.kind for h in hits]}")
            else:
                tn += 1
    m = {
        "tp": tp,
        "fn": fn,
        "fp": fp,
        "tn": tn,
        "recall": tp / (tp + fn),
        "precision": tp / (tp + fp),
        "specificity": tn / (tn + fp),
        "misses": misses,
        "false_alarms": alarms,
    }
    _report("personal data (email, phone, ip)", m)
    assert misses == []
    assert alarms == []


def test_pii_policy_reaches_the_recorder_and_names_its_kinds(tmp_path) -> None:
    from knowlyr.recorder import Converted, iter_records

    p = tmp_path / "chat.json"
    p.write_bytes(
        orjson.dumps(
            {
                "messages": [
                    {"role": "user", "content": "mail jane@example.com or call +1 415 555 0132"},
                    {"role": "assistant", "content": "ssh admin@203.0.113.42"},
                ]
            }
        )
    )
    (plain,) = iter_records([p])
    assert isinstance(plain, Converted) and b"jane@example.com" in plain.trajectory.to_json()
    (r,) = iter_records([p], redact=RedactionPolicy(pii=("email", "phone", "ip")))
    text = (r.trajectory.to_json() + r.raw).decode()
    for value in ("jane@example.com", "415 555 0132", "203.0.113.42"):
        assert value not in text
    assert {h.kind for h in r.redactions} == {"email", "phone", "ipv4"}


def test_unknown_pii_class_names_the_choices() -> None:
    with pytest.raises(ValueError, match="email, phone, ip"):
        redact_bytes(b"x", pii=["emails"])
    with pytest.raises(ValueError, match="unknown PII class"):
        RedactionPolicy(pii=("ssn",))


def test_ingest_cli_redacts_pii_on_request(tmp_path) -> None:
    from typer.testing import CliRunner

    from knowlyr.cli import app
    from knowlyr.store import Store

    p = tmp_path / "logs" / "chat.json"
    p.parent.mkdir()
    p.write_bytes(
        orjson.dumps(
            {
                "messages": [
                    {"role": "user", "content": "write to jane@example.com please"},
                    {"role": "assistant", "content": "done"},
                ]
            }
        )
    )
    url = str(tmp_path / "store")
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(p.parent), "--store", url, "--redact-pii", "email"])
    assert res.exit_code == 0, res.output
    s = Store.open(url)
    assert "jane@example.com" not in str(s.read("trajectories").rows())
    assert s.runs()[-1].params["redact_pii"] == ["email"]
    res = runner.invoke(app, ["ingest", str(p.parent), "--store", url, "--redact-pii", "ssn"])
    assert res.exit_code == 1 and "unknown PII class 'ssn'" in res.output


@pytest.mark.parametrize(
    "code",
    [
        b'-    password="password"\n+    password="password", timeout=3\n',
        b"+        self.password = password\n",
        b"+    token = request.headers.get('X-Token')\n",
        b"+def check(password: Optional[str] = None) -> bool:\n",
    ],
)
def test_redaction_leaves_submitted_code_unchanged(code: bytes) -> None:
    """A patch in a log (an agent's submission) is not rewritten by redaction."""
    data = orjson.dumps({"action": "submit", "patch": code.decode()})
    assert redact_bytes(data) == (data, [])

"""Secrets never reach a trajectory, a raw blob, a quarantine file or the audit."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import Converted, Rejected, iter_records, redact_bytes, redact_text

# Realistic shapes, made up (none of these is a live credential).
SECRETS = {
    "openai_key": "sk-proj-Zq7RkP2vXw9LmN4bT6yHc1JdF8sGa3QeU5oIr0",
    "anthropic_key": "sk-ant-api03-Xq9vT2mN8bL4kR7sW1yZ3cF6hJ0pD5gA",
    "aws_access_key": "AKIAQ3EGVP7LRTXA4M2N",
    "github_token": "ghp_8fJ2kL9qR4tY7uI1oP3aS6dF0gH5jK2lZ4xC",
    "slack_token": "xoxb-2048123456-4096789012-AbCdEfGhIjKlMnOp",
    "bearer_token": "eWx1Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA",
    "password": "Tr0ub4dor&3-horse",
    "private_key": "MIIEpAIBAAKCAQEA1x2Y3z4W5v6U7t8S9r0Q",
}


def _log() -> bytes:
    s = SECRETS
    events = [
        {
            "id": 0,
            "source": "user",
            "action": "message",
            "args": {"content": f"Deploy with key {s['openai_key']}"},
        },
        {
            "id": 1,
            "source": "agent",
            "action": "run",
            "args": {
                "command": f"export ANTHROPIC_API_KEY={s['anthropic_key']} && "
                f"curl -H 'Authorization: Bearer {s['bearer_token']}' https://api.example.com",
                "thought": f"I will use the AWS key {s['aws_access_key']}",
            },
        },
        {
            "id": 2,
            "cause": 1,
            "observation": "run",
            "content": f"GITHUB_TOKEN={s['github_token']}\nSLACK={s['slack_token']}\n"
            f"-----BEGIN RSA PRIVATE KEY-----\n{s['private_key']}\n-----END RSA PRIVATE KEY-----",
            "extras": {"metadata": {"exit_code": 0}},
        },
        {
            "id": 3,
            "source": "agent",
            "action": "run",
            "args": {"command": f"mysql -u root --password={s['password']} -e 'select 1'"},
            # kept only in the raw log: the model's own call
            "tool_call_metadata": {
                "function_name": "execute_bash",
                "api_key": s["openai_key"][::-1][::-1],
            },
        },
    ]
    return orjson.dumps(events)


def _assert_clean(blob: bytes | str) -> None:
    text = blob if isinstance(blob, str) else blob.decode("utf-8", "replace")
    for kind, secret in SECRETS.items():
        assert secret not in text, f"{kind} leaked"


def test_every_secret_is_redacted_everywhere(tmp_path: Path) -> None:
    p = tmp_path / "leaky.json"
    p.write_bytes(_log())
    (r,) = iter_records([p])
    assert isinstance(r, Converted)
    t = r.trajectory
    _assert_clean(t.to_json())
    _assert_clean(r.raw)
    _assert_clean(repr(r.redactions))
    _assert_clean(orjson.dumps([x.to_dict() for x in r.redactions]))
    assert {x.kind for x in r.redactions} == set(SECRETS)
    where = {(x.kind, x.step, x.field) for x in r.redactions}
    assert ("openai_key", None, "task.instruction") in where
    assert ("anthropic_key", 0, "action.params.command") in where
    assert ("bearer_token", 0, "action.params.command") in where
    assert ("aws_access_key", 0, "thought") in where
    assert ("github_token", 0, "observation.output") in where
    assert ("private_key", 0, "observation.output") in where
    assert ("password", 1, "action.params.command") in where
    # the placeholder keeps the command readable and names the kind
    assert (
        t.steps[1]
        .action.params["command"]
        .startswith("mysql -u root --password=[REDACTED:password#")
    )
    assert t.steps[0].observation.exit_code == 0
    # the same secret always gets the same fingerprint; it is not the secret
    fps = {x.fingerprint for x in r.redactions if x.kind == "openai_key"}
    assert len(fps) == 1 and next(iter(fps)) not in SECRETS["openai_key"]


def test_redaction_can_be_turned_off(tmp_path: Path) -> None:
    p = tmp_path / "leaky.json"
    p.write_bytes(_log())
    (r,) = iter_records([p], redact=False)
    assert SECRETS["password"] in r.trajectory.steps[1].action.params["command"]
    assert r.redactions == []


def test_rejected_records_are_redacted_too(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(
        b'{"history": [], "instance_id": "x"}\n{"token": "'
        + SECRETS["github_token"].encode()
        + b'", \n'
    )
    results = list(iter_records([p]))
    bad = [r for r in results if isinstance(r, Rejected)]
    # line 1 has no steps, line 2 is not JSON: both rejected, with their reasons
    assert [(r.line, "no steps" in r.reason) for r in bad] == [(1, True), (2, False)]
    _assert_clean(bad[1].raw)


def test_cli_outputs_are_clean(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "leaky.json").write_bytes(_log())
    (tmp_path / "in" / "bad.jsonl").write_bytes(
        b'{"messages": [{"role": "user", "content": "pw: '
        + b'x"}]}\n{not json '
        + SECRETS["slack_token"].encode()
        + b"\n"
    )
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(app, ["record", "convert", str(tmp_path / "in"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    _assert_clean(res.output)
    _assert_clean(out.read_bytes())
    _assert_clean((tmp_path / "out.rejected.jsonl").read_bytes())
    assert "redacted:" in res.output and "openai_key=" in res.output
    audit = [orjson.loads(x) for x in (tmp_path / "out.redactions.jsonl").read_bytes().splitlines()]
    _assert_clean((tmp_path / "out.redactions.jsonl").read_bytes())
    assert {"kind": "password", "step": 1, "field": "action.params.command"}.items() <= next(
        a for a in audit if a["kind"] == "password"
    ).items()
    assert all(len(a["fingerprint"]) == 12 and a["path"].endswith("leaky.json") for a in audit)


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=1024",
        '"prompt_tokens": 4646, "completion_tokens": 177',
        "password: ${DB_PASSWORD}",
        "class Foo: pass",
        "see https://github.com/All-Hands-AI/OpenHands/issues/1",
        "task-abcdefghijklmnopqrstuvwxyz0123",
        "toolu_017nBp7UfiGqyrA7j77HgtFP",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == (text, [])


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123", "openai_key"),
        ("key sk-ant-api03-abcdefghijklmnopqrstuv", "anthropic_key"),
        ("AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_key"),
        ("GITHUB_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_token"),
        ("Authorization: Bearer 9vQ2mN8bL4kR7sW1yZ3c", "bearer_token"),
        ('{"password": "hunter22"}', "password"),
        ("DB_PASSWORD=s3cr3t!", "password"),
        ("https://user:pa55word@github.com/x", "url_credentials"),
        ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEF", "huggingface_token"),
        ("api_key: 'AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW'", "google_api_key"),
    ],
)
def test_each_kind(text: str, kind: str) -> None:
    clean, hits = redact_text(text)
    assert [h.kind for h in hits] == [kind]
    assert f"[REDACTED:{kind}#{hits[0].fingerprint}]" in clean


def test_json_stays_valid_after_redaction() -> None:
    inner = orjson.dumps(
        {"password": "hunter22", "note": "line\nsk-proj-abcdefghijklmnopqrstuv0123"}
    ).decode()
    doc = orjson.dumps({"tool_call_metadata": inner, "k": "\\nAKIAIOSFODNN7EXAMPLE"})
    clean, hits = redact_bytes(doc)
    assert len(hits) == 3
    back = orjson.loads(clean)
    assert orjson.loads(back["tool_call_metadata"])["password"].startswith("[REDACTED:password#")


def _escape_ascii(s: str, every: int = 1) -> str:
    """``s`` written the way a JSON encoder may: each ``every``-th character as ``\\u00XX``."""
    return "".join(f"\\u{ord(c):04x}" if i % every == 0 else c for i, c in enumerate(s))


def test_secrets_written_with_json_escapes_are_redacted(tmp_path: Path) -> None:
    key, token = SECRETS["openai_key"], SECRETS["github_token"]
    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    raw = (
        '[{"id": 0, "source": "user", "action": "message", "args": {"content": "caf\\u00e9 '
        'x \\\\u0073k-not-a-key-just-text \\u003cb\\u003e"}},\n'
        ' {"id": 1, "source": "agent", "action": "run", "args": {"command": "export K=sk-'
        + _escape_ascii(key[3:], every=3)  # "sk-\u0070ro\u006a-..." (every third escaped)
        + '"}},\n {"id": 2, "cause": 1, "observation": "run", "content": "'
        + _escape_ascii("GITHUB_TOKEN=" + token)  # every character escaped
        + "\\naws_secret_access_key = "
        + aws.replace("/", "\\/")  # "\/" is a legal JSON escape too
        + '", "extras": {"metadata": {"exit_code": 0}}},\n'
        ' {"id": 3, "source": "agent", "action": "run", "args": {"command": "ls"}, '
        '"tool_call_metadata": {"\\u0061pi_key": "' + _escape_ascii(key, every=2) + '"}}]'
    ).encode()
    assert orjson.loads(raw)[1]["args"]["command"] == f"export K={key}"  # what a parser sees
    p = tmp_path / "escaped.json"
    p.write_bytes(raw)
    (r,) = iter_records([p])
    assert isinstance(r, Converted)
    t = r.trajectory
    out = t.to_json().decode()
    for secret in (key, token, aws):
        for blob in (out, r.raw.decode(), repr(r.redactions)):
            assert secret not in blob
        assert secret not in orjson.loads(r.raw).__repr__()  # not even once decoded
    # the stored raw blob is still the same JSON, secrets replaced
    doc = orjson.loads(r.raw)
    assert doc[1]["args"]["command"].startswith("export K=[REDACTED:openai_key#")
    assert doc[3]["tool_call_metadata"]["api_key"].startswith("[REDACTED:openai_key#")
    assert t.task.instruction == "café x \\u0073k-not-a-key-just-text <b>"  # text left as is
    assert t.steps[0].action.params["command"].startswith("export K=[REDACTED:openai_key#")
    assert "GITHUB_TOKEN=[REDACTED:github_token#" in t.steps[0].observation.output
    assert "aws_secret_access_key = [REDACTED:aws_secret_key#" in t.steps[0].observation.output
    where = {(x.kind, x.step, x.field) for x in r.redactions}
    assert ("openai_key", 0, "action.params.command") in where
    assert ("github_token", 0, "observation.output") in where
    assert ("aws_secret_key", 0, "observation.output") in where
    assert ("openai_key", None, "raw") not in where  # same fingerprint, located in step 0
    fp = {x.fingerprint for x in r.redactions if x.kind == "openai_key"}
    assert fp == {redact_text(key)[1][0].fingerprint}  # fingerprint of the decoded secret


def test_escaped_text_without_secrets_is_stored_as_written() -> None:
    doc = b'{"a": "caf\\u00e9 \\u003cdiv\\u003e https:\\/\\/example.com \\\\u0073k-x"}'
    assert redact_bytes(doc) == (doc, [])


def test_url_credentials_behind_escaped_slashes() -> None:
    clean, hits = redact_bytes(b'{"remote": "https:\\/\\/bob:hunter2pass@git.acme-corp.io\\/x"}')
    assert [h.kind for h in hits] == ["url_credentials"] and b"hunter2pass" not in clean
    assert orjson.loads(clean)["remote"].startswith("https://bob:[REDACTED:url_credentials#")


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("C:\\keys\\AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        ("C:\\tokens\\ghp_abcdefghijklmnopqrstuvwxyz0123456789", "github_token"),
        ("D:\\secrets\\sk-proj-abcdefghijklmnopqrstuvwxyz0123", "openai_key"),
    ],
)
def test_a_key_right_after_a_literal_backslash_is_redacted(value: str, kind: str) -> None:
    # in the raw JSON the backslash is written \\ ; in plain text it is one byte
    clean, hits = redact_bytes(orjson.dumps({"cmd": value}))
    assert [h.kind for h in hits] == [kind]
    assert orjson.loads(clean)["cmd"].startswith(value.rsplit("\\", 1)[0] + "\\[REDACTED:")
    text, hits = redact_text(value)
    assert [h.kind for h in hits] == [kind] and "[REDACTED:" in text
    # the letter of a JSON escape is not a key's first letter: "\t" + "oken=..." stays
    assert redact_bytes(b'{"a": "\\token=abcdefghijklmnop"}')[1] == []


def test_a_url_password_holding_an_at_sign_is_redacted_whole() -> None:
    clean, hits = redact_text("git clone https://deploy:p@ss@w0rd!@git.example.com/repo.git")
    assert [h.kind for h in hits] == ["url_credentials"]
    assert "ss" not in clean.split("@git.example.com")[0].split("deploy:")[1]
    assert clean.endswith("@git.example.com/repo.git")

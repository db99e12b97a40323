"""The redaction corpus (``tests/data/redaction/corpus.json``): secrets that must go, in every
way a log can spell them, and code and test data that must stay. Every value in it is made
up; none is a live credential.

:func:`load_corpus` reads it; :data:`ENCODINGS` turn a case's text into the bytes of a log
(JSON escaped once, twice, ``\\u``-escaped, after a backslash or an escape, as an object key,
ASCII-only JSON); the forms ``wrapped`` (a token split over two lines) and ``base64`` apply to
the cases that list them. ``PII`` / ``PII_LOOKALIKES`` are the same for the opt-in
personal-data classes. ``bench/redaction_bench.py`` measures on the same corpus.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

CORPUS = Path(__file__).resolve().parents[1] / "data" / "redaction" / "corpus.json"


def _u_escaped(text: str) -> bytes:
    """``text`` as a JSON string with every letter and digit written as a ``\\u`` escape."""
    body = "".join(f"\\u{ord(c):04x}" if c.isalnum() else c for c in text)
    body = body.replace('"', '\\"').replace("\n", "\\n")
    return b'{"content": "' + body.encode() + b'"}'


def _nested(s: str, depth: int) -> bytes:
    doc: object = {"cmd": s}
    for _ in range(depth):
        doc = {"content": orjson.dumps(doc).decode()}
    return orjson.dumps(doc)


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "plain": lambda s: orjson.dumps({"content": s}),
    "ascii json": lambda s: json.dumps({"content": s}).encode(),  # \u2192, \u00a0
    "u-escaped": _u_escaped,
    "after a backslash": lambda s: orjson.dumps({"path": "C:\\keys\\" + s}),
    "after an escape": lambda s: orjson.dumps({"output": "ok\n" + s + "\tdone"}),
    "nested json": lambda s: _nested(s, 1),
    "double-escaped json": lambda s: _nested(s, 2),
    "object key": lambda s: orjson.dumps({"env": {s: True}}),
    "jsonl line": lambda s: orjson.dumps({"role": "tool", "content": [{"text": s}]}),
}


@dataclass(slots=True)
class SecretCase:
    """Text holding secrets: ``secrets`` must not survive redaction in any encoding."""

    name: str
    text: str
    secrets: list[str]
    kind: str
    forms: list[str] = field(default_factory=list)

    @property
    def encodings(self) -> list[str]:
        return [*ENCODINGS, *self.forms]

    def encode(self, enc: str) -> bytes:
        """The case's text as the log bytes of encoding ``enc``."""
        if enc == "wrapped":  # the token split in the middle by a line break
            tok = self.secrets[0]
            half = len(tok) // 2
            return ENCODINGS["plain"](self.text.replace(tok, tok[:half] + "\n" + tok[half:]))
        if enc == "base64":  # echo ... | base64, wrapped at 76 columns
            b64 = base64.encodebytes(self.text.encode()).decode()
            return ENCODINGS["plain"](f"$ base64 -d <<EOF\n{b64}EOF")
        return ENCODINGS[enc](self.text)

    def leaked(self, out: bytes, enc: str) -> list[str]:
        """The strings of ``secrets`` still readable in redacted ``out``: in its bytes, in its
        JSON strings at every depth, with line breaks removed, base64-decoded, and (wrapped)
        either half of the token."""
        texts = [out.decode("utf-8", "replace"), *_strings(orjson.loads(out))]
        if enc == "wrapped":
            texts += [re.sub(r"\\*\n|\\+n", "", t) for t in texts]
        if enc == "base64":
            texts += [_b64_text(t) for t in list(texts)]
        must = list(self.secrets)
        if enc == "wrapped":
            tok = self.secrets[0]
            must += [tok[: len(tok) // 2], tok[len(tok) // 2 :]]
        return [s for s in must if any(s in t for t in texts)]


@dataclass(slots=True)
class FileCase:
    """A path whose ``secrets`` must not survive in the path the recorder keeps."""

    name: str
    path: str
    secrets: list[str]


@dataclass(slots=True)
class KeepCase:
    """Code or test data that redaction must leave as it is, and why it is not a secret."""

    name: str
    text: str
    why: str
    encodings: list[str] = field(default_factory=lambda: ["plain", "nested json", "ascii json"])

    def encode(self, enc: str) -> bytes:
        return ENCODINGS[enc](self.text)


def load_corpus() -> tuple[list[SecretCase], list[FileCase], list[KeepCase]]:
    """The corpus's secret cases, file-name cases and cases to keep."""
    doc = json.loads(CORPUS.read_text(encoding="utf-8"))
    return (
        [SecretCase(**c) for c in doc["secrets"]],
        [FileCase(**c) for c in doc["files"]],
        [KeepCase(**c) for c in doc["keep"]],
    )


def _strings(x: object) -> list[str]:
    """Every key and string of a JSON value, and of the JSON documents inside its strings."""
    out: list[str] = []
    if isinstance(x, str):
        out.append(x)
        if x[:1] in "{[":
            with contextlib.suppress(orjson.JSONDecodeError):
                out += _strings(orjson.loads(x))
    elif isinstance(x, dict):
        for k, v in x.items():
            out += _strings(k) + _strings(v)
    elif isinstance(x, list):
        for v in x:
            out += _strings(v)
    return out


def _b64_text(text: str) -> str:
    """``text`` with every base64 run (line breaks inside it dropped) decoded."""
    joined = re.sub(r"(?<=[A-Za-z0-9+/=])\n(?=[A-Za-z0-9+/])", "", text)
    out = []
    for m in re.finditer(r"[A-Za-z0-9+/]{16,}={0,2}", joined):
        run = m.group(0)
        try:
            out.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode("utf-8", "replace"))
        except ValueError:
            continue
    return "\n".join(out)


# -- personal data, opt-in --------------------------------------------------------------------

PII: dict[str, tuple[str, str, str]] = {  # name: (class, carrier, the value)
    "email": (
        "email",
        "Contact: jane.doe+bugs@example.co.uk for access",
        "jane.doe+bugs@example.co.uk",
    ),
    "email in git log": ("email", "Author: Bob <bob@corp.example.com>", "bob@corp.example.com"),
    "phone, international": ("phone", "call +1 415 555 0132 today", "+1 415 555 0132"),
    "phone, dashes": ("phone", "tel 415-555-0132", "415-555-0132"),
    "phone, parens": ("phone", "phone: (415) 555-0132", "(415) 555-0132"),
    "phone, german": ("phone", "Tel.: +49 30 1234 5678", "+49 30 1234 5678"),
    "ipv4": ("ip", "ssh root@203.0.113.42 -p 22", "203.0.113.42"),
    "ipv4 private": ("ip", "inet 10.0.12.7/24 brd", "10.0.12.7"),
    "ipv6": ("ip", "addr 2001:db8:85a3::8a2e:370:7334 up", "2001:db8:85a3::8a2e:370:7334"),
    "ipv6 full": (
        "ip",
        "from fe80:0000:0000:0000:0202:b3ff:fe1e:8329",
        "fe80:0000:0000:0000:0202:b3ff:fe1e:8329",
    ),
}

PII_LOOKALIKES: dict[str, str] = {
    "version": "numpy==1.26.4 and python 3.11.7",
    "date": "released 2024-01-15",
    "time": "at 12:30:00 UTC",
    "cpp scope": "std::vector<int> v; boost::asio::io_context ctx;",
    "loopback": "curl http://127.0.0.1:8000/health",
    "any address": "bind 0.0.0.0:80",
    "ipv6 loopback": "listen [::1]:8080",
    "decorator": "@pytest.mark.parametrize('x', [1, 2])",
    "git hash": "commit 3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "big number": "loss 1234567890.5 after 4096 steps",
    "python slice": "x[1:2:3], y[::2]",
}

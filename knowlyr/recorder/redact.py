"""Secret redaction for raw logs and trajectories.

Every log goes through :func:`redact_bytes` *before* it is parsed, so every string of the
resulting trajectory (thoughts, commands, outputs, metadata) and the raw blob that is
stored next to it are already clean. A secret is replaced by a placeholder that names its
kind and a short fingerprint (the first 12 hex digits of its sha256) so that two leaks of
the same key can be correlated without keeping the key::

    sk-proj-AbC...xyz  ->  [REDACTED:openai_key#3f2a1b9c0d4e]

Redaction works on the JSON bytes, never crossing a string boundary: no rule matches a
double quote or a backslash, so the document stays valid JSON.

Speed: each rule has literal triggers (``b"sk-"``, ``b"AKIA"``...) checked with a plain
substring search first; its regular expression runs only when a trigger is present, so a
clean 25 KB log costs about a dozen ``bytes.__contains__`` calls.

Example:
    >>> clean, hits = redact_bytes(b'{"cmd": "export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuv"}')
    >>> b"sk-abc" in clean, hits[0].kind
    (False, 'openai_key')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PLACEHOLDER_RE",
    "Redaction",
    "fingerprint",
    "redact_bytes",
    "redact_text",
    "redaction_rules",
]


@dataclass(slots=True, frozen=True)
class Redaction:
    """One redacted secret: its kind, fingerprint and where it was (never the secret itself).

    Attributes:
        kind: the rule that matched (``openai_key``, ``aws_access_key``, ``password``...).
        fingerprint: first 12 hex digits of sha256(secret).
        step: index of the step whose string held it, ``None`` outside the steps.
        field: dotted field name (``observation.output``, ``task.instruction``), or ``raw``
            when the secret sat in a part of the log the trajectory does not keep.
    """

    kind: str
    fingerprint: str
    step: int | None = None
    field: str = "raw"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "fingerprint": self.fingerprint,
            "step": self.step,
            "field": self.field,
        }


def fingerprint(secret: bytes | str) -> str:
    """Short, stable, non-reversible id of a secret (12 hex digits of its sha256)."""
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.sha256(secret).hexdigest()[:12]


# A secret never contains a JSON quote or backslash, so a match stays inside one string.
# (?<![\\\w]) keeps a match from starting inside a word or right after a JSON escape (\n, \b...).
_B = rb"(?:(?<![\\A-Za-z0-9_])|(?<=\\[nrtbf]))"
# Keys (PASSWORD, API_KEY) may follow an underscore: DB_PASSWORD=..., OPENAI_API_KEY=...
_K = _B.replace(b"_", b"")
_SAFE = rb"[^\s\"'\\<>`,;&|)(\]\[{}]"

# kind, triggers (substring tests), pattern, group holding the secret (0 = whole match)
_RULES: list[tuple[str, tuple[bytes, ...], bytes, int]] = [
    (
        "private_key",
        (b"PRIVATE KEY-----",),
        rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,.\-]{0,8000}?-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----",
        0,
    ),
    ("anthropic_key", (b"sk-ant-",), _B + rb"sk-ant-[A-Za-z0-9_\-]{16,}", 0),
    ("openai_key", (b"sk-",), _B + rb"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}", 0),
    ("aws_access_key", (b"AKIA", b"ASIA"), _B + rb"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])", 0),
    (
        "aws_secret_key",
        (b"aws_secret", b"AWS_SECRET"),
        rb"(?i)aws_secret_access_key[\"']?\s*[:=]\s*\\?[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        1,
    ),
    (
        "github_token",
        (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"),
        _B + rb"gh[pousr]_[A-Za-z0-9]{30,}",
        0,
    ),
    ("github_token", (b"github_pat_",), _B + rb"github_pat_[A-Za-z0-9_]{22,}", 0),
    ("slack_token", (b"xox",), _B + rb"xox[abposr]-[A-Za-z0-9\-]{10,}", 0),
    ("google_api_key", (b"AIza",), _B + rb"AIza[0-9A-Za-z_\-]{35}", 0),
    ("huggingface_token", (b"hf_",), _B + rb"hf_[A-Za-z0-9]{30,}", 0),
    (
        "jwt",
        (b"eyJ",),
        _B + rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        0,
    ),
    (
        "bearer_token",
        (b"Bearer", b"bearer", b"BEARER"),
        _B + rb"(?i:bearer)\s+([A-Za-z0-9_\-.=+/~]{16,})",
        1,
    ),
    (
        "password",
        (b"assw", b"ASSW", b"asswd", b"pwd", b"PWD", b"ecret", b"ECRET"),
        _K + rb"(?i:password|passwd|pwd|secret)"
        rb"\\?[\"']?\s*[:=]\s*(?:\\?[\"'])?(" + _SAFE + rb"{4,})",
        1,
    ),
    (
        "api_token",
        (b"oken", b"OKEN", b"pi_key", b"PI_KEY", b"pikey", b"PIKEY", b"pi-key", b"PI-KEY"),
        _K + rb"(?i:api[_\-]?key|access[_\-]?token|auth[_\-]?token|token)"
        rb"\\?[\"']?\s*[:=]\s*(?:\\?[\"'])?(" + _SAFE + rb"{12,})",
        1,
    ),
    (
        "url_credentials",
        (b"://",),
        rb"[a-z][a-z0-9+.\-]*://[^\s:/@\"'\\]+:(" + _SAFE.replace(b"<>", b"<>@") + rb"+)@",
        1,
    ),
]

# Values that look like an assignment but are not secrets (placeholders, env references...).
_BENIGN = re.compile(
    rb"^(?:\[REDACTED|\$|%|\{|<|\*+$|x+$|null$|none$|true$|false$|undefined$|required$|optional$|str$|string$|int$)",
    re.I,
)

PLACEHOLDER_RE = re.compile(r"\[REDACTED:([a-z_]+)#([0-9a-f]{12})\]")


@dataclass(slots=True)
class _Rule:
    kind: str
    triggers: tuple[bytes, ...]
    regex: re.Pattern[bytes]
    group: int


_COMPILED: list[_Rule] = [_Rule(k, t, re.compile(p), g) for k, t, p, g in _RULES]
_TEXT_CACHE: dict[str, re.Pattern[str]] = {}


def redaction_rules() -> list[str]:
    """The kinds of secret that are redacted."""
    return sorted({r.kind for r in _COMPILED})


def _replacer(rule: _Rule, hits: list[Redaction]) -> Callable[[re.Match[bytes]], bytes]:
    kind, group = rule.kind, rule.group

    def sub(m: re.Match[bytes]) -> bytes:
        secret = m.group(group)
        if group and _BENIGN.match(secret):
            return m.group(0)
        fp = fingerprint(secret)
        hits.append(Redaction(kind, fp))
        mark = b"[REDACTED:" + kind.encode() + b"#" + fp.encode() + b"]"
        if not group:
            return mark
        start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
        whole = m.group(0)
        return whole[:start] + mark + whole[end:]

    return sub


def redact_bytes(data: bytes) -> tuple[bytes, list[Redaction]]:
    """Replace every secret in ``data`` (a raw log or one JSONL line) by a placeholder.

    Returns:
        The cleaned bytes (``data`` itself when nothing matched) and one :class:`Redaction`
        per secret, with ``field="raw"`` (the caller locates them in the trajectory).

    Example:
        >>> redact_bytes(b"password=hunter22")[0]
        b'password=[REDACTED:password#20d2fe5e369d]'
    """
    hits: list[Redaction] = []
    for rule in _COMPILED:
        for t in rule.triggers:
            if t in data:
                data = rule.regex.sub(_replacer(rule, hits), data)
                break
    return data, hits


def redact_text(text: str) -> tuple[str, list[Redaction]]:
    """:func:`redact_bytes` for a ``str`` (UTF-8 round trip)."""
    clean, hits = redact_bytes(text.encode("utf-8", "surrogatepass"))
    if not hits:
        return text, hits
    return clean.decode("utf-8", "surrogatepass"), hits

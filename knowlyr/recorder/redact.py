"""Secret redaction for raw logs and trajectories.

Every log goes through :func:`redact_bytes` *before* it is parsed, so every string of the
resulting trajectory (thoughts, commands, outputs, metadata) and the raw blob that is
stored next to it are already clean. A secret is replaced by a placeholder that names its
kind and a short fingerprint (the first 12 hex digits of its sha256) so that two leaks of
the same key can be correlated without keeping the key::

    sk-proj-AbC...xyz  ->  [REDACTED:openai_key#3f2a1b9c0d4e]

Redaction works on the JSON bytes, never crossing a string boundary: no rule matches a
double quote or a backslash, so the document stays valid JSON. A secret whose characters
the JSON spells as escapes (``"sk-\\u0061bc..."``, ``https:\\/\\/user:pw@...``) is found
too: when the log has escapes of printable ASCII, it is read again with them decoded, and
if that finds secrets the decoded (same JSON value) bytes are what is kept, redacted.

Assignments in source code are not secrets: ``password = self.password``,
``token = request.headers.get("X-Token")``, ``password: Optional[str] = None`` or a test
fixture's ``password="password"`` stay as written (a dotted name, a call, a subscript, a
variable named after the key, a type, or a placeholder value), so that redacting a log never
changes the patch an agent submitted. ``PASSWORD=hunter22`` and ``password="s3cr3t!"`` are
redacted.

Personal data (e-mail addresses, phone numbers, IPv4/IPv6 addresses) is redacted only when
asked for: ``redact_bytes(data, pii=("email", "phone", "ip"))``, or a
:class:`RedactionPolicy` passed as ``redact=`` to the recorder and the store's ingest
(``knowlyr ingest --redact-pii email,phone,ip``).

Speed: one pass over the bytes finds every rule's literal triggers (``sk-``, ``AKIA``,
``password``...) with a SIMD Aho-Corasick automaton (``ahocorasick-rs``, ~4 GB/s); each rule's
pattern is then matched only at its triggers' positions. A clean 45 KB log costs ~15 µs.

Example:
    >>> clean, hits = redact_bytes(b'{"cmd": "export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuv"}')
    >>> b"sk-abc" in clean, hits[0].kind
    (False, 'openai_key')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowlyr.trajectory import Trajectory

__all__ = [
    "PII_CLASSES",
    "PLACEHOLDER_RE",
    "Redaction",
    "RedactionPolicy",
    "fingerprint",
    "locate_redactions",
    "redact_bytes",
    "redact_text",
    "redaction_policy",
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


# A secret never contains a JSON quote or backslash, so a match stays inside one string. A
# KEY=value rule may look past the quotes around a key or a value, escaped once or more
# (JSON inside a JSON string: \\\"password\\\": \\\"...\\\"), but replaces only the value.
# _B keeps a match from starting inside a word; it may start right after a JSON escape (\n,
# \t...) or a literal backslash (C:\keys\AKIA..., written \\ in JSON), but not at the letter
# of an escape itself (the "t" of \token is a tab). Keys (PASSWORD, API_KEY) may follow an
# underscore: DB_PASSWORD=..., OPENAI_API_KEY=...
_B = rb"(?:(?<![\\A-Za-z0-9_])|(?<=\\[nrtbf])|(?<=\\)(?![nrtbfu]))"
_K = _B.replace(b"_", b"")
_SAFE = rb"[^\s\"'\\<>`,;&|)(\]\[{}]"
_SEP = rb"\\*[\"']?\s*[:=]\s*(?P<q>\\*[\"'])?"

# kind, triggers, pattern (matched AT a trigger's position), group holding the secret (0 = all)
_RULES: list[tuple[str, tuple[bytes, ...], bytes, int | str]] = [
    (
        "private_key",
        (b"-----BEGIN ",),
        rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,.\-]{0,8000}?-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----",
        0,
    ),
    ("anthropic_key", (b"sk-",), _B + rb"sk-ant-[A-Za-z0-9_\-]{16,}", 0),
    ("openai_key", (b"sk-",), _B + rb"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}", 0),
    ("aws_access_key", (b"AKIA", b"ASIA"), _B + rb"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])", 0),
    (
        "aws_secret_key",
        (b"aws_secret_access_key", b"AWS_SECRET_ACCESS_KEY"),
        rb"(?i:aws_secret_access_key)" + _SEP + rb"(?P<v>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        "v",
    ),
    (
        "github_token",
        (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"),
        _B + rb"gh[pousr]_[A-Za-z0-9]{30,}",
        0,
    ),
    ("github_token", (b"github_pat_",), _B + rb"github_pat_[A-Za-z0-9_]{22,}", 0),
    (
        "slack_token",
        (b"xoxb-", b"xoxp-", b"xoxa-", b"xoxo-", b"xoxs-", b"xoxr-"),
        _B + rb"xox[abposr]-[A-Za-z0-9\-]{10,}",
        0,
    ),
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
        (
            b"password",
            b"Password",
            b"PASSWORD",
            b"passwd",
            b"PASSWD",
            b"pwd",
            b"PWD",
            b"secret",
            b"Secret",
            b"SECRET",
        ),
        _K + rb"(?i:password|passwd|pwd|secret)" + _SEP + rb"(?P<v>" + _SAFE + rb"{4,})",
        "v",
    ),
    (
        "api_token",
        (
            b"token",
            b"Token",
            b"TOKEN",
            b"api_key",
            b"API_KEY",
            b"apikey",
            b"APIKEY",
            b"api-key",
            b"API-KEY",
            b"Api-Key",
        ),
        _K + rb"(?i:token|api[_\-]?key)" + _SEP + rb"(?P<v>" + _SAFE + rb"{12,})",
        "v",
    ),
    # user:password@ in URLs, matched from the "://"; the password runs to the last "@" before
    # the host (a password may hold "@": user:p@ss@host)
    ("url_credentials", (b"://",), rb"://[^\s:/@\"'\\]+:([^\s\"'\\<>`,;&|)(\]\[{}/]+)@", 1),
]

# Values that look like an assignment but are not secrets (placeholders, env references...).
_BENIGN = re.compile(
    rb"^(?:\[REDACTED|\$|%|\{|<|\*+$|x+$|null$|none$|true$|false$|undefined$|required$|optional$|str$|string$|int$)",
    re.I,
)
# KEY = value in source code (the rules marked ``code``), unquoted: a call or subscript
# (getpass(), os.environ["X"]), a dotted name (self.password, settings.DB_PASSWORD), a name that
# names the key again (password=password, raw_password, api_key=api_key_env), a type
# (password: SecretStr) or a path (PWD=/home/me); quoted: a test fixture's placeholder
# (password="password", secret="test").
_DOTTED = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_KEY_WORD = re.compile(rb"(?i)pass|pwd|secret|token|key|cred")
_TYPES = frozenset(
    b"any bool bytes dict float list object optional secretbytes secretstr self cls union".split()
)
_FIXTURE_VALUES = frozenset(
    b"password passwd pwd pass secret token apikey api_key test testing testpass testpassword "
    b"example dummy fake foo bar foobar baz changeme placeholder".split()
)


def _code_or_fixture(m: re.Match[bytes], data: bytes) -> bool:
    """Whether a KEY=value match is code or a test fixture rather than a secret (see above)."""
    value = m.group("v")
    if m.group("q"):  # quoted: a literal; only well-known fixture values are kept
        return value.lower() in _FIXTURE_VALUES
    if data[m.end("v") : m.end("v") + 1] in (b"(", b"["):  # a call or a subscript
        return True
    if value.startswith((b"/", b"./", b"~/")):  # a path (PWD=/home/me in an env dump)
        return True
    if _DOTTED.fullmatch(value):
        return True
    if _NAME.fullmatch(value):
        return value.lower() in _TYPES or bool(_KEY_WORD.search(value))
    return False


PLACEHOLDER_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)#([0-9a-f]{12})\]")


@dataclass(slots=True)
class _Rule:
    kind: str
    regex: re.Pattern[bytes]
    group: int | str
    code: bool = False  # KEY=value rules: skip assignments in source code (_code_or_fixture)


_COMPILED: list[_Rule] = [
    _Rule(k, re.compile(p), g, k in ("password", "api_token")) for k, _t, p, g in _RULES
]
_PREFIXED = [r for r in _COMPILED if r.group == 0]
_TRIGGERS: list[bytes] = []
_BY_TRIGGER: list[list[_Rule]] = []
for (_kind, _trig, _p, _g), _rule in zip(_RULES, _COMPILED, strict=True):
    for _t in _trig:
        if _t not in _TRIGGERS:
            _TRIGGERS.append(_t)
            _BY_TRIGGER.append([])
        _BY_TRIGGER[_TRIGGERS.index(_t)].append(_rule)

# JSON may spell printable ASCII as \u0020-\u007e (and "/" as "\/"): "sk-\u0061bc..." is the
# secret "sk-abc...". These triggers have no rule: seeing one makes redact_bytes look again at
# the log with such escapes decoded (see _unescape_ascii). "\/" has its own scan: as a trigger
# among the others, a two-byte pattern starting with the backslash of every "\n" would make the
# one scan 4x slower.
for _t in (b"\\u00%d" % d for d in range(2, 8)):
    _TRIGGERS.append(_t)
    _BY_TRIGGER.append([])
_ESCAPE = re.compile(rb"\\(?:u00([2-7][0-9A-Fa-f])|(/)|.)", re.S)


def _unescape_char(m: re.Match[bytes]) -> bytes:
    if m.group(2):
        return b"/"
    h = m.group(1)
    if h is None:
        return m.group(0)  # any other escape (\\, \", \n, \u00e9...) stays as written
    c = int(h, 16)
    return m.group(0) if c in (0x22, 0x5C, 0x7F) else bytes((c,))


def _unescape_ascii(data: bytes) -> bytes:
    """``data`` with JSON escapes of printable ASCII other than ``"`` and ``\\`` (and ``\\/``)
    written as the character itself: the same JSON value, so a pattern can see the secret."""
    return _ESCAPE.sub(_unescape_char, data)


def _make_scanner() -> tuple[Callable[[bytes], list[tuple[int, int, int]]], Callable[[bytes], Any]]:
    """All trigger positions in one pass: a SIMD Aho-Corasick (ahocorasick-rs) when installed,
    else one ``bytes.find`` loop per trigger; and a test for an escaped slash."""
    try:
        import ahocorasick_rs
    except ImportError:  # pragma: no cover - exercised only without the optional accelerator

        def scan(data: bytes) -> list[tuple[int, int, int]]:
            hits = []
            for i, t in enumerate(_TRIGGERS):
                pos = data.find(t)
                while pos >= 0:
                    hits.append((i, pos, pos + len(t)))
                    pos = data.find(t, pos + 1)
            hits.sort(key=lambda h: h[1])
            return hits

        return scan, lambda data: b"\\/" in data
    ac = ahocorasick_rs.BytesAhoCorasick(
        _TRIGGERS, matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST
    )
    slash = ahocorasick_rs.BytesAhoCorasick([b"\\/"])  # one pattern: a SIMD substring search
    return ac.find_matches_as_indexes, slash.find_matches_as_indexes


_scan, _has_escaped_slash = _make_scanner()


def redaction_rules() -> list[str]:
    """The kinds of secret that are redacted."""
    return sorted({r.kind for r in _COMPILED})


# -- personal data (opt-in) --------------------------------------------------------------------

# A match starts at a word start, or right after a JSON escape (\n, \t...), never at the letter
# of an escape; no pattern matches a quote or a backslash, so the JSON stays valid.
_PB = rb"(?:(?<![\\A-Za-z0-9_.+\-])|(?<=\\[nrtbf]))"
_OCTET = rb"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_H16 = rb"[0-9A-Fa-f]{1,4}"
_PII_RULES: dict[str, list[tuple[str, re.Pattern[bytes]]]] = {
    "email": [
        (
            "email",
            re.compile(
                _PB + rb"[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}"
                rb"[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9_\-])"
            ),
        )
    ],
    "phone": [
        (
            "phone",
            re.compile(
                # +CC with 6-14 more digits in groups, or (555) 123-4567 / 555-123-4567 / 555.123.4567
                rb"(?:(?<![\\A-Za-z0-9_+])|(?<=\\[nrtbf]))"
                rb"(?:\+[1-9][0-9]{0,2}(?:[ .\-]?\(?[0-9]{1,4}\)?)(?:[ .\-]?[0-9]{2,4}){2,4}"
                rb"|\([0-9]{3}\)[ .\-]?[0-9]{3}[ .\-][0-9]{4}"
                rb"|[0-9]{3}([.\-])[0-9]{3}\1[0-9]{4})(?![0-9A-Za-z_]|[.\-][0-9])"
            ),
        )
    ],
    "ip": [
        (
            "ipv4",
            re.compile(
                rb"(?:(?<![\\A-Za-z0-9_.])|(?<=\\[nrtbf]))"
                + rb"(?:"
                + _OCTET
                + rb"\.){3}"
                + _OCTET
                + rb"(?![0-9A-Za-z_]|\.[0-9])"
            ),
        ),
        (
            "ipv6",
            re.compile(
                rb"(?:(?<![\\A-Za-z0-9_:.])|(?<=\\[nrtbf]))(?:"
                + rb"(?:"
                + _H16
                + rb":){7}"
                + _H16
                + rb"|(?:"
                + _H16
                + rb":){1,6}:(?:"
                + _H16
                + rb":){0,5}"
                + _H16
                + rb"|(?:"
                + _H16
                + rb":){1,7}:"
                + rb"|::(?:"
                + _H16
                + rb":){0,6}"
                + _H16
                + rb")(?![0-9A-Za-z_:])"
            ),
        ),
    ],
}
PII_CLASSES: tuple[str, ...] = tuple(_PII_RULES)
"""The personal-data classes :func:`redact_bytes` can redact on request: email, phone, ip."""

_NOT_PII = frozenset({b"0.0.0.0", b"255.255.255.255", b"::", b"::1"})


def _is_pii(kind: str, value: bytes) -> bool:
    if value in _NOT_PII:
        return False
    if kind == "ipv4":
        return not value.startswith(b"127.")  # loopback names no one
    if kind == "ipv6":  # a C++ scope (std::map) or a time (12:30:00) is no address
        groups = [g for g in value.split(b":") if g]  # a slice (y[::2]) has one
        return any(c in b"0123456789" for c in value) and len(groups) >= 2
    if kind == "phone":
        return 7 <= sum(c in b"0123456789" for c in value) <= 15
    return True


def _check_pii(pii: Iterable[str] | str | None) -> tuple[str, ...]:
    if not pii:  # None, "", (): every log's redaction asks, most with none
        return ()
    names = [x.strip().lower() for x in (pii.split(",") if isinstance(pii, str) else pii)]
    names = [x for x in names if x]
    bad = [x for x in names if x not in _PII_RULES]
    if bad:
        raise ValueError(
            f"unknown PII class {bad[0]!r}: choose from {', '.join(PII_CLASSES)} "
            "(comma-separated, e.g. email,phone,ip)"
        )
    return tuple(sorted(set(names)))


def _redact_pii(data: bytes, pii: tuple[str, ...]) -> tuple[bytes, list[Redaction]]:
    hits: list[Redaction] = []
    for name in pii:
        for kind, rx in _PII_RULES[name]:

            def repl(m: re.Match[bytes], kind: str = kind) -> bytes:
                value = m.group(0)
                if not _is_pii(kind, value):
                    return value
                fp = fingerprint(value)
                hits.append(Redaction(kind, fp))
                return b"[REDACTED:" + kind.encode() + b"#" + fp.encode() + b"]"

            data = rx.sub(repl, data)
    return data, hits


@dataclass(frozen=True, slots=True)
class RedactionPolicy:
    """What to redact: secrets (on by default) and personal-data classes (off by default).

    Picklable and hashable, so the recorder's worker processes get it as it is. It is false
    when it redacts nothing.

    Attributes:
        secrets: API keys, tokens, passwords, private keys (:func:`redaction_rules`).
        pii: personal-data classes from :data:`PII_CLASSES` (``email``, ``phone``, ``ip``).

    Example:
        >>> p = RedactionPolicy(pii=("email",))
        >>> p.redact_text("mail bob@example.com")[0][:21]
        'mail [REDACTED:email#'
    """

    secrets: bool = True
    pii: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "pii", _check_pii(self.pii))

    def __bool__(self) -> bool:
        return self.secrets or bool(self.pii)

    def redact_bytes(self, data: bytes) -> tuple[bytes, list[Redaction]]:
        """:func:`redact_bytes` under this policy."""
        return redact_bytes(data, pii=self.pii, secrets=self.secrets)

    def redact_text(self, text: str) -> tuple[str, list[Redaction]]:
        """:func:`redact_text` under this policy."""
        return redact_text(text, pii=self.pii, secrets=self.secrets)


def redaction_policy(
    redact: bool | RedactionPolicy = True, pii: Iterable[str] | str | None = None
) -> RedactionPolicy:
    """A :class:`RedactionPolicy` from the recorder's ``redact=`` argument (``True``: secrets,
    ``False``: nothing, or a policy) and extra personal-data classes ``pii``
    (``"email,phone"`` or a list).

    Raises:
        ValueError: for a PII class that is not one of :data:`PII_CLASSES`.
    """
    base = redact if isinstance(redact, RedactionPolicy) else RedactionPolicy(secrets=bool(redact))
    extra = _check_pii(pii)
    if not extra:
        return base
    return RedactionPolicy(secrets=base.secrets, pii=tuple(set(base.pii) | set(extra)))


def _redact_secrets(
    data: bytes, found: list[tuple[int, int, int]]
) -> tuple[bytes, list[Redaction], bool]:
    """The secret rules at their triggers' positions; also whether ``data`` has escapes of
    printable ASCII (then it must be read again decoded)."""
    hits: list[Redaction] = []
    parts: list[bytes] = []
    escaped = False
    last = 0
    for idx, pos, _end in found:
        if pos < last:
            continue
        rules = _BY_TRIGGER[idx]
        if not rules:  # an escaped ASCII character: the log must be read again decoded
            escaped = True
            continue
        for rule in rules:
            m = rule.regex.match(data, pos)
            if m is None:
                continue
            g = rule.group
            secret = m.group(g)
            if g and _BENIGN.match(secret):
                continue
            if rule.code and _code_or_fixture(m, data):
                continue
            start, end = m.span(g)
            if start < last:
                continue
            kind = rule.kind
            if g:  # KEY=value: name the value's own kind when it has one (OPENAI_API_KEY=sk-...)
                kind = next((r.kind for r in _PREFIXED if r.regex.match(secret)), kind)
            fp = fingerprint(secret)
            hits.append(Redaction(kind, fp))
            parts.append(data[last:start])
            parts.append(b"[REDACTED:" + kind.encode() + b"#" + fp.encode() + b"]")
            last = end
            break
    if not hits:
        return data, hits, escaped
    parts.append(data[last:])
    return b"".join(parts), hits, escaped


def redact_bytes(
    data: bytes, *, pii: Iterable[str] | str | None = (), secrets: bool = True
) -> tuple[bytes, list[Redaction]]:
    """Replace every secret in ``data`` (a raw log or one JSONL line) by a placeholder.

    One pass finds every trigger (``sk-``, ``AKIA``, ``password``...); the rule's pattern is
    then matched at that position only, so cost grows with the log's size, not the number
    of rules.

    Args:
        data: the bytes (JSON or text).
        pii: personal-data classes to redact too (:data:`PII_CLASSES`: ``email``, ``phone``,
            ``ip``); none by default.
        secrets: redact secrets (``False`` with ``pii`` redacts only personal data).

    Returns:
        The cleaned bytes (``data`` itself when nothing matched) and one :class:`Redaction`
        per secret, with ``field="raw"`` (the caller locates them in the trajectory).

    Raises:
        ValueError: for a PII class that is not one of :data:`PII_CLASSES`.

    Example:
        >>> redact_bytes(b"password=hunter22")[0]
        b'password=[REDACTED:password#20d2fe5e369d]'
        >>> redact_bytes(b"mail bob@example.com", pii=["email"])[0]
        b'mail [REDACTED:email#5ff860bf1190]'
    """
    classes = _check_pii(pii)
    found = _scan(data)
    escaped = bool(_has_escaped_slash(data))
    if not found and not escaped and not classes:
        return data, []
    if secrets:
        out, hits, esc = _redact_secrets(data, found)
        escaped = escaped or esc
    else:
        out, hits = data, []
        escaped = escaped or any(not _BY_TRIGGER[i] for i, _p, _e in found)
    if classes:
        out, more = _redact_pii(out, classes)
        hits.extend(more)
    if escaped:
        plain = _unescape_ascii(data)
        if plain != data:
            clean, plain_hits = redact_bytes(plain, pii=classes, secrets=secrets)
            if plain_hits:  # stored decoded (the same JSON value), the secrets replaced
                return clean, plain_hits
    if not hits:
        return data, []
    return out, hits


def redact_text(
    text: str, *, pii: Iterable[str] | str | None = (), secrets: bool = True
) -> tuple[str, list[Redaction]]:
    """:func:`redact_bytes` for a ``str`` (UTF-8 round trip)."""
    clean, hits = redact_bytes(text.encode("utf-8", "surrogatepass"), pii=pii, secrets=secrets)
    if not hits:
        return text, hits
    return clean.decode("utf-8", "surrogatepass"), hits


def _walk_strings(x: Any, field_name: str, out: list[tuple[str, str]]) -> None:
    if isinstance(x, str):
        if "[REDACTED:" in x:
            out.append((field_name, x))
    elif isinstance(x, dict):
        for k, v in x.items():
            _walk_strings(v, f"{field_name}.{k}", out)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _walk_strings(v, f"{field_name}[{i}]", out)


def locate_redactions(traj: Trajectory, hits: list[Redaction]) -> list[Redaction]:
    """Where each redacted secret landed in ``traj`` (step, field); ``field="raw"`` for secrets
    that sat in parts of the log the trajectory does not keep."""
    found: list[Redaction] = []
    seen: set[str] = set()

    def scan(step_idx: int | None, name: str, value: Any) -> None:
        spots: list[tuple[str, str]] = []
        _walk_strings(value, name, spots)
        for fname, text in spots:
            for m in PLACEHOLDER_RE.finditer(text):
                found.append(Redaction(m.group(1), m.group(2), step_idx, fname))
                seen.add(m.group(2))

    scan(None, "task.instruction", traj.task.instruction)
    scan(None, "task.metadata", traj.task.metadata)
    for s in traj.steps:
        scan(s.index, "thought", s.thought)
        scan(s.index, "message", s.message)
        if s.action is not None:
            scan(s.index, "action.params", s.action.params)
        if s.observation is not None:
            scan(s.index, "observation.output", s.observation.output)
            scan(s.index, "observation.error", s.observation.error)
        scan(s.index, "metadata", s.metadata)
    scan(None, "outcome.reason", traj.outcome.reason)
    scan(None, "metadata", traj.metadata)
    found.extend(h for h in hits if h.fingerprint not in seen)
    return found

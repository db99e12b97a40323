"""Secret redaction for raw logs and trajectories.

Every log goes through :func:`redact_bytes` *before* it is parsed, so every string of the
resulting trajectory (thoughts, commands, outputs, metadata) and the raw blob that is
stored next to it are already clean. A secret is replaced by a placeholder that names its
kind and a keyed fingerprint::

    sk-proj-AbC...xyz  ->  [REDACTED:openai_key#3f2a1b9c0d4e]

The fingerprint is the first 12 hex digits of HMAC-SHA256(key, secret). Under one key the
same secret always gets the same placeholder, so two leaks of one key can be correlated and
re-ingesting a log gives the same trajectory (the store deduplicates on content). Without the
key nothing can be learnt from it: a bare hash would let anyone run a wordlist
(``Summer2024!`` from its sha256) against a shared dataset. The key is:

* for a store's ingest, the store's own (``<store>/redaction.key``, 32 random bytes written
  when first needed, see :attr:`knowlyr.store.Store.redaction_key`): placeholders correlate
  within a store and nowhere else. Whoever holds that file can test guesses against the
  store's placeholders, so share a store's tables and exports, not that file; deleting it
  changes the placeholders of later ingests only (the same log then gets a new trajectory);
* otherwise the installation's (:func:`installation_key`): ``$KNOWLYR_REDACTION_KEY``, else
  ``~/.config/knowlyr/redaction.key`` (created on first use, mode 0600), else, where that
  cannot be written, a random key for the process (placeholders then differ between runs);
* or the one given: ``RedactionPolicy(key=...)`` / ``redact_bytes(..., key=...)``.

What is a secret (:mod:`knowlyr.recorder.secret_rules`): keys recognisable by their format
(``sk-``, ``AKIA``, ``ghp_``, ``npm_``, ``sk_live_``, ``SG.``, PEM private keys...) always,
also wrapped over lines or written in base64; values a secret's context gives away
(``PGPASSWORD=``, ``"client_secret":``, ``--password X``, ``https://user:pw@host``,
``Authorization: Basic``, ``mysql -pX``, ``sshpass -p X``, ``curl -u user:X``,
``AccountKey=``), unless they are code or test data: ``password = self.password``,
``password: Optional[str] = None``, a placeholder (``'password': 'mypassword'``,
``http://user:pass@example.com``), a lowercase phrase quoted in test code. So redacting a log
does not rewrite the tests and patches in it, and a weak but real ``PASSWORD=hunter22`` is
still redacted.

Redaction works on the JSON bytes and keeps them valid JSON: a replaced span never cuts an
escape sequence in two. A secret whose characters the JSON spells as escapes
(``"sk-\\u0061bc..."``, ``https:\\/\\/user:pw@...``, or escaped twice in JSON inside JSON) is
found in a decoded view of the log, and its span replaced in the bytes as written. Error
messages that name files (an unreadable file whose name holds a key) are redacted the same
way (:func:`redact_text`).

Personal data (e-mail addresses, phone numbers, IPv4/IPv6 addresses) is redacted only when
asked for: ``redact_bytes(data, pii=("email", "phone", "ip"))``, or a
:class:`RedactionPolicy` passed as ``redact=`` to the recorder and the store's ingest
(``knowlyr ingest --redact-pii email,phone,ip``).

Speed: one pass over the bytes finds every rule's literal triggers (``sk-``, ``AKIA``,
``password=``...) with a SIMD Aho-Corasick automaton (``ahocorasick-rs``); each rule is then
tried only at its triggers' positions.

Example:
    >>> clean, hits = redact_bytes(b'{"cmd": "export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuv"}')
    >>> b"sk-abc" in clean, hits[0].kind
    (False, 'openai_key')
    >>> redact_text("PGPASSWORD=Xk9mQ2vL7pR psql")[0][:29]
    'PGPASSWORD=[REDACTED:password'
    >>> redact_text("'http://user:pass@example.com'")[1]  # test data
    []
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from knowlyr.recorder import secret_rules as sr
from knowlyr.recorder.pii_rules import PII_CLASSES, PII_RULES, is_pii
from knowlyr.recorder.redaction_key import fingerprint, installation_key

if TYPE_CHECKING:
    from knowlyr.trajectory import Trajectory

__all__ = [
    "PII_CLASSES",
    "PLACEHOLDER_RE",
    "Redaction",
    "RedactionPolicy",
    "fingerprint",
    "installation_key",
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
        fingerprint: first 12 hex digits of HMAC-SHA256(key, secret) (module docstring).
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


# -- keys -----------------------------------------------------------------------------------

PLACEHOLDER_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)#([0-9a-f]{12})\]")


# -- finding --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Hit:
    start: int
    end: int
    kind: str
    secret: bytes


Handler = Callable[[bytes, int, bool, int], "_Hit | list[_Hit] | None"]


def _format_handler(rule: sr.Format) -> Handler:
    def find(data: bytes, pos: int, json: bool, _depth: int) -> _Hit | None:
        if not sr.starts_token(data, pos, json):
            return None
        end = rule.match(data, pos)
        if end is None:
            return None
        return _Hit(pos, end, rule.kind, sr.BR_RE.sub(b"", data[pos:end]))

    return find


def _pem(data: bytes, pos: int, _json: bool, _depth: int) -> _Hit | None:
    m = sr.PEM_RE.match(data, pos)
    return None if m is None else _Hit(pos, m.end(), "private_key", m.group(0))


def _key_value(data: bytes, pos: int, json: bool, _depth: int) -> _Hit | None:
    """KEY=value, KEY: value, "KEY": "value", --key value, aws configure set KEY value."""
    m = sr.KEY_SEP_RE.match(data, pos)  # the rest of the key, then ":" / "=" (most hits end here)
    spaced = m is None
    if spaced:
        m = sr.KEY_SPACE_RE.match(data, pos)
        if m is None:
            return None
    s = sr.key_start(data, pos)
    if spaced and data[s : s + 1] != b"-" and data[max(0, s - 14) : s] != b"configure set ":
        return None  # a value after a space only for a --flag or aws configure set
    if s == pos and m.end("key") - pos <= 4:
        return None  # a bare key, pass, PWD: a dict's key, a test's PASS:, the working directory
    kind = sr.key_kind(data[s : m.end("key")])
    if kind is None:
        return None
    q = m.group("q")
    span = sr.value_at(data, m.end(), q)
    if span is None:
        return None
    v0, v1 = span
    if v1 - v0 < (12 if kind == "api_token" else 4):
        return None
    fmt = _format_at(data, v0, v1)
    if fmt is not None:  # a key of a known format (followed over line breaks)
        return fmt
    if sr.keep_value(data, v0, v1, quoted=bool(q)):
        return None
    return _Hit(v0, v1, kind, data[v0:v1])


def _format_at(data: bytes, start: int, end: int) -> _Hit | None:
    """The token of a known format that starts at ``start``, if one does, to at least ``end``
    (a context's value that is itself a key: ``OPENAI_API_KEY=sk-...``)."""
    for f in sr.FORMATS:
        e = f.match(data, start)
        if e is not None:
            e = max(e, end)
            return _Hit(start, e, f.kind, sr.BR_RE.sub(b"", data[start:e]))
    return None


def _url(data: bytes, pos: int, _json: bool, _depth: int) -> _Hit | None:
    m = sr.URL_RE.match(data, pos)
    if m is None:
        return None
    found = sr.url_password(data, m)
    if found is None:
        return None
    v0, v1, host = found
    fmt = _format_at(data, v0, v1)
    if fmt is not None:
        return fmt
    if sr.keep_value(data, v0, v1, quoted=True, code=False, host=host):
        return None
    return _Hit(v0, v1, "url_credentials", data[v0:v1])


def _command(rx: re.Pattern[bytes]) -> Handler:
    """``mysql -pX``, ``sshpass -p X``, ``curl -u user:X``, ``docker login -p X``: the
    password argument of a known command."""

    def find(data: bytes, pos: int, json: bool, _depth: int) -> _Hit | None:
        if not sr.starts_token(data, pos, json):
            return None
        m = rx.match(data, pos)
        if m is None:
            return None
        q = m.group("q")
        span = sr.value_at(data, m.end(), q)
        if span is None:
            return None
        v0, v1 = span
        if sr.keep_value(data, v0, v1, quoted=bool(q), code=False):
            return None
        return _Hit(v0, v1, "password", data[v0:v1])

    return find


def _basic(data: bytes, pos: int, _json: bool, _depth: int) -> _Hit | None:
    m = sr.BASIC_RE.match(data, pos)
    if m is None:
        return None
    pw = sr.basic_credentials(m.group("v"))
    if pw is None or sr.is_placeholder(pw):
        return None
    return _Hit(m.start("v"), m.end("v"), "basic_auth", m.group("v"))


def _bearer(data: bytes, pos: int, json: bool, _depth: int) -> _Hit | None:
    if not sr.starts_token(data, pos, json):
        return None
    m = sr.BEARER_RE.match(data, pos)
    if m is None or sr.is_placeholder(m.group("v")):
        return None
    return _Hit(m.start("v"), m.end("v"), "bearer_token", m.group("v"))


def _azure(data: bytes, pos: int, _json: bool, _depth: int) -> _Hit | None:
    """An Azure connection string's ``AccountKey=`` / ``SharedAccessKey=`` value."""
    end = sr.AZURE_KEY.match(data, pos)
    if end is None:
        return None
    v0 = data.index(b"=", pos) + 1
    return _Hit(v0, end, "azure_storage_key", sr.BR_RE.sub(b"", data[v0:end]))


def _b64_hit(data: bytes, s: int, e: int, depth: int) -> _Hit | None:
    if e - s < 12:
        return None
    text = sr.b64_decode(data[s:e])
    if text is None:
        return None
    inner, _ = _find(text, json=False, depth=depth + 1)
    if not inner:
        return None
    return _Hit(s, e, inner[0].kind, inner[0].secret)


def _base64_context(data: bytes, pos: int, _json: bool, depth: int) -> list[_Hit] | None:
    """Near the word ``base64`` (``echo ... | base64``, ``base64 -d <<EOF``, ``b64decode(...)``),
    every base64 run of 16 characters or more that decodes to text holding a secret."""
    if depth >= 2:
        return None
    hits = []
    done = 0  # runs end here or before: the lines of a wrapped run are one run
    for m in sr.B64_RUN_RE.finditer(data, max(0, pos - 1024), pos + 4096):
        if m.start() < done or not sr.b64_like(m.group(0)):
            continue
        s, done = sr.b64_run(data, m.start(), m.end())
        h = _b64_hit(data, s, done, depth)
        if h is not None:
            hits.append(h)
    return hits or None


def _back(handler: Handler, k: int) -> Handler:
    """``handler`` tried ``k`` bytes before its trigger (``asic `` finds ``Basic``)."""

    def find(data: bytes, pos: int, json: bool, depth: int) -> _Hit | list[_Hit] | None:
        return handler(data, pos - k, json, depth) if pos >= k else None

    return find


def _first(*handlers: Handler) -> Handler:
    """The first of ``handlers`` that finds something at the position."""

    def find(data: bytes, pos: int, json: bool, depth: int) -> _Hit | list[_Hit] | None:
        for h in handlers:
            if (found := h(data, pos, json, depth)) is not None:
                return found
        return None

    return find


_FMT = {f.kind: _format_handler(f) for f in reversed(sr.FORMATS)}  # first of a kind
_GITHUB, _GITHUB_PAT = (_format_handler(f) for f in sr.FORMATS if f.kind == "github_token")
# Trigger -> the rule tried at its positions (``None``: a JSON escape, which makes
# redact_bytes read a decoded view of the log too). One Aho-Corasick scan per group: a scan
# runs at SIMD speed (2-5 GB/s) with a dozen to a few dozen patterns of the right mix and
# falls to ~0.5 GB/s past 64, so the triggers are few and the groups are the fastest split
# measured on agent logs (the formats in three interleaved thirds, the keys in one).
_FORMAT_GROUP: dict[bytes, Handler | None] = {
    b"-----BEGIN ": _pem,
    b"sk-": _first(_FMT["anthropic_key"], _FMT["openai_key"]),
    b"k_live_": _back(_FMT["stripe_key"], 1),
    b"k_test_": _back(_FMT["stripe_key"], 1),
    b"AKIA": _FMT["aws_access_key"],
    b"ASIA": _FMT["aws_access_key"],
    **dict.fromkeys((b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"), _GITHUB),
    b"github_pat_": _GITHUB_PAT,
    b"glpat-": _FMT["gitlab_token"],
    b"xox": _FMT["slack_token"],
    b"xapp-": _FMT["slack_token"],
    b"AIza": _FMT["google_api_key"],
    b"ya29.": _FMT["google_oauth_token"],
    b"hf_": _FMT["huggingface_token"],
    b"npm_": _FMT["npm_token"],
    b"pypi-AgEI": _FMT["pypi_token"],
    b"_v1_": _back(_FMT["digitalocean_token"], 3),
    b"shpat_": _FMT["shopify_token"],
    b"shpss_": _FMT["shopify_token"],
    b"SG.": _FMT["sendgrid_key"],
    b"eyJ": _FMT["jwt"],
    b"AccountKey=": _azure,
    b"SharedAccessKey=": _azure,
    b"://": _url,
    b"mysql": _command(sr.MYSQL_RE),
    b"sshpass": _command(sr.SSHPASS_RE),
    b"curl": _command(sr.CURL_RE),
    b"docker": _command(sr.DOCKER_LOGIN_RE),
    b"asic ": _back(_basic, 1),
    b"earer": _back(_bearer, 1),
    b"base64": _base64_context,
    b"b64decode": _base64_context,
    # JSON may spell printable ASCII as \u0020-\u007e (and "/" as "\/", its own scan: as a
    # trigger here the backslash of every "\n" would make this scan 4x slower)
    b"\\u00": None,
}
_KEY_GROUP: dict[bytes, Handler | None] = dict.fromkeys(sr.key_triggers(), _key_value)
_GROUPS = [list(_FORMAT_GROUP.items())[i::3] for i in range(3)] + [list(_KEY_GROUP.items())]


def _make_scanner(
    groups: list[list[tuple[bytes, Handler | None]]],
) -> Callable[[bytes], list[tuple[int, Handler | None]]]:
    """Every trigger position of every group, in order, with its rule: a SIMD Aho-Corasick
    scan (ahocorasick-rs) per group when installed, else ``bytes.find`` loops."""
    try:
        import ahocorasick_rs
    except ImportError:  # pragma: no cover - exercised only without the optional accelerator
        table = [(t, h) for g in groups for t, h in g]

        def scan_slow(data: bytes) -> list[tuple[int, Handler | None]]:
            hits = []
            for t, h in table:
                pos = data.find(t)
                while pos >= 0:
                    hits.append((pos, h))
                    pos = data.find(t, pos + 1)
            hits.sort(key=lambda x: x[0])
            return hits

        return scan_slow
    scanners = []
    for g in groups:
        ac = ahocorasick_rs.BytesAhoCorasick(
            [t for t, _h in g], matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST
        )
        scanners.append((ac.find_matches_as_indexes, [h for _t, h in g]))

    def scan(data: bytes) -> list[tuple[int, Handler | None]]:
        hits: list[tuple[int, Handler | None]] = []
        for find, handlers in scanners:
            hits.extend((pos, handlers[i]) for i, pos, _end in find(data))
        if len(scanners) > 1:
            hits.sort(key=lambda x: x[0])
        return hits

    return scan


_scan = _make_scanner(_GROUPS)
try:
    import ahocorasick_rs as _acrs

    _escaped_slashes = _acrs.BytesAhoCorasick([b"\\/"]).find_matches_as_indexes
except ImportError:  # pragma: no cover

    def _escaped_slashes(data: bytes) -> list[tuple[int, int, int]]:
        out, i = [], data.find(b"\\/")
        while i >= 0:
            out.append((0, i, i + 2))
            i = data.find(b"\\/", i + 2)
        return out


_PRINTABLE_HIGH = (b"2", b"3", b"4", b"5", b"6", b"7")


def _find(data: bytes, *, json: bool = True, depth: int = 0) -> tuple[list[_Hit], list[int]]:
    """The secrets in ``data``, in order, and where it spells ASCII with ``\\u00XX`` escapes."""
    hits: list[_Hit] = []
    escapes: list[int] = []
    last = 0
    for pos, handler in _scan(data):
        if handler is None:
            if data[pos + 4 : pos + 5] in _PRINTABLE_HIGH:  # \u0020-\u007f, not \u00e9
                escapes.append(pos)
            continue
        if pos < last:
            continue
        h = handler(data, pos, json, depth)
        if h is None:
            continue
        for x in h if isinstance(h, list) else (h,):
            if x.start >= last:
                hits.append(x)
                last = x.end
    return hits, escapes


def _find_pii(data: bytes, classes: tuple[str, ...]) -> list[_Hit]:
    return [
        _Hit(m.start(), m.end(), kind, m.group(0))
        for name in classes
        for kind, rx in PII_RULES[name]
        for m in rx.finditer(data)
        if is_pii(kind, m.group(0))
    ]


def redaction_rules() -> list[str]:
    """The kinds of secret that are redacted."""
    kinds = {f.kind for f in sr.FORMATS}
    kinds |= {"private_key", "password", "api_token", "aws_secret_key", "url_credentials"}
    kinds |= {"basic_auth", "bearer_token", "azure_storage_key"}
    return sorted(kinds)


# -- the decoded view -----------------------------------------------------------------------

# an escape of printable ASCII (other than '"', '\' and DEL) or of "/", at any depth of
# JSON-in-JSON (\u0061, \\u0061, \/, \\\/)
_ESCAPE = re.compile(rb"\\+(?:u00[2-7][0-9A-Fa-f]|/)")


def _decoded(data: bytes, escapes: list[int]) -> bytes:
    """``data`` with :data:`_ESCAPE` escapes decoded (what :class:`_View` reads, without the
    offsets), given where their last backslash is: one ``replace`` per distinct escape,
    longest first."""
    units = set()
    for p in escapes:
        s = p
        while s > 0 and data[s - 1] == 0x5C:
            s -= 1
        units.add(data[s : p + (6 if data[p + 1 : p + 2] == b"u" else 2)])
    for esc in sorted(units, key=len, reverse=True):
        if esc[-1:] == b"/":
            data = data.replace(esc, b"/")
            continue
        c = int(esc[-2:], 16)
        if c not in (0x22, 0x5C, 0x7F):
            data = data.replace(esc, bytes((c,)))
    return data


class _View:
    """``data`` with :data:`_ESCAPE` escapes decoded, and the way back to ``data``'s offsets."""

    def __init__(self, data: bytes):
        parts: list[bytes] = []
        self.view_at: list[int] = []  # view offset of each decoded escape
        self.data_at: list[int] = []  # where that escape starts in data
        self.shift: list[int] = []  # data offset minus view offset after it
        last = shift = 0
        for m in _ESCAPE.finditer(data):
            esc = m.group(0)
            c = b"/" if esc[-1:] == b"/" else bytes((int(esc[-2:], 16),))
            if c in (b'"', b"\\", b"\x7f"):
                continue
            parts.append(data[last : m.start()])
            self.view_at.append(m.start() - shift)
            self.data_at.append(m.start())
            parts.append(c)
            shift += m.end() - m.start() - 1
            self.shift.append(shift)
            last = m.end()
        parts.append(data[last:])
        self.text = b"".join(parts)

    def to_data(self, pos: int) -> int:
        """Where the character at view offset ``pos`` starts in ``data`` (for an escape, its
        first backslash); ``pos`` may be the view's end."""
        i = bisect.bisect_right(self.view_at, pos) - 1
        if i < 0:
            return pos
        if self.view_at[i] == pos:
            return self.data_at[i]
        return pos + self.shift[i]


def _apply(data: bytes, hits: list[_Hit], key: bytes | None) -> tuple[bytes, list[Redaction]]:
    """``data`` with each hit's span replaced by its placeholder (overlapping spans merged)."""
    hits.sort(key=lambda h: (h.start, -h.end))
    merged: list[_Hit] = []
    for h in hits:
        if merged and h.start < merged[-1].end:
            merged[-1].end = max(merged[-1].end, h.end)
        else:
            merged.append(_Hit(h.start, h.end, h.kind, h.secret))
    k = key or installation_key()
    parts: list[bytes] = []
    out: list[Redaction] = []
    last = 0
    for h in merged:
        fp = fingerprint(h.secret, k)
        out.append(Redaction(h.kind, fp))
        parts.append(data[last : h.start])
        parts.append(b"[REDACTED:" + h.kind.encode() + b"#" + fp.encode() + b"]")
        last = h.end
    parts.append(data[last:])
    return b"".join(parts), out


def _check_pii(pii: Iterable[str] | str | None) -> tuple[str, ...]:
    if not pii:  # None, "", (): every log's redaction asks, most with none
        return ()
    names = [x.strip().lower() for x in (pii.split(",") if isinstance(pii, str) else pii)]
    names = [x for x in names if x]
    bad = [x for x in names if x not in PII_RULES]
    if bad:
        raise ValueError(
            f"unknown PII class {bad[0]!r}: choose from {', '.join(PII_CLASSES)} "
            "(comma-separated, e.g. email,phone,ip)"
        )
    return tuple(sorted(set(names)))


@dataclass(frozen=True, slots=True)
class RedactionPolicy:
    """What to redact: secrets (on by default) and personal-data classes (off by default),
    and the key of the placeholders' fingerprints.

    Picklable and hashable, so the recorder's worker processes get it as it is. It is false
    when it redacts nothing.

    Attributes:
        secrets: API keys, tokens, passwords, private keys (:func:`redaction_rules`).
        pii: personal-data classes from :data:`PII_CLASSES` (``email``, ``phone``, ``ip``).
        key: the fingerprint key (module docstring); ``None``: :func:`installation_key`. Never
            shown by ``repr``.

    Example:
        >>> p = RedactionPolicy(pii=("email",))
        >>> p.redact_text("mail bob@example.com")[0][:21]
        'mail [REDACTED:email#'
    """

    secrets: bool = True
    pii: tuple[str, ...] = ()
    key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pii", _check_pii(self.pii))
        if self.key is not None and not isinstance(self.key, bytes):
            raise TypeError(f"key must be bytes, got {type(self.key).__name__}")

    def __bool__(self) -> bool:
        return self.secrets or bool(self.pii)

    def with_key(self, key: bytes) -> RedactionPolicy:
        """This policy with ``key`` for its fingerprints (a store's key at ingest)."""
        return replace(self, key=key)

    def redact_bytes(self, data: bytes) -> tuple[bytes, list[Redaction]]:
        """:func:`redact_bytes` under this policy."""
        return redact_bytes(data, pii=self.pii, secrets=self.secrets, key=self.key)

    def redact_text(self, text: str) -> tuple[str, list[Redaction]]:
        """:func:`redact_text` under this policy."""
        return redact_text(text, pii=self.pii, secrets=self.secrets, key=self.key)


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
    return replace(base, pii=tuple(set(base.pii) | set(extra)))


def _redact(
    data: bytes, classes: tuple[str, ...], secrets: bool, key: bytes | None, json: bool
) -> tuple[bytes, list[Redaction]]:
    if secrets:
        hits, escapes = _find(data, json=json)
    else:
        hits = []
        escapes = [
            p for p, h in _scan(data) if h is None and data[p + 4 : p + 5] in _PRINTABLE_HIGH
        ]
    if classes:
        hits += _find_pii(data, classes)
    escapes += [p for _i, p, _e in _escaped_slashes(data)]
    if escapes:
        text = _decoded(data, escapes)
        if text != data:

            def find(text: bytes) -> list[_Hit]:
                more = _find(text, json=json)[0] if secrets else []
                return more + _find_pii(text, classes) if classes else more

            if more := find(text):  # rare: map the spans back to the bytes as written
                view = _View(data)
                if view.text != text:  # pragma: no cover - the two decodings agree
                    more = find(view.text)
                for h in more:
                    hits.append(_Hit(view.to_data(h.start), view.to_data(h.end), h.kind, h.secret))
    if not hits:
        return data, []
    return _apply(data, hits, key)


def redact_bytes(
    data: bytes,
    *,
    pii: Iterable[str] | str | None = (),
    secrets: bool = True,
    key: bytes | None = None,
) -> tuple[bytes, list[Redaction]]:
    """Replace every secret in ``data`` (a raw log or one JSONL line) by a placeholder.

    One pass finds every trigger (``sk-``, ``AKIA``, ``password=``...); the rule's pattern is
    then matched at that position only, so cost grows with the log's size, not the number
    of rules.

    Args:
        data: the bytes (JSON or text).
        pii: personal-data classes to redact too (:data:`PII_CLASSES`: ``email``, ``phone``,
            ``ip``); none by default.
        secrets: redact secrets (``False`` with ``pii`` redacts only personal data).
        key: the fingerprint key; ``None``: :func:`installation_key`.

    Returns:
        The cleaned bytes (``data`` itself when nothing matched) and one :class:`Redaction`
        per placeholder, with ``field="raw"`` (the caller locates them in the trajectory).

    Raises:
        ValueError: for a PII class that is not one of :data:`PII_CLASSES`.

    Example:
        >>> redact_bytes(b"password=hunter22", key=b"k")[0]
        b'password=[REDACTED:password#56720ef24d4c]'
        >>> redact_bytes(b"mail bob@example.com", pii=["email"], key=b"k")[0]
        b'mail [REDACTED:email#3c106b25062f]'
    """
    return _redact(data, _check_pii(pii), secrets, key, json=True)


def redact_text(
    text: str,
    *,
    pii: Iterable[str] | str | None = (),
    secrets: bool = True,
    key: bytes | None = None,
) -> tuple[str, list[Redaction]]:
    """:func:`redact_bytes` for a ``str`` of plain text (a path, an error message): a
    backslash in it is a character, never the start of an escape."""
    data = text.encode("utf-8", "surrogatepass")
    clean, hits = _redact(data, _check_pii(pii), secrets, key, json=False)
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

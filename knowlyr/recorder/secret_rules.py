"""The secret rules behind :mod:`knowlyr.recorder.redact`: what a secret looks like, and when
a value that sits where a secret would is test data instead.

Two families of rule:

* **Formats** (:data:`FORMATS`): a key recognisable by itself (``sk-...``, ``AKIA...``,
  ``ghp_...``, ``npm_...``, ``SG....``, ``sk_live_...``, PEM private keys, JWTs...). Always
  redacted, wherever they are, test code included. A format token wrapped over lines (a
  terminal's wrap, ``fold``) is followed across the line breaks. Base64 text is decoded and
  searched near the word ``base64`` (``echo ... | base64 -d``, ``base64 <<EOF``,
  ``b64decode(...)``); a run that hides a secret is replaced whole. (A base64 value after a
  secret's key, as in a Kubernetes secret, is a context value like any other.)
* **Contexts**: a value that is a secret because of where it is: after a key that names a
  secret (``DB_PASSWORD=``, ``PGPASSWORD=``, ``"client_secret":``, ``X-Auth-Token:``,
  ``--password X``, ``aws configure set aws_secret_access_key V``), in a URL's user info
  (``https://user:pw@host``), an ``Authorization: Basic`` header, ``mysql -pX``,
  ``sshpass -p X``, ``curl -u user:X`` or ``docker login -p X``.

A context value is kept, as test data, when it is one of (:func:`keep_value`):

1. code, not a literal: ``password = self.password``, ``token = request.headers.get(...)``,
   ``password: Optional[str] = None``, ``PWD=/home/me``, ``PASSWORD=${DB_PASSWORD}``;
2. a placeholder: made only of placeholder words (:data:`PLACEHOLDER_WORDS`: ``password``,
   ``secret``, ``test``, ``user``, ``my``, ``some``, ``new``, ``foo``, ``example``, ``changeme``,
   ``admin``, ``postgres``...), runs like ``abcdef`` / ``qwerty`` / ``xxxx`` and separators,
   no digit (``pass``, ``mypassword``, ``some:password``, ``new_password``,
   ``abcdefghijkl``), or elided or templated (``pbkdf2_sha256$...``, ``<your-key>``, ``***``);
3. in a URL whose host is a reserved documentation name (``example.com``, ``*.example``,
   ``*.test``, ``*.invalid``: RFC 2606), a password that does not look random;
4. in test code (test markers such as ``def test``, ``assert``, ``tests/`` within 1,500 bytes),
   a quoted literal of lowercase words only, no digit or capital (``"X-Secret": "open sesami"``,
   ``password = "pass:word"``), or of placeholder words with short digit runs (``"test123"``).

Everything else is redacted: a value that looks random (``Qz8#vL2!mK9x``), or a human one
(``hunter22``, ``Summer2024!``, ``Password123!`` outside quoted test code). A default or a
placeholder word is public knowledge: keeping ``postgres`` or ``changeme`` discloses nothing
an attacker would not try first.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

__all__ = [
    "FORMATS",
    "PLACEHOLDER_WORDS",
    "Format",
    "keep_value",
    "looks_random",
]

_BSL = 0x5C  # a backslash
# a line break, raw or JSON-escaped at any depth (\n, \\n, \r\n...)
BR = rb"(?:\r?\n|(?:\\+r)?\\+n)"
BR_RE = re.compile(BR)
_WORDCH = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def odd_backslashes(data: bytes, end: int) -> bool:
    """Whether the run of backslashes ending at ``data[end]`` (inclusive) is odd."""
    n = 0
    while end >= 0 and data[end] == _BSL:
        n += 1
        end -= 1
    return n % 2 == 1


def starts_token(data: bytes, pos: int, json: bool = True) -> bool:
    """Whether a token may start at ``pos``: not inside a word, but right after a JSON escape
    (``\\n``, ``\\t``, ``\\u2192``), a literal backslash (``C:\\\\keys\\\\AKIA...``) or any
    non-ASCII character (``→AKIA...``, a non-breaking space). In JSON (``json``) the letter
    of an escape is not a token's first letter (the ``n`` of ``\\npm_...`` is the newline's)."""
    if pos == 0:
        return True
    c = data[pos - 1]
    if c == _BSL:
        if not json or not odd_backslashes(data, pos - 1):
            return True  # a literal backslash (escaped as \\ in JSON)
        return data[pos] not in b"nrtbfu"
    if c not in _WORDCH:
        return True
    if not json or pos < 2:
        return False
    # right after \n, \t... or \u2192, escaped once or more (\\n in JSON inside JSON)
    if c in b"nrtbf" and data[pos - 2] == _BSL:
        return True
    return (
        pos >= 6
        and data[pos - 5 : pos - 4] == b"u"
        and data[pos - 6] == _BSL
        and _is_hex(data[pos - 4 : pos])
    )


def _is_hex(b: bytes) -> bool:
    return all(c in b"0123456789abcdefABCDEF" for c in b)


# -- formats ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Format:
    """A key recognisable by itself: ``prefix`` then ``min``..``max`` characters of ``body``
    (a character class), optionally validated by ``check`` (the whole token)."""

    kind: str
    triggers: tuple[bytes, ...]
    prefix: bytes
    body: bytes
    min: int
    max: int | None = None
    check: Callable[[bytes], bool] | None = None
    strict: re.Pattern[bytes] = field(init=False)
    wrapped: re.Pattern[bytes] = field(init=False)
    run: re.Pattern[bytes] = field(init=False)
    one: re.Pattern[bytes] = field(init=False)

    def __post_init__(self) -> None:
        self.strict = re.compile(self.prefix + b"(" + self.body + b"{%d,})" % self.min)
        limit = (self.max or 512) + 8
        self.wrapped = re.compile(
            self.prefix
            + b"((?:"
            + self.body
            + b"|"
            + BR
            + b"(?="
            + self.body
            + b")){1,%d})" % limit
        )
        self.run = re.compile(self.body + b"+")
        self.one = re.compile(self.body)

    def match(self, data: bytes, pos: int) -> int | None:
        """End of the token starting at ``pos`` (``None`` when there is none), followed over
        the line breaks of a wrapped token."""
        m = self.strict.match(data, pos)
        if m is not None and (self.max is None or len(m.group(1)) <= self.max):
            if self.check is not None and not self.check(m.group(0)):
                return None
            room = None if self.max is None else self.max - len(m.group(1))
            return self._continue(data, m.end(), room)
        w = self.wrapped.match(data, pos)  # the body split by line breaks
        if w is None:
            return None
        body, end = self._trim(data, w.start(1), w.end())
        if len(body) < self.min or (self.max is not None and len(body) > self.max):
            return None
        if self.max is not None and self.one.match(data, end):  # longer than its format
            return None
        if self.check is not None and not self.check(data[pos : w.start(1)] + body):
            return None
        return end

    def _trim(self, data: bytes, start: int, end: int) -> tuple[bytes, int]:
        """The joined body of a wrapped match and where it really ends: before the first line
        that does not look like the rest of a token (:func:`_tokenish`)."""
        parts = BR_RE.split(data[start:end])
        keep = [parts[0]]
        pos = start + len(parts[0])
        for part in parts[1:]:
            br = BR_RE.match(data, pos)
            assert br is not None
            nxt = data[br.end() + len(part) : br.end() + len(part) + 1]
            if not _tokenish(part, fills_line=nxt in _LINE_END):
                break
            keep.append(part)
            pos = br.end() + len(part)
        return b"".join(keep), pos

    def _continue(self, data: bytes, end: int, room: int | None) -> int:
        """``end`` moved over the lines that continue a token already long enough (it was
        wrapped at a terminal's width), as long as they look like one (:func:`_tokenish`)."""
        for _ in range(8):
            br = BR_RE.match(data, end)
            if br is None:
                break
            r = self.run.match(data, br.end())
            if r is None:
                break
            part = r.group(0)
            if not _tokenish(part, fills_line=data[r.end() : r.end() + 1] in _LINE_END):
                break
            if room is not None:
                if len(part) > room:
                    break
                room -= len(part)
            end = r.end()
        return end


# what may follow a line that is all token: its end, the end of the JSON string, an escape
_LINE_END = (b"", b'"', b"'", b"\\", b"\r", b"\n", b"`")


def _tokenish(part: bytes, fills_line: bool) -> bool:
    """Whether a line's start is the rest of a wrapped token rather than a word or a command:
    with the line to itself, 4 characters or more with a digit or mixed case, or 16 or more;
    followed by more text on its line, 8 or more with a digit and a letter."""
    digit = any(48 <= c <= 57 for c in part)
    if not fills_line:
        return len(part) >= 8 and digit and part.upper() != part.lower()
    if len(part) < 4:
        return False
    mixed = part != part.lower() and part != part.upper()
    return digit or mixed or len(part) >= 16


def _jwt(token: bytes) -> bool:
    parts = token.split(b".")
    return len(parts) == 3 and all(len(p) >= 8 for p in parts) and parts[1].startswith(b"eyJ")


def _sendgrid(token: bytes) -> bool:
    parts = token.split(b".")
    return len(parts) == 3 and len(parts[1]) == 22 and len(parts[2]) == 43


_B62 = rb"[A-Za-z0-9]"
_B62_ = rb"[A-Za-z0-9_\-]"
FORMATS: list[Format] = [
    Format("anthropic_key", (b"sk-ant-",), rb"sk-ant-", _B62_, 16),
    Format("openai_key", (b"sk-",), rb"sk-(?!ant-)(?:proj-|svcacct-|admin-)?", _B62_, 20),
    Format(
        "stripe_key",
        (b"sk_live_", b"sk_test_", b"rk_live_", b"rk_test_"),
        rb"[sr]k_(?:live|test)_",
        _B62,
        16,
    ),
    Format("aws_access_key", (b"AKIA", b"ASIA"), rb"(?:AKIA|ASIA)", rb"[0-9A-Z]", 16, 16),
    Format("github_token", (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"), rb"gh[pousr]_", _B62, 30),
    Format("github_token", (b"github_pat_",), rb"github_pat_", rb"[A-Za-z0-9_]", 22),
    Format("gitlab_token", (b"glpat-",), rb"glpat-", _B62_, 20),
    Format(
        "slack_token",
        (b"xoxb-", b"xoxp-", b"xoxa-", b"xoxo-", b"xoxs-", b"xoxr-", b"xapp-"),
        rb"x(?:ox[abposr]|app)-",
        rb"[A-Za-z0-9\-]",
        10,
    ),
    Format("google_api_key", (b"AIza",), rb"AIza", _B62_, 35, 35),
    Format("google_oauth_token", (b"ya29.",), rb"ya29\.", _B62_, 20),
    Format("huggingface_token", (b"hf_",), rb"hf_", _B62, 30),
    Format("npm_token", (b"npm_",), rb"npm_", _B62, 36, 36),
    Format("pypi_token", (b"pypi-AgEIcHlwaS5vcmc",), rb"pypi-AgEIcHlwaS5vcmc", _B62_, 20),
    Format(
        "digitalocean_token",
        (b"dop_v1_", b"doo_v1_", b"dor_v1_"),
        rb"do[opr]_v1_",
        rb"[a-f0-9]",
        64,
        64,
    ),
    Format(
        "shopify_token",
        (b"shpat_", b"shpss_", b"shpca_", b"shppa_"),
        rb"shp(?:at|ss|ca|pa)_",
        rb"[a-fA-F0-9]",
        32,
        32,
    ),
    Format("sendgrid_key", (b"SG.",), rb"SG\.", rb"[A-Za-z0-9_\-.]", 66, 66, _sendgrid),
    Format("jwt", (b"eyJ",), rb"eyJ", rb"[A-Za-z0-9_\-.]", 24, None, _jwt),
]


# -- PEM private keys ------------------------------------------------------------------------

# BEGIN line, then lines of base64 (or armour headers: Proc-Type, DEK-Info, Version), each
# running to its line's end, then the END line if it is there (`head` of a key has none); no
# length limit. Each line may start with a diff's +/-/> and a comment's # or // (a key in a
# patch, a quoted or commented-out key).
_PEM_MARK = rb"[ \t]*(?:[+\->][ \t]*)?(?:(?:#|//|\*)[ \t]*)?"
_PEM_LINE = (
    rb"(?:"
    + BR
    + _PEM_MARK
    + rb"(?:[A-Za-z0-9+/=]+|[A-Z][A-Za-z\-]+: [^\r\n\\\"]*)(?=[ \t]*(?:"
    + BR
    + rb"|[\"'\\]|$)))"
)
PEM_RE = re.compile(
    rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    + _PEM_LINE
    + rb"*(?:(?:"
    + BR
    + rb")+"
    + _PEM_MARK
    + rb"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
)

# -- base64 ----------------------------------------------------------------------------------

_TEXT_BYTES = bytes(range(32, 127)) + b"\t\n\r"
_CONTROL_BYTES = bytes(c for c in range(32) if c not in b"\t\n\r") + b"\x7f"
_B64CH = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
B64_RUN_RE = re.compile(rb"[A-Za-z0-9+/]{20,}")
_B64_CHARS = re.compile(rb"[A-Za-z0-9+/]*")


def b64_like(run: bytes) -> bool:
    """Whether a run of base64 characters looks like encoded data rather than a path or a
    word: upper and lower case and a digit, and no ``/`` at either end."""
    return (
        run[:1] != b"/"
        and run[-1:] != b"/"
        and any(48 <= c <= 57 for c in run)
        and run.upper() != run
        and run.lower() != run
    )


def b64_run(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The base64 run holding ``data[pos:end]``, over the line breaks of a wrapped blob
    (``base64`` wraps at 76 characters, PEM at 64)."""
    s = pos
    while True:
        while s > 0 and data[s - 1] in _B64CH:
            s -= 1
        if s > 0 and data[s - 1] == _BSL and odd_backslashes(data, s - 1):
            s += 1  # the letter of an escape (\n) is not base64
        b = _br_before(data, s)
        if b is None:
            break
        t = b
        while t > 0 and data[t - 1] in _B64CH:
            t -= 1
        if (b - t) not in (64, 76) or (data[t - 1 : t] == b"\\" and odd_backslashes(data, t - 1)):
            break
        s = t
    e = end
    n = len(data)
    while True:
        e = _B64_CHARS.match(data, e).end()  # type: ignore[union-attr]
        line = e - _line_start(data, s, e)
        br = BR_RE.match(data, e)
        if br is None or line not in (64, 76) or br.end() >= n or data[br.end()] not in _B64CH:
            break
        e = br.end()
    while e < n and data[e] == ord("=") and e - s < 1 << 20:
        e += 1
    return s, e


def _line_start(data: bytes, s: int, e: int) -> int:
    last = None
    for m in BR_RE.finditer(data, s, e):
        last = m
    return s if last is None else last.end()


def _br_before(data: bytes, s: int) -> int | None:
    """Start of a line break that ends right at ``s``, if there is one."""
    for w in (1, 2, 3, 4, 6, 8):
        if s - w >= 0 and BR_RE.fullmatch(data, s - w, s):
            return s - w
    return None


def b64_decode(run: bytes) -> bytes | None:
    """The bytes a base64 run spells (line breaks dropped), ``None`` when it is not text."""
    body = BR_RE.sub(b"", run).rstrip(b"=")
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    try:
        out = base64.b64decode(body + b"=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return None
    # text (a secret's carrier): UTF-8 without control characters, or printable ASCII with 5%
    # slack for the ragged bytes at a run's ends; binary data (an image) and words read as
    # base64 are not
    if not out:
        return None
    try:
        out.decode("utf-8")
    except UnicodeDecodeError:
        return None if len(out.translate(None, _TEXT_BYTES)) > len(out) // 20 else out
    return None if len(out.translate(None, _CONTROL_BYTES)) < len(out) else out


# -- contexts: key = value -------------------------------------------------------------------

_PASS_WORDS = ("password", "passwd", "passphrase", "passcode", "pass", "pwd")
_KEY_QUALIFIERS = frozenset(
    [
        "api",
        "access",
        "secret",
        "private",
        "account",
        "auth",
        "signing",
        "encryption",
        "client",
        "master",
        "license",
        "subscription",
        "app",
        "service",
        "deploy",
        "ssh",
        "shared",
        "session",
    ]
)
# Triggers of the keys that name a secret (one scan: 64 patterns, see redact.py): the long
# words as they are, the short ones only followed by what may come between a key and its
# value ("token" alone is in every log's "prompt_tokens", "pass\n" in every Python file).
# A key's closing quote escaped in JSON is \" (or, deeper, \\\").
_SEPS = (b"=", b":", b'"', b"'")


def key_triggers() -> list[bytes]:
    """The key triggers: lowercase, UPPERCASE and, for camelCase keys (``apiKey``,
    ``authToken``, ``clientSecret``, ``dbPassword``), Titlecase."""
    out = [b"passw", b"PASSW", b"Passw", b"passp", b"PASSP", b"secret", b"SECRET", b"Secret"]
    for w in (b"token", b"TOKEN", b"key", b"KEY"):
        out += [w + a for a in (*_SEPS, b" ", b"\\")]
    for w in (b"Token", b"Key"):
        out += [w + a for a in (*_SEPS, b"\\")]
    for w in (b"pwd", b"PWD"):
        out += [w + a for a in _SEPS]
    for w in (b"pass", b"PASS"):
        out += [w + a for a in (*_SEPS, b" ", b'\\"', b"\\\\")]
    return out


_IDENT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
_CAMEL = re.compile(rb"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


def key_start(data: bytes, pos: int) -> int:
    """Where the key around the trigger at ``pos`` starts (``DB_PASSWORD``, ``--db-password``,
    ``X-Auth-Token``), past the letter of a JSON escape before it (``\\nDB_PASS``)."""
    s = pos
    while s > 0 and data[s - 1] in _IDENT:
        s -= 1
    if s > 0 and data[s - 1] == _BSL and odd_backslashes(data, s - 1):
        s = s + 5 if data[s : s + 1] == b"u" else s + 1
    return min(s, pos)


@functools.lru_cache(maxsize=4096)
def key_kind(key: bytes) -> str | None:
    """The kind of secret a key names (``password``, ``api_token``, ``aws_secret_key``), or
    ``None``: its last word must be a secret's (``DB_PASSWORD``, ``PGPASSWORD``,
    ``GPG_PASSPHRASE``, ``client_secret``, ``X-Auth-Token``, ``api_key``, ``secretKey``), not
    ``password_hash``, ``max_tokens``, ``bypass`` or a bare ``key``."""
    words = [w.lower() for w in _CAMEL.findall(key.strip(b"-.").replace(b"-", b"_"))]
    words = [w.decode() for part in words for w in part.split(b"_") if w]
    if not words:
        return None
    last = words[-1].rstrip("0123456789") or words[-1]
    if "aws" in words and words[-3:] == ["secret", "access", "key"]:
        return "aws_secret_key"
    if last in ("pass", "pwd"):  # a bare PASS: is a test's verdict, PWD the working directory
        bare = len(words) == 1 and not key.startswith(b"-")
        return None if bare else "password"
    if last.endswith(("password", "passwd", "passphrase", "passcode")):
        return "password"
    if last.endswith("secret"):
        return "password"
    if last.endswith("token"):
        return "api_token"
    if last == "key":
        return "api_token" if len(words) > 1 and words[-2] in _KEY_QUALIFIERS else None
    if last.endswith(("apikey", "secretkey", "accesskey", "privatekey", "accountkey")):
        return "api_token"
    return None


# the rest of a key from its trigger on, then what separates it from its value: the key's
# closing quote (escaped at any depth), ":" / "=" / ":=" / "=>" (never "=="), the value's
# opening quote if any
_SEP = rb"\\*[\"']?[ \t]*(?::=|=>|[:=](?!=))[ \t]*(?P<q>\\*[\"'])?"
KEY_SEP_RE = re.compile(rb"(?P<key>[A-Za-z0-9_]*(?:[.\-][A-Za-z0-9_]+)*)" + _SEP)
# ... or a space: a --flag's value, or aws configure set KEY VALUE
KEY_SPACE_RE = re.compile(rb"(?P<key>[A-Za-z0-9_]*(?:[.\-][A-Za-z0-9_]+)*)[ \t]+(?P<q>\\*[\"'])?")
# a value: unquoted it stops at space, quote, backslash and shell/code punctuation, but a
# single "&" inside it (DB_PASSWORD=a&b) is part of it; quoted it runs to the closing quote
_SAFE = rb"[^\s\"'\\<>`,;&|)(\]\[{}]"
UNQUOTED_RE = re.compile(rb"(?:" + _SAFE + rb"|&(?![&\s]))+")
QUOTED_RE = {
    b'"': re.compile(rb"[^\"\\\r\n]{1,512}"),
    b"'": re.compile(rb"[^'\\\r\n]{1,512}"),
}


def value_at(data: bytes, pos: int, q: bytes | None) -> tuple[int, int] | None:
    """The span of the value starting at ``pos``: to the closing quote when it is quoted
    (``q``; a backslash, an escape in JSON, ends it too), else to the first character no
    unquoted value holds."""
    rx = QUOTED_RE[q[-1:]] if q else UNQUOTED_RE
    m = rx.match(data, pos)
    return None if m is None else (pos, m.end())


# -- contexts: other shapes ------------------------------------------------------------------

# user:password@host, from the "://"; the user may be an e-mail address
URL_RE = re.compile(
    rb"://(?P<user>[^\s:/\"'\\<>@]*(?:@[^\s:/\"'\\<>@]+)*):(?P<rest>[^\s\"'\\<>`,;|(){}\[\]]+)"
)
_HOST_RE = re.compile(rb"\[?[A-Za-z0-9.\-_:]+\]?")
# mysql/mariadb client tools: -pPASSWORD (no space), in the same command
MYSQL_RE = re.compile(
    rb"(?:mysql|mariadb)[a-z\-]*(?P<args>(?:[ \t]+(?!-p)[^\s;|&\\]+)*?)[ \t]+-p(?P<q>\\*[\"'])?(?=[^\s\"'\\])"
)
# sshpass -p PASSWORD
SSHPASS_RE = re.compile(rb"sshpass(?:[ \t]+-[a-oq-zA-Z][^\s]*)*[ \t]+-p[ \t]*(?P<q>\\*[\"'])?")
# curl -u USER:PASSWORD (--user), docker login -p PASSWORD
CURL_RE = re.compile(
    rb"curl(?:[ \t]+(?!-u\b|--user\b)[^\s;|&\\]+)*?[ \t]+(?:-u|--user)[ \t=]*"
    rb"(?P<q>\\*[\"'])?[^\s:\"'\\]+:"
)
DOCKER_LOGIN_RE = re.compile(
    rb"docker[ \t]+login(?:[ \t]+(?!-p\b)[^\s;|&\\]+)*?[ \t]+-p[ \t]+(?P<q>\\*[\"'])?"
)
# Authorization: Basic base64(user:password); Bearer TOKEN
BASIC_RE = re.compile(rb"(?i:basic)[ \t]+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")
BEARER_RE = re.compile(rb"(?i:bearer)[ \t]+(?P<v>[A-Za-z0-9_\-.=+/~]{16,})")
# Azure connection strings: the value after the "=" is the key
AZURE_KEY = Format(
    "azure_storage_key",
    (b"AccountKey=", b"SharedAccessKey="),
    rb"(?:AccountKey|SharedAccessKey)=",
    rb"[A-Za-z0-9+/=]",
    20,
)


def url_password(data: bytes, m: re.Match[bytes]) -> tuple[int, int, bytes] | None:
    """The password of the URL user info at ``m`` (its span) and the host, or ``None``. The
    password runs to the last ``@`` before the host (``p@ss@host``) and may hold ``/``, but a
    port (``host:8080/x``) is no password."""
    rest = m.group("rest")
    first = rest.find(b"@")
    if first < 0:
        return None
    slash = rest.find(b"/", first)
    at = rest.rfind(b"@", 0, slash if slash >= 0 else len(rest))
    pw = rest[:at]
    if not pw or pw.split(b"/", 1)[0].isdigit():
        return None
    host = _HOST_RE.match(rest, at + 1)
    if host is None:
        return None
    start = m.start("rest")
    return start, start + at, host.group(0)


def basic_credentials(b64: bytes) -> bytes | None:
    """The password of a ``Basic`` credential (base64 of ``user:password``), or ``None``."""
    raw = b64_decode(b64)
    if raw is None or b":" not in raw:
        return None
    return raw.split(b":", 1)[1]


# -- what is kept ----------------------------------------------------------------------------

PLACEHOLDER_WORDS = frozenset(
    [
        "password",
        "passwd",
        "pass",
        "pwd",
        "pw",
        "passphrase",
        "passcode",
        "secret",
        "secrets",
        "token",
        "tokens",
        "key",
        "keys",
        "api",
        "apikey",
        "auth",
        "user",
        "users",
        "username",
        "usr",
        "name",
        "login",
        "account",
        "my",
        "some",
        "your",
        "our",
        "the",
        "new",
        "old",
        "test",
        "tests",
        "testing",
        "tester",
        "example",
        "sample",
        "demo",
        "dummy",
        "fake",
        "mock",
        "stub",
        "placeholder",
        "default",
        "changeme",
        "change",
        "me",
        "foo",
        "bar",
        "baz",
        "qux",
        "quux",
        "spam",
        "eggs",
        "ham",
        "hello",
        "world",
        "admin",
        "administrator",
        "root",
        "guest",
        "postgres",
        "mysql",
        "redis",
        "django",
        "app",
        "db",
        "database",
        "letmein",
        "qwerty",
        "asdf",
        "good",
        "bad",
        "wrong",
        "right",
        "valid",
        "invalid",
        "correct",
        "incorrect",
        "other",
        "another",
        "first",
        "second",
        "third",
        "one",
        "two",
        "three",
        "abc",
        "xyz",
        "nopass",
        "nopassword",
        "none",
        "null",
        "empty",
        "blank",
        "value",
        "word",
        "insecure",
    ]
)
_SEQ = "abcdefghijklmnopqrstuvwxyz"
_DIGIT_SEQ = "01234567890"
# values that are templates, references or elisions, not literals
_TEMPLATE = re.compile(
    rb"^(?:\[REDACTED|\$|%|\{|<|\*+$|x+$|X+$|null$|none$|true$|false$|undefined$|required$|"
    rb"optional$|str$|string$|int$)|\.\.\.|\xe2\x80\xa6|\{\{|\$\{|%\(|%s",
    re.I,
)
_DOTTED = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_KEY_WORD = re.compile(rb"(?i)pass|pwd|secret|token|key|cred")
_TYPES = frozenset(
    b"any bool bytes dict float list object optional secretbytes secretstr self cls union".split()
)
_TEST_MARKERS = re.compile(
    rb"def test|class Test|[/_]tests?[/_.]|test_[a-z]|assert|@pytest|unittest|TestCase|fixture",
    re.I,
)
# a literal of lowercase words: letters, spaces and punctuation, no digit, no capital
_LOWER_WORDS = re.compile(rb"[a-z]+(?:[ :._/@\-]+[a-z]+){0,7}")


def _segments(word: str) -> bool:
    """Whether ``word`` (lowercase letters) is placeholder words end to end (``mypassword``,
    ``testpw``), a run of the alphabet (``abcdef``), a keyboard row (``qwerty``), or one
    letter repeated (``xxx``)."""
    if len(word) >= 3 and (len(set(word)) == 1 or word in _SEQ):
        return True
    if len(word) >= 4 and word in "qwertyuiopasdfghjklzxcvbnm":
        return True
    ok = [True] + [False] * len(word)
    for i in range(1, len(word) + 1):
        for j in range(max(0, i - 14), i):
            if ok[j] and word[j:i] in PLACEHOLDER_WORDS:
                ok[i] = True
                break
    return ok[-1]


def is_placeholder(value: bytes, *, digits: bool = False) -> bool:
    """Whether a value is a placeholder (module docstring, rule 2): a template or elision,
    or placeholder words (and runs like ``abcdef``), without digits; with ``digits``, short
    digit runs too (``test123``, ``testpw1``: test code's fixtures)."""
    if _TEMPLATE.search(value):
        return True
    text = unquote_to_bytes(value).decode("utf-8", "replace").lower()
    runs = re.findall(r"[a-z]+|[0-9]+", text)
    if not runs or all(r.isdigit() for r in runs):
        return False
    for r in runs:
        if r.isdigit():
            if not (digits and len(r) <= 4):
                return False
        elif not _segments(r):
            return False
    return True


def looks_random(value: bytes) -> bool:
    """Whether a value looks generated rather than typed: 8 characters or more from 3
    character classes (lower, upper, digit, symbol), or 20 or more from 2."""
    classes = (
        any(97 <= c <= 122 for c in value)
        + any(65 <= c <= 90 for c in value)
        + any(48 <= c <= 57 for c in value)
        + any(not (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122) for c in value)
    )
    return (len(value) >= 8 and classes >= 3) or (len(value) >= 20 and classes >= 2)


def is_code(value: bytes, after: bytes) -> bool:
    """Whether an unquoted value is code, not a literal: a call or subscript (``after`` is the
    character after it), a path, a dotted name, a name that names the key again or a type."""
    if after in (b"(", b"["):
        return True
    if value.startswith((b"/", b"./", b"~/")):
        return True
    if _DOTTED.fullmatch(value):
        return True
    if _NAME.fullmatch(value):
        return value.lower() in _TYPES or bool(_KEY_WORD.search(value))
    return False


def in_test_code(data: bytes, start: int, end: int) -> bool:
    """Whether the 1,500 bytes on either side of ``data[start:end]`` hold test markers."""
    return _TEST_MARKERS.search(data, max(0, start - 1500), end + 1500) is not None


def keep_value(
    data: bytes,
    start: int,
    end: int,
    *,
    quoted: bool,
    code: bool = True,
    host: bytes | None = None,
) -> bool:
    """Whether the context value ``data[start:end]`` is code or test data to keep (module
    docstring): ``quoted`` says it is a quoted literal, ``code`` that it may be an unquoted
    expression (a KEY=value), ``host`` the host of a URL's user info."""
    value = data[start:end]
    if code and not quoted and is_code(value, data[end : end + 1]):
        return True
    if is_placeholder(value):
        return True
    if host is not None and _documentation_host(host) and not looks_random(value):
        return True
    if not quoted or not in_test_code(data, start, end):
        return False
    return bool(_LOWER_WORDS.fullmatch(value)) or is_placeholder(value, digits=True)


def _documentation_host(host: bytes) -> bool:
    h = host.lower().rsplit(b":", 1)[0] if host.count(b":") == 1 else host.lower()
    if h in (b"example.com", b"example.org", b"example.net"):
        return True
    return h.endswith(
        (b".example.com", b".example.org", b".example.net", b".example", b".test", b".invalid")
    )

"""Personal-data rules behind :mod:`knowlyr.recorder.redact` (opt-in): e-mail addresses,
phone numbers, IPv4 and IPv6 addresses, and what looks like one but names no one."""

from __future__ import annotations

import re

__all__ = ["PII_CLASSES", "PII_RULES", "is_pii"]

# A match starts at a word start, or right after a JSON escape (\n, \t...), never at the letter
# of an escape; no pattern matches a quote or a backslash, so the JSON stays valid.
_PB = rb"(?:(?<![\\A-Za-z0-9_.+\-])|(?<=\\[nrtbf]))"
_OCTET = rb"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_H16 = rb"[0-9A-Fa-f]{1,4}"
PII_RULES: dict[str, list[tuple[str, re.Pattern[bytes]]]] = {
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
PII_CLASSES: tuple[str, ...] = tuple(PII_RULES)
"""The personal-data classes :func:`redact_bytes` can redact on request: email, phone, ip."""

_NOT_PII = frozenset({b"0.0.0.0", b"255.255.255.255", b"::", b"::1"})


def is_pii(kind: str, value: bytes) -> bool:
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

"""What a local HTTP server refuses before any route runs: a ``Host`` that is not its own
(421, DNS rebinding) and, on state-changing calls, an ``Origin`` of another site (403).

A DNS-rebinding page reaches a loopback server under the attacker's name
(``Host: evil.example``), and a cross-site form or ``fetch`` sends its page's ``Origin``.
``knowlyr env serve`` and ``knowlyr view`` wrap their apps in :class:`HostGuardMiddleware`;
``knowlyr mcp serve --transport http`` gets the same check from the MCP SDK.

Which ``Host`` names a server answers follows its bind address (any port):

- loopback (``127.0.0.1``, ``::1``, ``localhost``): ``localhost`` and loopback addresses;
- a wildcard (``0.0.0.0``, ``::``): those, this machine's host names and any IP address
  (a rebinding page always uses a name it controls, never an address);
- any other address or name: that one;

and, in every case, the names given as ``allowed`` (``--allowed-host``).

Example:
    >>> guard = HostGuard.for_bind("127.0.0.1")
    >>> guard.refusal("POST", "localhost:8400", None, "http") is None
    True
    >>> guard.refusal("GET", "evil.example:8400", None, "http")[0]
    421
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HostGuard", "HostGuardMiddleware", "is_loopback", "split_host"]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def is_loopback(host: str) -> bool:
    """Whether binding (or naming) ``host`` keeps a server on this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None] | None:
    """``Host`` header value -> (lower-case name or address, port), or None if malformed.

    >>> split_host("[::1]:8400"), split_host("LocalHost"), split_host("a:b")
    (('::1', 8400), ('localhost', None), None)
    """
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
    elif ":" in value:
        return None  # a bare IPv6 address must be bracketed in a Host header
    else:
        name, port = value, None
    if not name or (port is not None and not (port.isdigit() and int(port) <= 65535)):
        return None
    return name, int(port) if port is not None else None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _this_machine() -> set[str]:
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn().lower())
    return names


@dataclass(frozen=True)
class HostGuard:
    """The ``Host`` names one server answers (see the module docstring).

    Args:
        bind: the address the server listens on.
        names: lower-case names and addresses a request's ``Host`` may give.
        any_address: whether any IP address is fine too (a wildcard bind).
    """

    bind: str
    names: frozenset[str]
    any_address: bool = False

    @classmethod
    def for_bind(cls, bind: str, allowed: Iterable[str] = ()) -> HostGuard:
        """The guard of a server bound to ``bind``, also answering the ``allowed`` names.

        Raises:
            ValueError: an ``allowed`` entry that is not a host name or address.
        """
        extra = set()
        for entry in allowed:
            parsed = split_host(entry)
            if parsed is None:
                raise ValueError(f"allowed host must be a name or address, got {entry!r}")
            extra.add(parsed[0])
        bind_name = bind.strip("[]").lower()
        loopback = {"localhost", "127.0.0.1", "::1"}
        if bind_name in _WILDCARDS:
            return cls(bind, frozenset(loopback | _this_machine() | extra), any_address=True)
        if is_loopback(bind_name):
            return cls(bind, frozenset(loopback | {bind_name} | extra))
        return cls(bind, frozenset({bind_name} | extra))

    def allows(self, name: str) -> bool:
        """Whether a ``Host`` naming ``name`` (no port, lower case) is this server."""
        if name in self.names or (self.any_address and _is_address(name)):
            return True
        return is_loopback(name) and "localhost" in self.names  # all of 127.0.0.0/8

    def refusal(
        self, method: str, host: str | None, origin: str | None, scheme: str = "http"
    ) -> tuple[int, str] | None:
        """(status, one-sentence message) for a request to refuse, or None to answer it."""
        parsed = split_host(host) if host else None
        if parsed is None or not self.allows(parsed[0]):
            shown = f"Host {host!r}" if host else "a request without a Host header"
            return (
                421,
                f"{shown} is not this server's address (bound to {self.bind}): use the "
                f"address it prints, or start it with --allowed-host NAME to answer another name.",
            )
        if origin is None or method.upper() in SAFE_METHODS:
            return None
        here = (parsed[0], parsed[1] or _DEFAULT_PORTS.get(scheme, 80))
        try:
            o = urlsplit(origin)
            there = (o.hostname or "", o.port or _DEFAULT_PORTS.get(o.scheme, 0))
        except ValueError:
            there = ("", 0)
        if there == here:
            return None
        return (
            403,
            f"Origin {origin!r} is not this server, so a page of another site may not change "
            "its state.",
        )


class HostGuardMiddleware:
    """ASGI middleware answering :meth:`HostGuard.refusal` with ``respond(status, message)``.

    Args:
        app: the ASGI app to guard.
        guard: which hosts it answers.
        respond: builds the refusal (a Starlette ``Response``) in the app's own format.
    """

    def __init__(self, app: Any, *, guard: HostGuard, respond: Callable[[int, str], Any]):
        self.app, self.guard, self.respond = app, guard, respond

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            refused = self.guard.refusal(
                scope.get("method", "GET"),
                headers.get("host"),
                headers.get("origin"),
                scope.get("scheme", "http"),
            )
            if refused is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await self.respond(*refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

"""The local sites' server: a :class:`Site` behind a stdlib HTTP server on a loopback port.

A :class:`Site` is a small web application written for the tests: server-rendered HTML
(:func:`page`), its state in memory, :meth:`Site.reset` rebuilding that state for a seed
(the same seed, the same state) and :meth:`Site.outcome` judging an episode from the state
(the order placed, the record edited), never from page text. :class:`SiteServer` serves one
site from a daemon thread on ``127.0.0.1`` and a free port; the browser env starts one per
site it needs and resets its state at every episode.

Sites are registered by name (:func:`register_site`); a task names its site in
``task.data["site"]``.

Example:
    >>> server = SiteServer(get_site("shop"))  # doctest: +SKIP
    >>> server.site.reset(7)  # doctest: +SKIP
    >>> server.origin  # doctest: +SKIP
    'http://127.0.0.1:41523'
"""

from __future__ import annotations

import abc
import html
import importlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from knowlyr.errors import ConfigError

__all__ = [
    "Request",
    "Response",
    "Site",
    "SiteServer",
    "esc",
    "get_site",
    "list_sites",
    "page",
    "register_site",
]

_SITES: dict[str, str | type[Site]] = {
    "shop": "knowlyr.browser.sites.shop:ShopSite",
    "docs": "knowlyr.browser.sites.docs:DocsSite",
    "admin": "knowlyr.browser.sites.admin:AdminSite",
}


def esc(value: Any) -> str:
    """HTML-escape ``value`` (quotes too)."""
    return html.escape(str(value), quote=True)


_STYLE = (
    "body{font-family:sans-serif;margin:0;color:#222}header{background:#234;color:#fff;"
    "padding:8px 16px}header a{color:#fff;margin-right:12px}main{padding:12px 16px;"
    "max-width:960px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}"
    ".error{color:#b00}.notice{color:#060}label{display:block;margin:6px 0}"
)


def page(title: str, site_title: str, nav: list[tuple[str, str]], body: str) -> str:
    """A whole HTML page: ``<title>``, a header with the site's links, then ``body``."""
    links = "".join(f'<a href="{esc(href)}">{esc(text)}</a>' for href, text in nav)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)} - "
        f"{esc(site_title)}</title><link rel='icon' href='data:,'><style>{_STYLE}</style>"
        f"</head><body><header><nav>{links}</nav></header><main>{body}</main></body></html>"
    )


@dataclass
class Request:
    """What a handler sees: method, path, query and form values (first value of each)."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] = field(default_factory=dict)
    form_lists: dict[str, list[str]] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        """A form value, else a query value, else ``default`` (stripped)."""
        return (self.form.get(name) or self.query.get(name) or default).strip()


@dataclass
class Response:
    """Status, HTML body (or a streamed body) and a redirect location."""

    body: str = ""
    status: int = 200
    location: str | None = None
    stream: Iterator[bytes] | None = None

    @classmethod
    def redirect(cls, location: str) -> Response:
        return cls(status=303, location=location)

    @classmethod
    def not_found(cls, what: str = "page") -> Response:
        return cls(f"<!doctype html><title>Not found</title><h1>No such {esc(what)}</h1>", 404)


class Site(abc.ABC):
    """A small web application with resettable, seeded state.

    Subclasses set ``name`` and ``title`` and implement :meth:`build` (the state for a seed),
    :meth:`routes` and :meth:`outcome`. Handlers run on the server's threads; they hold
    :attr:`lock` while they read or change the state.
    """

    name: str = ""
    title: str = ""
    nav: tuple[tuple[str, str], ...] = ()

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.state: Any = None
        self.seed: int | None = None
        self.stopped = threading.Event()  # set on reset: streamed responses of the last episode end

    @abc.abstractmethod
    def build(self, seed: int) -> Any:
        """The state of the site for ``seed`` (deterministic)."""

    @abc.abstractmethod
    def routes(self) -> dict[tuple[str, str], Callable[[Request], Response]]:
        """``(method, path) -> handler``; a path ending in ``/`` matches its prefix too."""

    @abc.abstractmethod
    def outcome(self, goal: dict[str, Any], answer: str | None) -> dict[str, Any]:
        """Judge an episode from the state: ``success``, ``score`` and what was found."""

    def reset(self, seed: int) -> None:
        """Rebuild the state for ``seed`` (every episode starts from it)."""
        with self.lock:
            self.stopped.set()
            self.stopped = threading.Event()
            self.state = self.build(seed)
            self.seed = seed

    def render(self, title: str, body: str) -> Response:
        return Response(page(title, self.title, list(self.nav), body))

    def handle(self, req: Request) -> Response:
        table = self.routes()
        handler = table.get((req.method, req.path))
        if handler is None:
            prefixes = [
                (p, h) for (m, p), h in table.items() if m == req.method and p.endswith("/")
            ]
            for prefix, h in sorted(prefixes, key=lambda ph: -len(ph[0])):
                if req.path.startswith(prefix) and len(req.path) > len(prefix):
                    handler = h
                    break
        if handler is None:
            return Response.not_found()
        if self.state is None:
            return Response("<!doctype html><h1>The site has not been reset</h1>", 503)
        with self.lock:
            return handler(req)


def _first(values: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in values.items() if v}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        form_lists: dict[str, list[str]] = {}
        if method == "POST":
            n = int(self.headers.get("Content-Length") or 0)
            form_lists = parse_qs(self.rfile.read(n).decode(), keep_blank_values=True)
        req = Request(method, parts.path, _first(query), _first(form_lists), form_lists)
        site = self.server.site
        site_requests = self.server.requests
        site_requests.append(f"{method} {self.path}")
        try:
            resp = site.handle(req)
        except Exception as e:  # a site bug is a 500 page, not a dead server
            resp = Response(f"<!doctype html><h1>Server error</h1><pre>{esc(e)}</pre>", 500)
        self.send_response(resp.status)
        if resp.location:
            self.send_header("Location", resp.location)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        if resp.stream is not None:
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for chunk in resp.stream:
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
            return
        data = resp.body.encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    site: Site
    requests: list[str]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that drops a connection (a stopped load, a closed tab) is not an error."""


class SiteServer:
    """Serve ``site`` on ``127.0.0.1`` at a free port, from a daemon thread.

    Attributes:
        origin: ``http://127.0.0.1:PORT``.
        requests: every request served (``"GET /path?query"``), for tests and debugging.
    """

    def __init__(self, site: Site, *, host: str = "127.0.0.1"):
        self.site = site
        self._server = _Server((host, 0), _Handler)
        self._server.site = site
        self._server.requests = []
        self.port = self._server.server_address[1]
        self.origin = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            name=f"knowlyr-site-{site.name}",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )
        self._thread.start()

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def close(self) -> None:
        self.site.stopped.set()
        self._server.shutdown()
        self._server.server_close()


def register_site(name: str, site: str | type[Site], *, override: bool = False) -> None:
    """Register a :class:`Site` class (or ``"module:Class"``) under ``name``."""
    if name in _SITES and not override:
        raise ConfigError(f"site {name!r} is already registered; pass override=True to replace it")
    _SITES[name] = site


def list_sites() -> list[str]:
    return sorted(_SITES)


def get_site(name: str) -> Site:
    """A new instance of the site registered as ``name``.

    Raises:
        ConfigError: unknown site, listing the known ones.
    """
    entry = _SITES.get(name)
    if entry is None:
        raise ConfigError(f"unknown site {name!r}; known sites: {', '.join(list_sites())}")
    if isinstance(entry, str):
        mod, _, cls = entry.partition(":")
        entry = getattr(importlib.import_module(mod), cls)
    return entry()

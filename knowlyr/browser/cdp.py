"""A minimal Chrome DevTools Protocol client over one websocket (``websockets``' sync client).

One :class:`CDPConnection` talks to a browser's ``/devtools/browser/...`` endpoint. Commands
to a page go over the same socket with its ``sessionId`` (flattened sessions), so one
connection drives the browser target and every page. A reader thread owns the socket's
receiving side: it resolves each command's :class:`~concurrent.futures.Future` by ``id`` and
hands every event to the listeners registered with :meth:`CDPConnection.listen`. Listeners run
on the reader thread, so they must not wait for a command's answer (they may :meth:`post`).

When the socket closes (the browser exited or was killed) every pending and later command
fails with :class:`~knowlyr.errors.BrowserError`, and :attr:`CDPConnection.closed` is set.

Example:
    >>> conn = CDPConnection("ws://127.0.0.1:9222/devtools/browser/...")  # doctest: +SKIP
    >>> conn.send("Browser.getVersion")["product"]  # doctest: +SKIP
    'Chrome/156.0.8078.79'
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import orjson

from knowlyr.errors import BrowserError, ConfigError

__all__ = ["CDPCommandError", "CDPConnection", "Listener"]

#: ``(method, params, session_id)`` for every event the browser sends.
Listener = Callable[[str, dict[str, Any], str | None], None]


class CDPCommandError(BrowserError):
    """The browser answered a command with an error (``code``, ``message``)."""

    def __init__(self, method: str, error: dict[str, Any]):
        self.method = method
        self.code = error.get("code")
        super().__init__(f"{method}: {error.get('message', error)}")


class CDPConnection:
    """Commands and events of one DevTools websocket.

    Args:
        ws_url: the browser's ``webSocketDebuggerUrl``.
        open_timeout: seconds to wait for the websocket handshake.

    Raises:
        BrowserError: the websocket cannot be opened.
    """

    def __init__(self, ws_url: str, *, open_timeout: float = 10.0):
        try:
            from websockets.sync.client import connect
        except ImportError as e:
            raise ConfigError(
                "the browser env needs the websockets package: pip install 'knowlyr-gym[browser]'"
            ) from e
        try:
            self._ws = connect(ws_url, max_size=None, open_timeout=open_timeout, ping_interval=None)
        except (OSError, TimeoutError) as e:
            raise BrowserError(f"cannot open the DevTools websocket {ws_url}: {e}") from e
        self.url = ws_url
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, Future]] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.closed = threading.Event()
        self.close_reason = ""
        self._reader = threading.Thread(target=self._read, name="knowlyr-cdp-reader", daemon=True)
        self._reader.start()

    # -- commands -------------------------------------------------------------------------

    def request(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> Future:
        """Send a command; the future resolves to its ``result`` (or raises its error)."""
        fut: Future = Future()
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        with self._lock:
            if self.closed.is_set():
                fut.set_exception(self._gone())
                return fut
            self._pending[msg_id] = (method, fut)
        try:
            with self._send_lock:
                self._ws.send(orjson.dumps(msg).decode())
        except Exception as e:  # the socket is gone: every waiter learns it
            self._shutdown(f"send failed: {type(e).__name__}: {e}")
        return fut

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """Send a command and wait for its result.

        Raises:
            CDPCommandError: the browser refused the command.
            BrowserError: the connection closed, or no answer within ``timeout`` seconds.
        """
        fut = self.request(method, params, session=session)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            raise BrowserError(f"{method}: no answer from the browser in {timeout:g} s") from None

    def post(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> None:
        """Send a command without waiting (safe from a listener); errors are dropped."""
        self.request(method, params, session=session)

    def listen(self, listener: Listener) -> None:
        """Call ``listener(method, params, session_id)`` for every event (on the reader thread)."""
        self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        """Stop calling ``listener``."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead socket
            self._ws.close()
        self._shutdown("closed")
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=2)

    # -- reader ---------------------------------------------------------------------------

    def _gone(self) -> BrowserError:
        return BrowserError(f"the DevTools connection is closed ({self.close_reason})")

    def _shutdown(self, reason: str) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.close_reason = reason
            self.closed.set()
            pending, self._pending = self._pending, {}
        for _, fut in pending.values():
            if not fut.done():
                fut.set_exception(self._gone())

    def _read(self) -> None:
        reason = "the browser closed the connection"
        try:
            for raw in self._ws:
                msg = orjson.loads(raw)
                if "id" in msg:
                    with self._lock:
                        entry = self._pending.pop(msg["id"], None)
                    if entry is None:
                        continue
                    method, fut = entry
                    if "error" in msg:
                        fut.set_exception(CDPCommandError(method, msg["error"]))
                    else:
                        fut.set_result(msg.get("result", {}))
                    continue
                method, params = msg.get("method", ""), msg.get("params", {})
                for listener in list(self._listeners):
                    try:
                        listener(method, params, msg.get("sessionId"))
                    except Exception:  # a listener's bug must not stop the reader
                        continue
        except Exception as e:  # connection reset, browser killed
            reason = f"{type(e).__name__}: {e}"
        self._shutdown(reason)

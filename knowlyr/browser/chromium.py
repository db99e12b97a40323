"""One headless Chromium process, its DevTools connection and the network guard.

:class:`Chromium` starts Debian's ``chromium`` (``/usr/lib/chromium/chromium``, the binary
behind the ``/usr/bin/chromium`` shell wrapper, so that killing the process group ends every
child) in its own session with a throw-away profile, reads the DevTools port from the
profile's ``DevToolsActivePort`` file and connects a :class:`~knowlyr.browser.cdp.CDPConnection`.

Network isolation is enforced twice, not assumed:

- ``--host-resolver-rules="MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"``: no host name resolves, so
  nothing outside loopback is reachable by name;
- the ``Fetch`` domain is enabled on the *browser* target for every URL, so every request of
  every tab, frame, popup and worker pauses until the guard answers: a request whose origin
  (scheme, host and port) is not one of :attr:`Chromium.allowed` fails with
  ``net::ERR_BLOCKED_BY_CLIENT`` and is listed in :attr:`Chromium.blocked`. Another loopback
  port is another origin, so it is blocked like any outside host.

Tabs the page opens itself (``window.open``, ``target=_blank``) are closed as they appear:
an episode has one tab.

Example:
    >>> with Chromium() as browser:  # doctest: +SKIP
    ...     browser.allow("http://127.0.0.1:8000")
    ...     tab = browser.new_tab()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from knowlyr.browser.cdp import CDPConnection
from knowlyr.errors import BackendUnavailableError, BrowserError

__all__ = ["Chromium", "find_chromium", "origin_of"]

_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
_FLAGS = (
    "--headless=new",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--mute-audio",
    "--hide-scrollbars",
    "--font-render-hinting=none",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=direct://",
)


def _kill_group(pid: int, profile_dir: str) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(profile_dir, ignore_errors=True)


def find_chromium(executable: str | None = None) -> str:
    """The Chromium binary to run: ``executable``, ``$KNOWLYR_CHROMIUM``, or Debian's.

    Raises:
        BackendUnavailableError: none is installed (the message says how to install it).
    """
    wanted = executable or os.environ.get("KNOWLYR_CHROMIUM")
    for name in (wanted,) if wanted else _CANDIDATES:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    raise BackendUnavailableError(
        f"no Chromium found ({wanted or ', '.join(_CANDIDATES)}): the browser env needs "
        "Debian's chromium package: run `sudo bash scripts/setup-system.sh` (or "
        "`apt-get install chromium`), or set KNOWLYR_CHROMIUM to a Chromium binary"
    )


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port always written out)."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


class Chromium:
    """A headless Chromium with a DevTools connection and the origin guard.

    Args:
        executable: the binary (default: :func:`find_chromium`).
        window: the viewport as ``(width, height)``; screenshots have this size.
        start_timeout: seconds to wait for the DevTools endpoint.

    Raises:
        BackendUnavailableError: no Chromium installed.
        BrowserError: it did not start (the message ends with its log).
    """

    def __init__(
        self,
        executable: str | None = None,
        *,
        window: tuple[int, int] = (1280, 800),
        start_timeout: float = 20.0,
    ):
        self.executable = find_chromium(executable)
        self.window = window
        self.allowed: set[str] = set()
        self.blocked: list[str] = []
        self._own_targets: set[str] = set()
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="knowlyr-chromium-")
        self._log = open(os.path.join(self._dir, "chromium.log"), "wb")  # noqa: SIM115
        args = [
            self.executable,
            *_FLAGS,
            f"--window-size={window[0]},{window[1]}",
            f"--user-data-dir={os.path.join(self._dir, 'profile')}",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        args.append("about:blank")
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        # an interpreter that exits without close() still stops the browser's process group
        self._reaper = weakref.finalize(self, _kill_group, self.process.pid, self._dir)
        try:
            self.conn = CDPConnection(self._endpoint(start_timeout))
            self.conn.listen(self._on_event)
            self.conn.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})
            self.conn.send("Target.setDiscoverTargets", {"discover": True})
        except BaseException:
            self.close()
            raise

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        """The process runs and its DevTools connection is open."""
        return self.process.poll() is None and not self.conn.closed.is_set()

    def _endpoint(self, timeout: float) -> str:
        port_file = os.path.join(self._dir, "profile", "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(
                    f"{self.executable} exited with {self.process.returncode} at start; "
                    f"its log:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(port_file) as f:
                    port, path = f.read().split("\n")[:2]
                if path:
                    return f"ws://127.0.0.1:{int(port)}{path}"
            time.sleep(0.01)
        raise BrowserError(
            f"{self.executable} did not open its DevTools port in {timeout:g} s; "
            f"its log:\n{self.log_tail()}"
        )

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(os.path.join(self._dir, "chromium.log"), "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the browser (its whole process group) and remove its profile."""
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self._log.close()
        self._reaper()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the guard ------------------------------------------------------------------------

    def allow(self, *origins: str) -> None:
        """Let requests to exactly these origins through (replacing the previous ones)."""
        with self._lock:
            self.allowed = {origin_of(o) for o in origins}

    def _on_event(self, method: str, params: dict[str, Any], session: str | None) -> None:
        if method == "Fetch.requestPaused":
            url = params["request"]["url"]
            rid = {"requestId": params["requestId"]}
            if origin_of(url) in self.allowed:
                self.conn.post("Fetch.continueRequest", rid, session=session)
            else:
                self.blocked.append(url)
                self.conn.post(
                    "Fetch.failRequest", {**rid, "errorReason": "BlockedByClient"}, session=session
                )
        elif method == "Target.targetCreated":
            info = params["targetInfo"]
            if info.get("type") == "page" and info.get("openerId"):
                self.conn.post("Target.closeTarget", {"targetId": info["targetId"]})

    # -- tabs -----------------------------------------------------------------------------

    def new_tab(self):
        """A tab in a fresh browser context (no cookies, storage or history of another)."""
        from knowlyr.browser.page import Tab

        ctx = self.conn.send("Target.createBrowserContext", {"disposeOnDetach": True})
        ctx_id = ctx["browserContextId"]
        target = self.conn.send(
            "Target.createTarget", {"url": "about:blank", "browserContextId": ctx_id}
        )["targetId"]
        session = self.conn.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        return Tab(self, ctx_id, target, session)

"""The browser env's tools: ``navigate``, ``click``, ``type_text``, ``scroll``, ``screenshot``,
``read_page`` and ``submit``.

Each is a typed function (:func:`knowlyr.core.tools.tool`) whose keyword-only ``session`` is
the episode's :class:`BrowserSession`, injected by the env. Observations are text: an action
that shows a new page (``navigate``, a ``click``, ``read_page``, ``type_text`` with
``press_enter``) answers with the page as :func:`page_text` writes it, paths relative to the
site so the same episode reads the same on any port. ``screenshot`` stores a PNG as a
content-addressed blob of the store and answers with its sha256.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from knowlyr.browser.page import ElementError, NavigationError, PageTimeout, Tab
from knowlyr.browser.server import SiteServer
from knowlyr.core.tools import ToolResult, tool
from knowlyr.errors import BrowserError
from knowlyr.taskset import Task

__all__ = [
    "BROWSER_TOOLS",
    "MAX_LINES",
    "BrowserSession",
    "click",
    "navigate",
    "page_text",
    "read_page",
    "screenshot",
    "scroll",
    "submit",
    "type_text",
]

#: At most this many lines of a page go into an observation.
MAX_LINES = 400
_ELEMENT = re.compile(r'\[(\d+)\] \w+ "(?:[^"\\]|\\.)*"(?: -> \S+)?')


@dataclass
class BrowserSession:
    """What the tools of one episode act on."""

    task: Task
    tab: Tab
    server: SiteServer
    timeout: float
    store_url: str | None = None
    answer: str | None = None
    lines: list[str] = field(default_factory=list)
    screenshot: str | None = None  # the blob of the last step's screenshot
    _store: Any = None

    def put_png(self, png: bytes) -> str:
        from knowlyr.store import Store

        if self._store is None:
            self._store = Store.open(self.store_url)
        return self._store.put_blob(png)


def page_text(snap: dict[str, Any], origin: str) -> tuple[str, list[str]]:
    """The observation of a snapshot (and its element lines), URLs relative to ``origin``."""
    url = snap.get("url") or ""
    shown = url[len(origin) :] or "/" if url.startswith(origin) else url
    lines = list(snap["lines"])
    more = len(lines) - MAX_LINES
    if more > 0:
        lines = [*lines[:MAX_LINES], f"... ({more} more lines)"]
    if snap.get("dialog"):
        return f"A dialog is open on {shown}:\n" + "\n".join(lines), lines
    head = f"Page: {snap.get('title') or '(untitled)'} ({shown})"
    return head + "\n" + "\n".join(lines), lines


def _show(session: BrowserSession, prefix: str = "") -> str:
    text, session.lines = page_text(
        session.tab.snapshot(timeout=session.timeout), session.server.origin
    )
    return f"{prefix}\n{text}" if prefix else text


def _element(session: BrowserSession, element_id: int) -> str:
    """``[id] role "name"`` of an element of the last page read (for the observation)."""
    for ln in session.lines:
        for m in _ELEMENT.finditer(ln):
            if m.group(1) == str(element_id):
                return m.group(0)
    return f"[{element_id}]"


def _guarded(fn):
    """Turn the page's failures into observations (a timeout has exit code 124)."""

    def run(session: BrowserSession, *args: Any) -> ToolResult:
        try:
            return fn(session, *args)
        except PageTimeout as e:
            return ToolResult.failure(str(e), exit_code=124, timed_out=True)
        except NavigationError as e:
            reason = str(e)
            if "BLOCKED_BY_CLIENT" in reason:
                reason += " (only the task's site can be reached)"
            return ToolResult.failure(f"could not load the page: {reason}", exit_code=1)
        except ElementError as e:
            return ToolResult.failure(str(e), exit_code=1)
        except BrowserError as e:
            return ToolResult.failure(f"browser: {e}", exit_code=1, browser_error=True)

    return run


@tool
def navigate(url: str, *, session: BrowserSession) -> ToolResult:
    """Open a URL: a path of the task's site (``/search?q=lamp``) or a full http(s) URL.

    Args:
        url: the path or URL to open.
    """
    target = urljoin(session.server.origin + "/", url.strip())
    if urlsplit(target).scheme not in ("http", "https"):
        return ToolResult.failure(f"only http(s) URLs can be opened, got {url!r}")

    def go(s: BrowserSession) -> ToolResult:
        s.tab.navigate(target, timeout=s.timeout)
        return ToolResult(_show(s))

    return _guarded(go)(session)


@tool
def click(element_id: int, *, session: BrowserSession) -> ToolResult:
    """Click an element of the page by its id (the ``[id]`` of read_page).

    Args:
        element_id: the element's id.
    """

    def go(s: BrowserSession) -> ToolResult:
        what = _element(s, element_id)
        result = s.tab.act(element_id, "click", timeout=s.timeout)
        if result == "dialog":
            return ToolResult(_show(s, f"Clicked {what}; a dialog opened."))
        return ToolResult(_show(s, f"Clicked {what}."))

    return _guarded(go)(session)


@tool
def type_text(
    element_id: int, text: str, press_enter: bool = False, *, session: BrowserSession
) -> ToolResult:
    """Replace the text of an input (or choose the option of a select) by its id.

    Args:
        element_id: the element's id.
        text: the text to type, or the option to choose.
        press_enter: submit the element's form afterwards.
    """

    def go(s: BrowserSession) -> ToolResult:
        what = _element(s, element_id)
        if s.tab.dialog is not None:
            raise ElementError("a dialog is open: click [1] (OK) or [2] (Cancel) first")
        result = s.tab.act(element_id, "type", text, enter=press_enter, timeout=s.timeout)
        if result == "load" or press_enter:
            return ToolResult(_show(s, f"Typed {text!r} into {what} and pressed Enter."))
        return ToolResult(f"Typed {text!r} into {what}.")

    return _guarded(go)(session)


@tool
def scroll(
    direction: Literal["down", "up"] = "down", amount: int = 600, *, session: BrowserSession
) -> ToolResult:
    """Scroll the page (what a screenshot shows).

    Args:
        direction: down or up.
        amount: pixels to scroll.
    """

    def go(s: BrowserSession) -> ToolResult:
        if s.tab.dialog is not None:
            raise ElementError("a dialog is open: click [1] (OK) or [2] (Cancel) first")
        y, view, height = s.tab.scroll(amount if direction == "down" else -amount)
        return ToolResult(f"Scrolled {direction}: showing {y}-{y + view} of {height} px.")

    return _guarded(go)(session)


@tool
def screenshot(*, session: BrowserSession) -> ToolResult:
    """Take a screenshot of the visible part of the page (stored as a PNG blob)."""

    def go(s: BrowserSession) -> ToolResult:
        png = s.tab.screenshot(timeout=s.timeout)
        s.screenshot = s.put_png(png)
        w, h = s.tab.browser.window
        return ToolResult(
            f"Screenshot saved: PNG {w}x{h}, {len(png)} bytes, blob sha256:{s.screenshot}"
        )

    return _guarded(go)(session)


@tool
def read_page(*, session: BrowserSession) -> ToolResult:
    """Read the page as text: its text, tables and interactive elements with their ids."""
    return _guarded(lambda s: ToolResult(_show(s)))(session)


@tool
def submit(answer: str = "", *, session: BrowserSession) -> ToolResult:
    """Finish the task; give the answer if the task asks for one.

    Args:
        answer: the answer (for a question), else leave empty.
    """
    session.answer = answer
    return ToolResult("Submitted.")


BROWSER_TOOLS = (navigate, click, type_text, scroll, screenshot, read_page, submit)

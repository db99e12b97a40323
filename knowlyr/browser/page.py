"""One tab: navigate, read the page as text, click, type, scroll, screenshot, dialogs.

:meth:`Tab.snapshot` is an accessibility-tree-like text of the page: one line per block of
text, table rows as ``cell | cell``, headings with ``#``, and every interactive element
(links, buttons, inputs, selects, text areas) as ``[id] role "name"`` with its value, state
and (for links) the path it leads to. Ids count the interactive elements in document order,
so the same page always gets the same ids; :meth:`Tab.click` and :meth:`Tab.type_text` take
them. While a JavaScript dialog (``confirm``, ``alert``) is open the page is blocked, and the
snapshot is the dialog: ``[1] button "OK"`` and ``[2] button "Cancel"``.

A click that starts a navigation (a link, a form's submit button) waits for the new page's
``load`` event; :class:`PageTimeout` is raised when a page does not finish loading before the
step's deadline (loading is then stopped, so the tab is usable again).

Example:
    >>> tab = browser.new_tab()  # doctest: +SKIP
    >>> tab.navigate("http://127.0.0.1:8000/", timeout=5)  # doctest: +SKIP
    >>> print(tab.snapshot()["text"])  # doctest: +SKIP
    # Acme Shop
    [1] link "Home" -> /
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from typing import Any

import orjson

from knowlyr.errors import BrowserError

__all__ = ["ElementError", "NavigationError", "PageTimeout", "Tab"]


class PageTimeout(Exception):
    """The page did not finish loading (or answering) before the step's deadline."""


class NavigationError(Exception):
    """The browser could not load the URL (blocked origin, connection refused...)."""


class ElementError(Exception):
    """No such element id on the current page, or the element cannot take the action."""


_SNAPSHOT_JS = r"""
(() => {
  const els = [], out = [];
  let line = [];
  const squash = s => (s || '').replace(/\s+/g, ' ').trim();
  const flush = () => { const t = squash(line.join(' ')); if (t) out.push(t); line = []; };
  const q = s => JSON.stringify(squash(s).slice(0, 120));
  const SKIP = new Set(['SCRIPT', 'STYLE', 'HEAD', 'TEMPLATE', 'NOSCRIPT', 'svg']);
  const BLOCK = new Set(['P', 'DIV', 'SECTION', 'ARTICLE', 'HEADER', 'FOOTER', 'NAV', 'MAIN',
    'ASIDE', 'UL', 'OL', 'LI', 'TABLE', 'THEAD', 'TBODY', 'TR', 'FORM', 'FIELDSET', 'BR', 'HR',
    'DL', 'DT', 'DD', 'PRE', 'BLOCKQUOTE', 'FIGURE', 'CAPTION', 'LEGEND', 'DIALOG', 'LABEL']);
  const INTERACTIVE = 'a[href],button,input:not([type=hidden]),select,textarea,[role=button]';
  const hidden = el => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true') return true;
    const s = getComputedStyle(el);
    return s.display === 'none' || s.visibility === 'hidden';
  };
  const role = el => {
    const t = el.tagName, type = (el.getAttribute('type') || 'text').toLowerCase();
    if (t === 'A') return 'link';
    if (t === 'SELECT') return 'combobox';
    if (t === 'TEXTAREA') return 'textbox';
    if (t === 'INPUT') {
      if (type === 'checkbox' || type === 'radio') return type;
      if (['submit', 'button', 'reset', 'image'].includes(type)) return 'button';
      return 'textbox';
    }
    return 'button';
  };
  const labelText = lab => Array.from(lab.childNodes).filter(n => !(n.nodeType === 1 &&
    n.matches('input,select,textarea,button'))).map(n => n.textContent).join(' ');
  const nameOf = el => {
    const label = el.getAttribute('aria-label') ||
      (el.labels && el.labels.length ? squash(labelText(el.labels[0])) : '') ||
      el.getAttribute('placeholder') || el.getAttribute('title') || '';
    if (label) return label;
    if (el.tagName === 'INPUT') return el.value || el.name || '';
    return el.innerText || el.getAttribute('alt') || el.name || '';
  };
  const describe = (el, id) => {
    const r = role(el);
    let d = `[${id}] ${r} ${q(nameOf(el))}`;
    if (r === 'link') {
      const u = new URL(el.href, location.href);
      d += ' -> ' + (u.origin === location.origin ? u.pathname + u.search + u.hash : u.href);
    } else if (r === 'textbox') {
      if (el.type === 'password') d += el.value ? ' value=***' : ' value=""';
      else d += ` value=${q(el.value)}`;
    } else if (r === 'combobox') {
      const sel = el.selectedOptions.length ? el.selectedOptions[0].text : '';
      d += ` value=${q(sel)} options: ` + Array.from(el.options).map(o => squash(o.text)).join(' | ');
    } else if (r === 'checkbox' || r === 'radio') {
      d += el.checked ? ' checked' : ' unchecked';
    }
    if (el.disabled) d += ' disabled';
    if (el.required) d += ' required';
    return d;
  };
  const walk = node => {
    if (node.nodeType === 3) {
      // a label's own words are the name of the control it wraps: not repeated as text
      const p = node.parentElement;
      if (!(p && p.tagName === 'LABEL' && p.querySelector(INTERACTIVE))) line.push(node.textContent);
      return;
    }
    if (node.nodeType !== 1 || SKIP.has(node.tagName) || hidden(node)) return;
    const el = node;
    if (el.matches(INTERACTIVE)) { els.push(el); line.push(describe(el, els.length)); return; }
    const t = el.tagName;
    if (/^H[1-6]$/.test(t)) {
      flush(); line.push('#'.repeat(+t[1])); el.childNodes.forEach(walk); flush(); return;
    }
    if (t === 'TD' || t === 'TH') {
      if (el.cellIndex > 0) line.push('|');
      el.childNodes.forEach(walk); return;
    }
    if (t === 'IMG') { const a = el.getAttribute('alt'); if (a) line.push(`img ${q(a)}`); return; }
    const block = BLOCK.has(t);
    if (block) flush();
    el.childNodes.forEach(walk);
    if (block) flush();
  };
  if (document.body) walk(document.body);
  flush();
  window.__knowlyrEls = els;
  return {url: location.href, title: document.title, lines: out,
          scroll: [Math.round(scrollY), Math.round(innerHeight),
                   Math.round((document.documentElement || {}).scrollHeight || 0)]};
})()
"""

_ACT_JS = r"""
((id, action, text, enter) => {
  const el = (window.__knowlyrEls || [])[id - 1];
  if (!el || !el.isConnected) return {error: 'stale'};
  if (el.disabled) return {error: 'disabled'};
  el.scrollIntoView({block: 'center', inline: 'center'});
  let nav = null, submitted = null;
  const seen = e => { nav = e.destination.sameDocument ? 'same' : 'load'; };
  const submit = e => { submitted = e; };  // a form submission navigates later (scheduled)
  navigation.addEventListener('navigate', seen);
  document.addEventListener('submit', submit);
  try {
    if (action === 'click') {
      el.focus(); el.click();
    } else if (el.tagName === 'SELECT') {
      const want = text.trim().toLowerCase();
      const opt = Array.from(el.options).find(o => o.text.trim().toLowerCase() === want ||
                                                   o.value.toLowerCase() === want);
      if (!opt) return {error: 'option', options: Array.from(el.options).map(o => o.text.trim())};
      el.value = opt.value;
      el.dispatchEvent(new Event('input', {bubbles: true}));
      el.dispatchEvent(new Event('change', {bubbles: true}));
    } else if (el.tagName === 'TEXTAREA' || (el.tagName === 'INPUT' &&
               !['checkbox', 'radio', 'submit', 'button', 'reset', 'image', 'file'].includes(el.type))) {
      el.focus(); el.value = text;
      el.dispatchEvent(new Event('input', {bubbles: true}));
      el.dispatchEvent(new Event('change', {bubbles: true}));
      if (enter && el.form) el.form.requestSubmit();
    } else {
      return {error: 'not_typable'};
    }
  } finally {
    navigation.removeEventListener('navigate', seen);
    document.removeEventListener('submit', submit);
  }
  if (!nav && submitted && !submitted.defaultPrevented) nav = 'load';
  return {nav};
})
"""


class Tab:
    """A tab in its own browser context (made by :meth:`Chromium.new_tab`)."""

    def __init__(self, browser: Any, context_id: str, target_id: str, session: str):
        self.browser = browser
        self.conn = browser.conn
        self.context_id = context_id
        self.target_id = target_id
        self.session = session
        self.dialog: dict[str, Any] | None = None
        self._loader = ""  # the loader (document) the main frame shows
        self._loaded: set[str] = set()  # loaders whose load event fired
        self._requested = 0  # navigations the main frame asked for (links, forms, scripts)
        self._pending: tuple[Any, tuple[str, int]] | None = None  # a click waiting behind a dialog
        self._cond = threading.Condition()
        self.conn.listen(self._on_event)
        self._send("Page.enable")
        self._send("Page.setLifecycleEventsEnabled", {"enabled": True})
        width, height = browser.window
        self._send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def _send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 10.0):
        return self.conn.send(method, params, session=self.session, timeout=timeout)

    def _on_event(self, method: str, params: dict[str, Any], session: str | None) -> None:
        if session != self.session:
            return
        with self._cond:
            if method == "Page.lifecycleEvent":
                if params.get("frameId") != self.target_id:
                    return
                if params.get("name") == "init":
                    self._loader = params["loaderId"]
                elif params.get("name") == "load":
                    self._loaded.add(params["loaderId"])
                else:
                    return
            elif method == "Page.frameRequestedNavigation":
                if params.get("frameId") == self.target_id:
                    self._requested += 1
                return
            elif method == "Page.frameNavigated":
                frame = params.get("frame", {})
                if frame.get("parentId") or frame.get("id") != self.target_id:
                    return
                self._loader = frame.get("loaderId", self._loader)
            elif method == "Page.javascriptDialogOpening":
                self.dialog = params
            elif method == "Page.javascriptDialogClosed":
                self.dialog = None
            else:
                return
            self._cond.notify_all()

    def _wait(self, pred, deadline: float, what: str) -> None:
        with self._cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or self.conn.closed.is_set():
                    break
                self._cond.wait(min(left, 0.25))
        if self.conn.closed.is_set():
            raise BrowserError(f"the browser is gone ({self.conn.close_reason})")
        if not pred():
            self.conn.post("Page.stopLoading", session=self.session)
            raise PageTimeout(what)

    def _wait_load(self, before: str, deadline: float, timeout: float) -> None:
        """Wait for the load event of a document other than ``before`` (the one shown when
        the action started)."""
        self._wait(
            lambda: self._loader != before and self._loader in self._loaded,
            deadline,
            f"the page did not finish loading within {timeout:g} s (loading was stopped)",
        )

    # -- actions --------------------------------------------------------------------------

    def navigate(self, url: str, *, timeout: float) -> None:
        """Load ``url`` and wait for its ``load`` event.

        Raises:
            NavigationError: the browser refused or failed the request (``net::ERR_...``).
            PageTimeout: no ``load`` within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        fut = self.conn.request("Page.navigate", {"url": url}, session=self.session)
        self._wait(
            lambda: fut.done(), deadline, f"the page did not start loading within {timeout:g} s"
        )
        res = fut.result()
        if res.get("errorText"):
            raise NavigationError(res["errorText"])
        loader = res.get("loaderId")
        if loader:  # a new document (a same-document navigation has none)
            self._wait(
                lambda: loader in self._loaded,
                deadline,
                f"the page did not finish loading within {timeout:g} s (loading was stopped)",
            )

    def evaluate(self, expression: str, *, timeout: float = 10.0) -> Any:
        res = self._send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, timeout
        )
        if "exceptionDetails" in res:
            detail = res["exceptionDetails"]
            msg = detail.get("exception", {}).get("description") or detail.get("text")
            raise BrowserError(f"page script failed: {msg}")
        return res.get("result", {}).get("value")

    def snapshot(self, *, timeout: float = 10.0) -> dict[str, Any]:
        """``{"url", "title", "lines", "scroll", "dialog"}`` of the page (or of its dialog)."""
        if self.dialog is not None:
            d = self.dialog
            buttons = ['[1] button "OK"'] + (
                ['[2] button "Cancel"'] if d["type"] != "alert" else []
            )
            return {
                "url": d.get("url", ""),
                "title": "",
                "lines": [f"Dialog ({d['type']}): {d.get('message', '')!r}", *buttons],
                "scroll": None,
                "dialog": d["type"],
            }
        snap = self.evaluate(_SNAPSHOT_JS, timeout=timeout)
        return {**snap, "dialog": None}

    def act(
        self, element_id: int, action: str, text: str = "", *, enter: bool = False, timeout: float
    ) -> str:
        """Click (``action="click"``) or type into element ``element_id``.

        Returns ``"load"`` when the action loaded a new page, ``"dialog"`` when it opened a
        dialog, else ``"same"``.

        Raises:
            ElementError: no such element, or it cannot take the action.
            PageTimeout: a page the action started did not finish loading in time.
        """
        deadline = time.monotonic() + timeout
        if self.dialog is not None:
            return self._answer_dialog(element_id, action, deadline, timeout)
        before = (self._loader, self._requested)
        call = f"{_ACT_JS}({int(element_id)}, {orjson.dumps(action).decode()}, "
        call += f"{orjson.dumps(text).decode()}, {'true' if enter else 'false'})"
        fut = self.conn.request(
            "Runtime.evaluate", {"expression": call, "returnByValue": True}, session=self.session
        )
        return self._settle(fut, before, deadline, timeout)

    def _settle(self, fut: Any, before: tuple[str, int], deadline: float, timeout: float) -> str:
        """Wait for the action's script to return, or for the dialog it opened (then the
        action is pending until the dialog is answered)."""
        self._wait(
            lambda: fut.done() or self.dialog is not None,
            deadline,
            f"the page did not answer within {timeout:g} s",
        )
        if not fut.done():
            self._pending = (fut, before)
            return "dialog"
        return self._finish(fut.result(), before, deadline, timeout)

    def _finish(
        self, res: dict[str, Any], before: tuple[str, int], deadline: float, timeout: float
    ) -> str:
        if "exceptionDetails" in res:
            raise BrowserError(f"page script failed: {res['exceptionDetails'].get('text')}")
        value = res.get("result", {}).get("value") or {}
        err = value.get("error")
        if err == "stale":
            raise ElementError("no such element on the current page; read_page to see its ids")
        if err == "disabled":
            raise ElementError("the element is disabled")
        if err == "option":
            raise ElementError(f"no such option; the options are {value.get('options')}")
        if err == "not_typable":
            raise ElementError("this element takes no text; click it instead")
        nav = value.get("nav")
        if nav == "load" or (nav is None and self._requested > before[1]):
            self._wait_load(before[0], deadline, timeout)
            return "load"
        return "same"

    def _answer_dialog(self, element_id: int, action: str, deadline: float, timeout: float) -> str:
        buttons = 1 if self.dialog.get("type") == "alert" else 2
        if action != "click" or not 1 <= element_id <= buttons:
            raise ElementError(
                "a dialog is open: click [1] (OK)" + (" or [2] (Cancel)" if buttons == 2 else "")
            )
        self._send("Page.handleJavaScriptDialog", {"accept": element_id == 1})
        with self._cond:
            self.dialog = None
        if self._pending is None:
            return "same"
        fut, before = self._pending
        self._pending = None
        return self._settle(fut, before, deadline, timeout)

    def scroll(self, dy: int, *, timeout: float = 10.0) -> list[int]:
        """Scroll by ``dy`` pixels; returns ``[scrollY, viewport height, page height]``."""
        return self.evaluate(
            f"window.scrollBy(0, {int(dy)}); [Math.round(scrollY), Math.round(innerHeight),"
            " Math.round((document.documentElement || {}).scrollHeight || 0)]",
            timeout=timeout,
        )

    def screenshot(self, *, timeout: float = 10.0) -> bytes:
        """A PNG of the viewport."""
        res = self._send("Page.captureScreenshot", {"format": "png"}, timeout)
        return base64.b64decode(res["data"])

    def close(self) -> None:
        """Dispose of the tab's browser context (cookies, storage and all)."""
        self.conn.unlisten(self._on_event)
        if self.conn.closed.is_set():
            return
        with contextlib.suppress(BrowserError):
            self.conn.send("Target.disposeBrowserContext", {"browserContextId": self.context_id})

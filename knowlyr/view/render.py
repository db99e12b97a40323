"""HTML of the viewer's pages: Jinja templates (autoescaped) and the links between pages.

The same templates render the live app and the static export; only :class:`Links` differs.
:class:`ServerLinks` points at the app's routes; :class:`StaticLinks` at the files of an
export (relative names in one folder, so the pages open from disk without a server), and to
nothing (plain text) for pages the export does not hold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from functools import cache
from typing import Any, Protocol
from urllib.parse import quote, urlencode

__all__ = [
    "Links",
    "ServerLinks",
    "StaticLinks",
    "compile_templates",
    "markdown_html",
    "render",
    "source_html",
]


class Links(Protocol):
    """Where a page links to; ``None`` means "not linked" (rendered as plain text)."""

    def list(self, params: dict[str, str] | None = None) -> str | None: ...

    def trajectory(self, id: str, **params: str) -> str | None: ...

    def compare(self, a: str, b: str) -> str | None: ...

    def pair(self, pair_id: str) -> str | None: ...

    def blob(self, digest: str) -> str | None: ...


class ServerLinks:
    """Links to the app's routes (``/``, ``/t/ID``, ``/compare/A/B``, ``/pair/ID``, ``/blob/H``)."""

    def list(self, params: dict[str, str] | None = None) -> str:
        return "/" + (f"?{urlencode(params)}" if params else "")

    def trajectory(self, id: str, **params: str) -> str:
        q = {k: v for k, v in params.items() if v not in (None, "")}
        return f"/t/{quote(id)}" + (f"?{urlencode(q)}" if q else "")

    def compare(self, a: str, b: str) -> str:
        return f"/compare/{quote(a)}/{quote(b)}"

    def pair(self, pair_id: str) -> str:
        return f"/pair/{quote(pair_id)}"

    def blob(self, digest: str) -> str:
        return f"/blob/{quote(digest)}"


class StaticLinks:
    """Links between the files of a static export (see :func:`knowlyr.view.export.export_pages`).

    Args:
        trajectories: ids with a page in the export (``t-<id>.html``).
        pairs: ``(chosen, rejected)`` or ``(a, b)`` pairs with a page (``pair-<a>-<b>.html``).
        pair_ids: stored pair ids -> the ``(chosen, rejected)`` page that shows them.
        blobs: blob hash -> file name under ``blobs/``.
    """

    def __init__(
        self,
        trajectories: Iterable[str] = (),
        pairs: Iterable[tuple[str, str]] = (),
        pair_ids: dict[str, tuple[str, str]] | None = None,
        blobs: dict[str, str] | None = None,
    ):
        self.trajectories = set(trajectories)
        self.pairs = {frozenset(p): p for p in pairs}
        self.pair_ids = dict(pair_ids or {})
        self.blobs = dict(blobs or {})

    @staticmethod
    def trajectory_file(id: str) -> str:
        return f"t-{id}.html"

    @staticmethod
    def pair_file(a: str, b: str) -> str:
        return f"pair-{a[:16]}-{b[:16]}.html"

    def list(self, params: dict[str, str] | None = None) -> str | None:
        return None if params else "index.html"

    def trajectory(self, id: str, **params: str) -> str | None:
        if id in self.trajectories and not any(params.values()):
            return self.trajectory_file(id)
        return None

    def compare(self, a: str, b: str) -> str | None:
        p = self.pairs.get(frozenset((a, b)))
        return self.pair_file(*p) if p else None

    def pair(self, pair_id: str) -> str | None:
        p = self.pair_ids.get(pair_id)
        return self.compare(*p) if p else None

    def blob(self, digest: str) -> str | None:
        name = self.blobs.get(digest)
        return f"blobs/{name}" if name else None


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def _when(x: datetime | None) -> str:
    return "–" if x is None else x.strftime("%Y-%m-%d %H:%M:%S")


def _outcome(success: bool | None) -> str:
    return {True: "success", False: "failure", None: "unknown"}[success]


def _lines(text: str | None) -> int:
    return 0 if not text else text.count("\n") + 1


def _count(x: int | None) -> str:
    return "unknown" if x is None else f"{x:,}"


def _seconds(x: float | None) -> str:
    """A duration as people read it: ``0.84 s``, ``2 min 5 s``, ``1 h 3 min``."""
    if x is None:
        return "unknown"
    if x < 60:
        return f"{x:.2f} s" if x < 10 else f"{x:.0f} s"
    m, s = divmod(round(x), 60)
    if m < 60:
        return f"{m} min {s} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def _highlight(code: str, lang: str | None, _attrs: Any = None) -> str:
    """``code`` as Pygments token spans (escaped) for a known language, else ``""``."""
    # pygments.formatters.html itself, not the lazy pygments.formatters: threads race in its
    # __getattr__ (a 500 "cannot import name 'HtmlFormatter'" seen under make test)
    from pygments import highlight
    from pygments.formatters.html import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    if not lang:
        return ""
    try:
        lexer = get_lexer_by_name(lang)
    except ClassNotFound:
        return ""
    return highlight(code, lexer, HtmlFormatter(nowrap=True))


@cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "highlight": _highlight})
    md.disable("image")  # a log's image link is a link, never a fetch
    return md


def markdown_html(text: str | None) -> Any:
    """``text`` (a model's thought) as markdown: paragraphs, lists, emphasis, links and fenced
    code (highlighted when the fence names a language). Raw HTML in it is shown as text,
    ``javascript:`` links are not links, images are links."""
    from markupsafe import Markup

    return Markup(_markdown().render(text or ""))


def source_html(code: str, lang: str = "bash") -> Any:
    """``code`` (a shell command, Python cell) highlighted in a ``<pre class="code">``."""
    from markupsafe import Markup, escape

    body = _highlight(code, lang) or str(escape(code))
    return Markup(f'<pre class="code {escape(lang)}"><code>{body}</code></pre>')


@cache
def _code_css() -> str:
    # the module itself, not the lazy pygments.formatters (threads race in its __getattr__)
    from pygments.formatters.html import HtmlFormatter

    css = HtmlFormatter(style="default").get_style_defs(".hl")
    keep = (x.split(" /*", 1)[0] for x in css.splitlines() if x.startswith(".hl ."))
    return "\n".join(keep)  # the token rules, without Pygments' global ones and comments


@cache
def _env() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("knowlyr.view", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=_num,
        when=_when,
        outcome=_outcome,
        lines=_lines,
        count=_count,
        seconds=_seconds,
        markdown=markdown_html,
        source=source_html,
    )
    env.globals.update(fold_chars=600, fold_lines=12, code_css=_code_css())
    return env


def compile_templates() -> None:
    """Compile every template now (the first render of each otherwise pays for it)."""
    env = _env()
    for name in env.list_templates(extensions=["jinja"]):
        env.get_template(name)


def render(template: str, links: Links, **context: Any) -> str:
    """Render ``template`` (a file of ``knowlyr/view/templates``) with ``links``."""
    return _env().get_template(template).render(links=links, **context)

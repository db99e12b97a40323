"""The documentation wiki: search, a sidebar of sections, pages with option tables, feedback.

State for a seed: 12 module pages in 3 sections, each with a table of 5 options (name, type,
default, the version that introduced it, a description), and the feedback sent so far. The
outcome is read from the state: a submitted answer is compared with the option's value in
the site's data (never with page text), feedback with the feedback recorded.

Families (:data:`FAMILIES`):

- ``docs_default``: the default value of an option (found by search);
- ``docs_since``: the version that introduced an option (found through the sidebar);
- ``docs_feedback``: send feedback (helpful or not, and a comment) on the page that documents
  an option.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from knowlyr.browser.server import Request, Response, Site, esc

__all__ = ["FAMILIES", "DocsSite", "manual"]

SECTIONS = {
    "Core": ("Cache", "Queue", "Auth", "Storage"),
    "Services": ("Scheduler", "Mailer", "Search", "Billing"),
    "Operations": ("Metrics", "Logging", "Uploads", "Webhooks"),
}
_WORDS = (
    "timeout", "retries", "pool_size", "ttl", "batch_size", "region", "backoff", "max_items",
    "compression", "prefix", "interval", "workers", "threshold", "mode", "buffer",
)  # fmt: skip
_MODES = ("strict", "lenient", "auto", "fast", "safe", "lazy", "eager")
_COMMENTS = (
    "The example is out of date.",
    "Please add a table of error codes.",
    "The defaults section was exactly what I needed.",
    "A diagram would help.",
    "Link the migration guide from here.",
)


def manual(seed: int) -> dict[str, dict[str, Any]]:
    """Every page of the manual for ``seed``: slug -> title, section, options."""
    rng = random.Random(f"docs:{seed}")
    pages = {}
    for section, modules in SECTIONS.items():
        for module in modules:
            options = []
            for word in rng.sample(_WORDS, 5):
                kind = rng.choice(("integer", "boolean", "string"))
                default = (
                    str(rng.choice((2, 3, 5, 8, 10, 16, 30, 64, 100, 250, 500)))
                    if kind == "integer"
                    else rng.choice(("true", "false"))
                    if kind == "boolean"
                    else rng.choice(_MODES)
                )
                options.append(
                    {
                        "name": f"{module.lower()}.{word}",
                        "type": kind,
                        "default": default,
                        "since": f"{rng.randint(1, 4)}.{rng.randint(0, 9)}",
                        "about": f"Sets the {word.replace('_', ' ')} of the {module} module.",
                    }
                )
            pages[module.lower()] = {"title": module, "section": section, "options": options}
    return pages


class DocsSite(Site):
    name = "docs"
    title = "Platform Docs"
    nav = (("/", "Docs home"), ("/search", "Search"))

    def build(self, seed: int) -> dict[str, Any]:
        return {"pages": manual(seed), "feedback": []}

    def routes(self) -> dict[tuple[str, str], Callable[[Request], Response]]:
        return {
            ("GET", "/"): self.home,
            ("GET", "/search"): self.search,
            ("GET", "/section/"): self.section,
            ("GET", "/page/"): self.page,
            ("POST", "/feedback"): self.feedback,
        }

    def _sidebar(self) -> str:
        return (
            "<nav><h2>Sections</h2><ul>"
            + "".join(f"<li><a href='/section/{s.lower()}'>{s}</a></li>" for s in SECTIONS)
            + "</ul></nav>"
        )

    def home(self, req: Request) -> Response:
        body = (
            "<h1>Platform Docs</h1><form action='/search' method='get'><label>Search the docs "
            "<input name='q' type='search'></label><button type='submit'>Search</button></form>"
            + self._sidebar()
        )
        return self.render("Home", body)

    def search(self, req: Request) -> Response:
        q = req.arg("q").lower()
        hits = []
        if q:
            for slug, p in self.state["pages"].items():
                names = [o["name"] for o in p["options"] if q in o["name"]]
                if q in p["title"].lower() or names:
                    hits.append((slug, p, names))
        rows = "".join(
            f"<li><a href='/page/{slug}'>{esc(p['title'])}</a> ({p['section']})"
            + (f": {', '.join(esc(n) for n in names)}" if names else "")
            + "</li>"
            for slug, p, names in hits
        )
        form = (
            "<form action='/search' method='get'><label>Search the docs <input name='q' "
            f"type='search' value='{esc(req.arg('q'))}'></label>"
            "<button type='submit'>Search</button></form>"
        )
        found = f"<p>{len(hits)} pages found</p><ul>{rows}</ul>" if q else ""
        return self.render("Search", f"<h1>Search</h1>{form}{found}")

    def section(self, req: Request) -> Response:
        name = req.path.rsplit("/", 1)[1]
        section = next((s for s in SECTIONS if s.lower() == name), None)
        if section is None:
            return Response.not_found("section")
        items = "".join(f"<li><a href='/page/{m.lower()}'>{m}</a></li>" for m in SECTIONS[section])
        return self.render(section, f"<h1>{section}</h1><ul>{items}</ul>{self._sidebar()}")

    def page(self, req: Request) -> Response:
        slug = req.path.rsplit("/", 1)[1]
        p = self.state["pages"].get(slug)
        if p is None:
            return Response.not_found("page")
        rows = "".join(
            f"<tr><td>{esc(o['name'])}</td><td>{o['type']}</td><td>{esc(o['default'])}</td>"
            f"<td>{o['since']}</td><td>{esc(o['about'])}</td></tr>"
            for o in p["options"]
        )
        body = (
            f"<h1>{esc(p['title'])}</h1><p>Section: <a href='/section/{p['section'].lower()}'>"
            f"{p['section']}</a></p><h2>Options</h2><table><tr><th>Option</th><th>Type</th>"
            f"<th>Default</th><th>Since</th><th>Description</th></tr>{rows}</table>"
            "<h2>Was this page helpful?</h2><form action='/feedback' method='post'>"
            f"<input type='hidden' name='page' value='{slug}'>"
            "<label><input type='radio' name='helpful' value='yes'> Yes</label>"
            "<label><input type='radio' name='helpful' value='no'> No</label>"
            "<label>Comment <textarea name='comment'></textarea></label>"
            "<button type='submit'>Send feedback</button></form>"
        )
        return self.render(p["title"], body)

    def feedback(self, req: Request) -> Response:
        slug, helpful = req.arg("page"), req.arg("helpful")
        if slug not in self.state["pages"]:
            return Response.not_found("page")
        if helpful not in ("yes", "no"):
            return self.render(
                "Feedback",
                "<p class='error'>Choose Yes or No before sending feedback.</p>"
                f"<a href='/page/{slug}'>Back to the page</a>",
            )
        self.state["feedback"].append(
            {"page": slug, "helpful": helpful, "comment": req.arg("comment")}
        )
        return self.render("Feedback", "<p class='notice'>Thank you for your feedback!</p>")

    def outcome(self, goal: dict[str, Any], answer: str | None) -> dict[str, Any]:
        if goal["kind"] == "answer":
            page = self.state["pages"][goal["page"]]
            option = next(o for o in page["options"] if o["name"] == goal["option"])
            want = option[goal["field"]]
            got = (answer or "").strip().strip("`'\".").lower()
            ok = got == want.lower()
            return {"success": ok, "score": float(ok), "answer": answer, "expected": want}
        fb = self.state["feedback"]
        want_fb = {"page": goal["page"], "helpful": goal["helpful"], "comment": goal["comment"]}
        ok = fb == [want_fb]
        partial = any(f["page"] == goal["page"] for f in fb)
        return {"success": ok, "score": 1.0 if ok else 0.5 if partial else 0.0, "feedback": fb}


def _pick(seed: int, family: str) -> tuple[random.Random, str, dict[str, Any], dict[str, Any]]:
    rng = random.Random(f"{family}:{seed}")
    pages = manual(seed)
    slug = rng.choice(sorted(pages))
    return rng, slug, pages[slug], rng.choice(pages[slug]["options"])


def _default(seed: int) -> dict[str, Any]:
    _, slug, page, o = _pick(seed, "docs_default")
    return {
        "instruction": (
            f"In the docs, find the default value of the option {o['name']} of the "
            f"{page['title']} module. Submit the value as your answer."
        ),
        "goal": {"kind": "answer", "page": slug, "option": o["name"], "field": "default"},
        "plan": {"query": page["title"], "page": page["title"], "option": o["name"]},
    }


def _since(seed: int) -> dict[str, Any]:
    _, slug, page, o = _pick(seed, "docs_since")
    return {
        "instruction": (
            f"In the docs, find in which version the option {o['name']} was introduced "
            f"(it is in the {page['section']} section). Submit the version as your answer."
        ),
        "goal": {"kind": "answer", "page": slug, "option": o["name"], "field": "since"},
        "plan": {"section": page["section"], "page": page["title"], "option": o["name"]},
    }


def _feedback(seed: int) -> dict[str, Any]:
    rng, slug, page, o = _pick(seed, "docs_feedback")
    helpful = rng.choice(("yes", "no"))
    comment = rng.choice(_COMMENTS)
    verdict = "helpful" if helpful == "yes" else "not helpful"
    return {
        "instruction": (
            f"In the docs, find the page that documents the option {o['name']} and send "
            f'feedback that it was {verdict}, with the comment "{comment}"'
        ),
        "goal": {"kind": "feedback", "page": slug, "helpful": helpful, "comment": comment},
        "plan": {"query": o["name"], "page": page["title"], "helpful": helpful, "comment": comment},
    }


FAMILIES: dict[str, Callable[[int], dict[str, Any]]] = {
    "docs_default": _default,
    "docs_since": _since,
    "docs_feedback": _feedback,
}

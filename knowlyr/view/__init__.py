"""``knowlyr view``: see what agents did, step by step, with the reward each step earned.

A small server-rendered web app over one store (FastAPI + Jinja, no front-end build): a
trajectory list with filters, sorting and pagination; a page per trajectory (steps, rewards
and facets, the judge's rationale, file edits as diffs, screenshots, outcome, lineage); two
trajectories of one task side by side as a preference pair; and a static export of the same
pages. It only reads the store, and binds to loopback unless told otherwise.

Example:
    >>> from knowlyr.view import create_app, export_pages                   # doctest: +SKIP
    >>> app = create_app(".knowlyr/store")           # serve with uvicorn    # doctest: +SKIP
    >>> export_pages(".knowlyr/store", ["3f2a9c1e"], "out/")                 # doctest: +SKIP

:mod:`knowlyr.view.links` gives the URLs (and markdown) that Prefect artifacts link with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowlyr.view.links import DEFAULT_URL, trajectory_url
from knowlyr.view.query import ListQuery
from knowlyr.view.reader import StoreReader

if TYPE_CHECKING:
    from knowlyr.view.app import create_app
    from knowlyr.view.export import ExportResult, export_pages

__all__ = [
    "DEFAULT_URL",
    "ExportResult",
    "ListQuery",
    "StoreReader",
    "create_app",
    "export_pages",
    "trajectory_url",
]


def __getattr__(name: str) -> Any:
    """The app and the export import FastAPI and Jinja: only when asked for."""
    if name == "create_app":
        from knowlyr.view.app import create_app

        return create_app
    if name in ("ExportResult", "export_pages"):
        from knowlyr.view import export

        return getattr(export, name)
    raise AttributeError(f"module 'knowlyr.view' has no attribute {name!r}")

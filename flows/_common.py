"""Helpers shared by the flows: the store URL and run names."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from knowlyr.store import default_url

__all__ = ["resolve_store", "run_namer"]


def resolve_store(url: str | None) -> str:
    """The store URL a flow passes to its tasks: absolute for local paths (so a cache key does
    not depend on the working directory), unchanged for object-store URLs."""
    url = url or default_url()
    if "://" in url and not url.startswith("file://"):
        return url.rstrip("/")
    path = url[len("file://") :] if url.startswith("file://") else url
    return os.path.abspath(os.path.expanduser(path))


def _field(params: Any, name: str) -> Any:
    if isinstance(params, dict):
        return params.get(name)
    return getattr(params, name, None)


def run_namer(prefix: str, describe: Callable[[Any], str]) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``prefix-<what the parameters say>``, e.g.
    ``collect-knowlyr/conversation-64ep``."""

    def name() -> str:
        from prefect.runtime import flow_run

        params = flow_run.parameters.get("params")
        try:
            what = describe(params) if params is not None else ""
        except (AttributeError, KeyError, TypeError, ValueError):
            what = ""
        return f"{prefix}-{what}" if what else prefix

    return name

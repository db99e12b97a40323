"""Versioned store: Delta Lake tables, content-addressed blobs and lineage (DESIGN.md §4).

Example:
    >>> from knowlyr.store import Store
    >>> store = Store.open("/tmp/knowlyr-store")                    # doctest: +SKIP
    >>> m = store.add_trajectories(trajs)                            # doctest: +SKIP
    >>> store.record_run("ingest", outputs={"trajectories": m})      # doctest: +SKIP
    >>> store.lineage(f"trajectories@{m.version}").runs              # doctest: +SKIP
"""

from __future__ import annotations

from knowlyr.store.labels import LabelReport
from knowlyr.store.models import GcReport, Lineage, Manifest, RunRecord, TableRef
from knowlyr.store.store import DEFAULT_STORE, Store, default_url
from knowlyr.store.tables import TABLES, TableSpec

__all__ = [
    "DEFAULT_STORE",
    "TABLES",
    "GcReport",
    "LabelReport",
    "Lineage",
    "Manifest",
    "RunRecord",
    "Store",
    "TableRef",
    "TableSpec",
    "default_url",
]

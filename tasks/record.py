"""Record agent logs into the store: convert with the recorder, dedup on the content hash."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from prefect import task
from pydantic import BaseModel

from knowlyr.store import Store
from knowlyr.store.ingest import IngestResult, ingest
from tasks._artifacts import counts_table, publish_table, republish_cached
from tasks._cache import STAGE_CACHE

__all__ = ["LogSet", "fingerprint_logs", "record_logs"]


class LogSet(BaseModel):
    """A set of log files and a digest of their names, sizes and modification times.

    The digest is the "input version" of a log directory: a new or changed file changes it,
    so ``record_logs`` recomputes; an untouched directory is a cache hit.
    """

    paths: list[str]
    files: int
    bytes: int
    digest: str


def fingerprint_logs(paths: list[str], *, what: str = "log") -> LogSet:
    """Stat every file under ``paths`` (files or directories) into a :class:`LogSet`;
    ``what`` names them in errors (``"log"``, ``"results"``)."""
    h = hashlib.sha256()
    files = size = 0
    for root in paths:
        p = Path(root)
        if not p.exists():
            raise FileNotFoundError(
                f"{what} path {root!r} does not exist: pass files or directories"
            )
        for f in sorted(p.rglob("*") if p.is_dir() else [p]):
            if f.is_file():
                st = f.stat()
                h.update(f"{f.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
                files += 1
                size += st.st_size
    return LogSet(
        paths=[os.path.abspath(p) for p in paths], files=files, bytes=size, digest=h.hexdigest()
    )


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="record-{logs.files}-logs",
    retries=1,
    on_completion=[republish_cached],
)
def record_logs(
    store_url: str,
    logs: LogSet,
    format: str | None = None,
    redact: bool = True,
    results: LogSet | None = None,
    override: bool = False,
) -> IngestResult:
    """Convert the logs with the recorder and add them to the store, labelled from results."""
    res = ingest(
        Store.open(store_url),
        logs.paths,
        format=format,
        redact=redact,
        results=results.paths if results is not None else None,
        override=override,
    )
    row = counts_table(
        "record",
        incoming=res.read,
        new=res.new,
        duplicates=res.duplicates,
        rejected=res.n_rejected,
        version=res.trajectories.version,
        table="trajectories",
    )
    publish_table("record-counts", [row], f"Logs recorded from {', '.join(logs.paths)}")
    if res.labels is not None:
        publish_table(
            "label-counts",
            [res.labels.counts()],
            f"Outcome labels from {', '.join(results.paths) if results else ''}: "
            + "; ".join(res.labels.problems(limit=5)),
        )
    return res

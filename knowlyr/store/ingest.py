"""Record other agents' logs into the store: the library side of ``knowlyr ingest``.

Every record the recorder reads ends up somewhere: a converted one as a trajectory row (its
raw bytes as a blob named by ``trajectory.source.blob``), a rejected one as a row of the
``rejected`` table with the reason (its raw bytes as a blob too). The run is recorded in
``runs`` so lineage can reach the raw logs from any later dataset or checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from knowlyr._gc import paused
from knowlyr.store.models import Manifest, RunRecord

if TYPE_CHECKING:
    from knowlyr.store.store import Store

__all__ = ["IngestResult", "ingest"]


class IngestResult(BaseModel):
    """Counts and versions of one ingest (small: fine as a Prefect result)."""

    trajectories: Manifest
    rejected: Manifest | None = None
    read: int
    new: int
    duplicates: int
    n_rejected: int
    run_id: str
    seconds: float

    @property
    def version(self) -> int:
        return self.trajectories.version


@paused()
def ingest(
    store: Store,
    paths: Iterable[str | Path] | str | Path,
    *,
    format: str | None = None,
    redact: bool = True,
    workers: int = 1,
    batch_size: int | None = None,
) -> IngestResult:
    """Convert the logs under ``paths`` with the recorder and add them to ``store``.

    Args:
        store: the target store.
        paths: log files or directories (see :func:`knowlyr.recorder.iter_records`).
        format: force a recorder format (default: detected per file).
        redact: redact secrets before anything is parsed or stored.
        workers: recorder processes (1 = in this process, 0 = one per CPU).
        batch_size: trajectories per Delta commit; ``None`` commits the whole ingest as one
            transaction (the default: one stage, one version).

    Example:
        >>> res = ingest(Store.open(), ["logs/"])                 # doctest: +SKIP
        >>> res.new, res.duplicates, res.n_rejected, res.version  # doctest: +SKIP
        (3, 0, 1, 0)
    """
    from knowlyr.recorder import Encoded, iter_encoded

    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch_size must be positive or None, got {batch_size}")
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    v_before = store.version("trajectories")
    pending = []
    rejected_rows = []
    read = new = dups = 0
    manifest: Manifest | None = None

    def flush() -> None:
        nonlocal manifest, new, dups
        m = store.add_trajectories(pending)
        new += m.new
        dups += m.duplicates
        manifest = m
        pending.clear()

    # records come serialised (their table rows) and their raw bytes are stored as blobs
    # where they were converted (by the workers, with a pool)
    for rec in iter_encoded(
        paths, format=format, redact=redact, workers=workers, put_raw=store.blobs.put
    ):
        read += 1
        if isinstance(rec, Encoded):
            pending.append(rec)
            if batch_size is not None and len(pending) >= batch_size:
                flush()
        else:
            rejected_rows.append(
                {
                    "raw_blob": store.blobs.put(rec.raw),
                    "reason": rec.reason,
                    "path": rec.path,
                    "line": rec.line,
                    "format": format,
                }
            )
    if pending or manifest is None:
        flush()
    assert manifest is not None
    rej = store.append("rejected", rejected_rows) if rejected_rows else None
    outputs: dict[str, int] = {}
    if manifest.committed or v_before != manifest.version:
        outputs["trajectories"] = manifest.version
    if rej is not None and rej.committed:
        outputs["rejected"] = rej.version
    run: RunRecord = store.record_run(
        "ingest",
        outputs=outputs,
        params={"paths": [str(p) for p in paths], "format": format, "redact": redact},
        started=started,
        status="completed",
    )
    return IngestResult(
        trajectories=manifest,
        rejected=rej,
        read=read,
        new=new,
        duplicates=dups,
        n_rejected=len(rejected_rows),
        run_id=run.run_id,
        seconds=time.perf_counter() - t0,
    )

"""Record other agents' logs into the store: the library side of ``knowlyr ingest``.

Every record the recorder reads ends up somewhere: a converted one as a trajectory row (its
raw bytes as a blob named by ``trajectory.source.blob``), a rejected one as a row of the
``rejected`` table with the reason (its raw bytes as a blob too). The run is recorded in
``runs`` so lineage can reach the raw logs from any later dataset or checkpoint: its row is
written first (``running``) and completed at the end, so the sightings of a run that is
killed name a run that exists (``knowlyr store gc`` marks it ``killed``).

Logs with a byte order mark or in UTF-16 are read as their text; ``NaN`` / ``Infinity``
values (as Python's ``json.dump`` writes non-finite floats) are stored as null and counted
per file (:attr:`IngestResult.nulled`); a symlink loop, a FIFO or a socket is a rejected
record that says so (and a FIFO is never opened for reading).

No input aborts an ingest: a file that cannot be read (a truncated ``.json.gz``, a ``.gz``
that is not gzip, a file name that is not UTF-8) is a rejected record with its path and the
reason, and a walked directory's files of no log format are counted as ``skipped``. So
``read == new + duplicates + n_rejected`` and every input file is either read or skipped.
The raw blobs (and the table's Parquet files) are written before their rows are committed,
under a journal (:meth:`Store.blob_journal`): if the ingest dies first, ``knowlyr store gc``
reclaims them.

With ``results`` (evaluation results files, see :mod:`knowlyr.labels`), each record's outcome
is labelled before it is stored (matched on ``task_id`` == instance id), and trajectories of
those instances stored earlier are labelled too (:mod:`knowlyr.store.labels`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from knowlyr._gc import paused
from knowlyr.store.labels import LabelReport
from knowlyr.store.models import Manifest, RunRecord

if TYPE_CHECKING:
    import os

    from knowlyr.recorder.redact import RedactionPolicy
    from knowlyr.store.store import Store

__all__ = ["IngestResult", "ingest"]

_NULLED_FILES = 100  # files listed in IngestResult.nulled (the count covers every file)


class IngestResult(BaseModel):
    """Counts and versions of one ingest (small: fine as a Prefect result)."""

    trajectories: Manifest
    rejected: Manifest | None = None
    read: int
    new: int
    duplicates: int
    n_rejected: int
    files: int = 0  # files read (a JSONL file may hold many records)
    n_skipped: int = 0  # files of walked directories whose suffix names no log format
    skipped: list[str] = []  # the first few of them
    n_nulled: int = 0  # NaN / Infinity values (json.dump's non-finite floats) stored as null
    nulled: dict[str, int] = {}  # per file, for the first _NULLED_FILES files that had any
    run_id: str
    seconds: float
    labels: LabelReport | None = None

    @property
    def version(self) -> int:
        return self.trajectories.version

    @property
    def converted(self) -> int:
        """Records that became trajectories (new or already stored)."""
        return self.new + self.duplicates


@paused()
def ingest(
    store: Store,
    paths: Iterable[str | Path] | str | Path,
    *,
    format: str | None = None,
    redact: bool | RedactionPolicy = True,
    workers: int = 1,
    batch_size: int | None = None,
    results: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None = None,
    override: bool = False,
) -> IngestResult:
    """Convert the logs under ``paths`` with the recorder and add them to ``store``.

    Args:
        store: the target store.
        paths: log files or directories (see :func:`knowlyr.recorder.iter_records`).
        format: force a recorder format (default: detected per file).
        redact: redact secrets before anything is parsed or stored, in the records and in the
            paths kept as ``source_path``; a :class:`~knowlyr.recorder.redact.RedactionPolicy`
            also redacts the personal-data classes it names.
        workers: recorder processes (1 = in this process, 0 = one per CPU).
        batch_size: trajectories per Delta commit; ``None`` commits the whole ingest as one
            transaction (the default: one stage, one version), written as the records are
            converted, so memory does not grow with their number.
        results: evaluation results files or directories (SWE-bench ``report.json`` trees,
            run summaries, ``{instance_id: resolved}`` maps, see :mod:`knowlyr.labels`). A
            label applies to every trajectory of its instance: new records are labelled
            before they are stored, earlier ones in one more commit when they change.
        override: apply labels that contradict what a log (or an earlier label) says;
            without it they are counted and kept in the ``rejected`` table.

    Example:
        >>> res = ingest(Store.open(), ["logs/"])                 # doctest: +SKIP
        >>> res.new, res.duplicates, res.n_rejected, res.version  # doctest: +SKIP
        (3, 0, 1, 0)
    """
    from knowlyr.recorder import Encoded, iter_encoded, shown_path
    from knowlyr.recorder.redact import redaction_policy
    from knowlyr.store import labels as lab

    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch_size must be positive or None, got {batch_size}")
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    redact = redaction_policy(redact)
    if redact and redact.key is None:  # placeholders keyed by this store (redact.py)
        redact = redact.with_key(store.redaction_key)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    run_id = uuid.uuid4().hex  # this ingest's runs row; its sightings of trajectories name it
    v_before = store.version("trajectories")
    labels, inputs, tally, known = None, None, lab._Tally(), set()
    if results is not None:  # read first: a bad results file fails before any write
        labels, files = lab._as_labels(results)
        inputs = lab._Inputs(files)
        known = store.trajectory_ids(version=v_before) if v_before is not None else set()
    rejected_rows = []
    read = new = dups = n_nulled = 0
    nulled: dict[str, int] = {}
    manifest: Manifest | None = None

    params: dict[str, object] = {
        "paths": [shown_path(p, redact) for p in paths],
        "format": format,
        "redact": redact.secrets,
    }
    if redact.pii:
        params["redact_pii"] = list(redact.pii)
    batch_versions: list[int] = []  # versions committed (and recorded) batch by batch

    def add(recs: Iterable[Encoded], *, batch: bool = False) -> None:
        nonlocal manifest, new, dups
        m = store.add_trajectories(recs, run_id=run_id)
        new += m.new
        dups += m.duplicates
        manifest = m
        if batch and m.committed:
            # every committed version has its run row, so lineage finds what wrote it
            store.record_run(
                "ingest",
                outputs={"trajectories": m.version},
                params={**params, "batch": len(batch_versions) + 1, "batch_size": batch_size},
            )
            batch_versions.append(m.version)

    files = 0
    skipped: list[str] = []

    def file_done(_p: Path) -> None:
        nonlocal files
        files += 1

    def skip(p: Path) -> None:
        skipped.append(shown_path(p, redact))

    # the run's row first, marked running: the sightings its adds write name it, so lineage
    # never meets a run id that `runs` lacks, even when this ingest is killed (`store gc`
    # then marks it killed); completed at the end, or marked failed when the ingest raises
    store.record_run("ingest", params=params, started=started, status="running", run_id=run_id)
    try:
        with store.blob_journal(run_id=run_id) as journal:
            # records come serialised (their table rows) and their raw bytes are stored as blobs
            # where they were converted (by the workers, with a pool), each named in the journal
            # first, so that gc can reclaim them if this ingest dies before its commit

            def converted() -> Iterator[Encoded]:
                """The converted records, labelled; rejected ones become ``rejected`` rows."""
                nonlocal read, n_nulled
                for rec in iter_encoded(
                    paths,
                    format=format,
                    redact=redact,
                    workers=workers,
                    put_raw=journal.put,
                    progress=file_done,
                    on_skip=skip,
                ):
                    read += 1
                    if isinstance(rec, Encoded):
                        if rec.nulled:
                            n_nulled += rec.nulled
                            where = rec.path or ""
                            if where in nulled or len(nulled) < _NULLED_FILES:
                                nulled[where] = nulled.get(where, 0) + rec.nulled
                        if (
                            labels
                            and (label := labels.get(rec.row[1])) is not None
                            and rec.id not in known
                        ):
                            rec, decision = lab.label_encoded(rec, label, override=override)
                            tally.add(rec.id, decision, label, None)
                        yield rec
                    else:
                        rejected_rows.append(
                            {
                                "raw_blob": journal.put(rec.raw),
                                "reason": rec.reason,
                                "path": rec.path,
                                "line": rec.line,
                                "format": format,
                            }
                        )

            if batch_size is None:  # one commit, streamed: memory stays at one batch of rows
                add(converted())
            else:
                recs = converted()
                while chunk := list(islice(recs, batch_size)):
                    add(chunk, batch=len(chunk) == batch_size)
                if manifest is None:
                    add([])
            assert manifest is not None
            n_rejected = len(rejected_rows)  # records the recorder could not convert
            report, label_rows = None, []
            if labels is not None and inputs is not None:
                report, label_rows = lab._finish(
                    store, labels, inputs, tally, override=override, exclude=set(tally.decisions)
                )
                if report.trajectories is not None:
                    manifest = manifest.model_copy(
                        update={
                            "version": report.trajectories.version,
                            "rows": report.trajectories.rows,
                            "committed": True,
                        }
                    )
                inputs.put(store)
                rejected_rows.extend(label_rows)
            rej = store.append("rejected", rejected_rows) if rejected_rows else None
            if report is not None and label_rows:
                report.rejected = rej
            outputs: dict[str, int] = {}
            if (manifest.committed or v_before != manifest.version) and (
                not batch_versions or manifest.version != batch_versions[-1]
            ):
                outputs["trajectories"] = manifest.version
            if rej is not None and rej.committed:
                outputs["rejected"] = rej.version
            if batch_versions:
                params["batches"] = len(batch_versions)
            if n_nulled:
                params["nulled"] = n_nulled
            if report is not None:
                params.update(override=override, labels=report.counts())
            run: RunRecord = store.record_run(
                "ingest",
                inputs=report.inputs if report is not None else None,
                outputs=outputs,
                params=params,
                started=started,
                status="completed",
                run_id=run_id,
            )
    except BaseException as e:
        _record_failure(store, run_id, params, started, e, redact)
        raise
    return IngestResult(
        trajectories=manifest,
        rejected=rej,
        read=read,
        new=new,
        duplicates=dups,
        n_rejected=n_rejected,
        files=files,
        n_skipped=len(skipped),
        skipped=skipped[:20],
        n_nulled=n_nulled,
        nulled=nulled,
        run_id=run.run_id,
        seconds=time.perf_counter() - t0,
        labels=report,
    )


def _record_failure(
    store: Store,
    run_id: str,
    params: dict[str, object],
    started: datetime,
    error: BaseException,
    redact: RedactionPolicy,
) -> None:
    """Mark the ingest's ``runs`` row failed, with the error (redacted: an OS error names
    the file); a store that cannot take the row leaves it ``running`` (gc marks it)."""
    text = f"{type(error).__name__}: {error}"[:500]
    if redact:
        text = redact.redact_text(text)[0]
    with contextlib.suppress(Exception):
        store.record_run(
            "ingest", params=params, started=started, status="failed", error=text, run_id=run_id
        )

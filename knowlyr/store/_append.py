"""Append a stream of Arrow batches to a local Delta table as one commit, in bounded memory.

``deltalake.write_deltalake`` collects its whole input before it writes a file: adding
20,000 20-step trajectories (~17 KB of JSON each) through it held ~750 MB more than the
data streamed, and that grows with the number of rows. Here pyarrow writes the Parquet files
batch by batch as the batches are pulled (a file is closed at ~:data:`_FILE_BYTES` of input),
and one Delta commit then adds them all (:func:`commit_files`), so memory stays at one batch
plus the writer's page buffers however many rows a commit holds.

The two halves are separate so a caller can count what it wrote before it commits (the
commit's metadata names new and duplicate rows). Files written but never committed (the
process died, or the caller raised) are invisible orphans, as with delta-rs: ``knowlyr store
gc`` removes them (at once for a run that kept a journal, which names each file before it is
created, see :mod:`knowlyr.store._inflight`; after its age limit otherwise), and so does
``vacuum``.

Only for local tables: the files may be written without the table lock, but the commit is
made holding it (``knowlyr.store._lock``), after :func:`drop_rows` took out what another
writer committed meanwhile, so a plain append stays dedup-safe. Object stores keep
delta-rs's MERGE (``DeltaTables._commit``).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Written", "can_append", "commit_files", "drop_rows", "read_rows", "write_files"]

_FILE_BYTES = 256 << 20  # input bytes per Parquet file (compressed ~15x for trajectories)
_ZSTD_LEVEL = 3  # as DeltaTables._writer_properties
_PAGE_BYTES = 8 << 20


@dataclass
class Written:
    """Parquet files written under a table's directory, not yet part of any version."""

    uri: str
    schema: pa.Schema
    files: list[tuple[str, int, str]] = field(default_factory=list)  # (name, size, stats)
    rows: int = 0
    no_bounds: frozenset[str] = frozenset()


class _Stats:
    """Delta file statistics (``numRecords``, ``nullCount``, ``minValues``, ``maxValues``)
    accumulated batch by batch. Min / max are kept for string and integer columns except
    the ones named in ``skip`` (a trajectory's JSON is no useful bound); untruncated, so any
    reader may prune on them."""

    def __init__(self, schema: pa.Schema, skip: frozenset[str]):
        import pyarrow as pa

        self.rows = 0
        self.nulls = dict.fromkeys(schema.names, 0)
        self.bounded = [
            f.name
            for f in schema
            if f.name not in skip
            and (
                pa.types.is_string(f.type)
                or pa.types.is_large_string(f.type)
                or pa.types.is_integer(f.type)
            )
        ]
        self.lo: dict[str, Any] = {}
        self.hi: dict[str, Any] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        for name in self.nulls:
            self.nulls[name] += batch.column(name).null_count
        for name in self.bounded:
            mm = pc.min_max(batch.column(name))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is None:
                continue
            if name not in self.lo or lo < self.lo[name]:
                self.lo[name] = lo
            if name not in self.hi or hi > self.hi[name]:
                self.hi[name] = hi

    def json(self) -> str:
        doc = {
            "numRecords": self.rows,
            "minValues": self.lo,
            "maxValues": self.hi,
            "nullCount": self.nulls,
        }
        return orjson.dumps(doc).decode()


def write_files(
    uri: str,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    *,
    no_bounds: Iterable[str] = (),
) -> Written:
    """Write ``batches`` (all of ``schema``) as Parquet files under the table at ``uri``,
    pulling one batch at a time; nothing is committed. ``no_bounds`` names columns of long,
    unique values (a trajectory's JSON): no min / max in the file statistics, no dictionary
    encoding.

    The files are written by a second thread while this one makes the next batch (pyarrow
    encodes and compresses without the GIL), at most :data:`_AHEAD` batches behind; an
    error on either side stops both and is raised here."""
    from knowlyr.store._inflight import current_file_note

    out = Written(uri, schema, no_bounds=frozenset(no_bounds))
    ahead: queue.Queue[Any] = queue.Queue(maxsize=_AHEAD)
    failed: list[BaseException] = []
    note = current_file_note()  # taken here: the writer thread does not inherit the context

    def consume() -> None:
        try:
            _write_all(out, iter(ahead.get, _END), note)
        except BaseException as e:  # handed to the producer, which raises it
            failed.append(e)
            while ahead.get() is not _END:  # drain, so that the producer never blocks
                pass

    worker = threading.Thread(target=consume, name="knowlyr-parquet-writer", daemon=True)
    worker.start()
    try:
        for batch in batches:
            if failed:
                break
            ahead.put(batch)
    finally:
        ahead.put(_END)
        worker.join()
    if failed:
        raise failed[0]
    return out


_AHEAD = 1  # batches made ahead of the writer thread (memory: this many more batches)
_END = object()


def _write_all(
    out: Written, batches: Iterator[pa.RecordBatch], note: Callable[[str], None] | None = None
) -> None:
    """:func:`write_files`' writer thread: the files, rolled at :data:`_FILE_BYTES`, each
    named to ``note`` (the run's journal) before it is created."""
    import pyarrow.parquet as pq

    uri, schema, skip = out.uri, out.schema, out.no_bounds
    writer: pq.ParquetWriter | None = None
    name, stats, size = "", _Stats(schema, skip), 0

    def close() -> None:
        nonlocal writer
        assert writer is not None
        writer.close()
        writer = None
        out.files.append((name, os.path.getsize(os.path.join(uri, name)), stats.json()))

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
                os.makedirs(uri, exist_ok=True)
                name = f"part-{len(out.files):05d}-{uuid.uuid4()}-c000.zstd.parquet"
                if note is not None:
                    note(os.path.join(uri, name))
                stats, size = _Stats(schema, skip), 0
                writer = pq.ParquetWriter(
                    os.path.join(uri, name),
                    schema,
                    compression="zstd",
                    compression_level=_ZSTD_LEVEL,
                    data_page_size=_PAGE_BYTES,
                    # a dictionary of unique values (a trajectory's JSON) is built and thrown
                    # away page after page: only the other columns get one
                    use_dictionary=[n for n in schema.names if n not in skip],
                )
            writer.write_batch(batch)
            stats.add(batch)
            out.rows += batch.num_rows
            size += batch.nbytes
            if size >= _FILE_BYTES:
                close()
        if writer is not None:
            close()
    finally:
        if writer is not None:  # the stream raised: leave no half-written file open
            writer.close()


def _batches(written: Written) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    for name, _, _ in written.files:
        yield from pq.ParquetFile(os.path.join(written.uri, name)).iter_batches()


def drop_rows(written: Written, column: str, values: set[Any]) -> None:
    """Rewrite ``written``'s files without the rows whose ``column`` is in ``values`` (rows
    another writer committed while these were written), batch by batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from knowlyr.store._inflight import current_file_note

    drop = pa.array(sorted(values), written.schema.field(column).type)
    kept = Written(written.uri, written.schema, no_bounds=written.no_bounds)
    _write_all(
        kept,
        (b.filter(pc.invert(pc.is_in(b.column(column), drop))) for b in _batches(written)),
        current_file_note(),
    )
    for name, _, _ in written.files:
        os.unlink(os.path.join(written.uri, name))
    written.files, written.rows = kept.files, kept.rows


def read_rows(written: Written) -> Callable[[], pa.RecordBatchReader]:
    """A factory of Arrow streams over ``written``'s rows (for a writer that takes streams)."""
    import pyarrow as pa

    return lambda: pa.RecordBatchReader.from_batches(written.schema, _batches(written))


def can_append(uri: str, schema: pa.Schema, storage_options: dict[str, str] | None = None) -> bool:
    """Whether files of ``schema`` can be added to the table at ``uri`` as they are: it does
    not exist yet, or its columns are exactly these (a table another writer widened needs
    delta-rs's schema merge)."""
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema

    if not DeltaTable.is_deltatable(uri, storage_options=storage_options):
        return True
    current = DeltaTable(uri, storage_options=storage_options).schema()
    return orjson.loads(current.to_json()) == orjson.loads(DeltaSchema.from_arrow(schema).to_json())


def commit_files(
    written: Written,
    *,
    meta: Mapping[str, Any],
    storage_options: dict[str, str] | None = None,
) -> None:
    """Commit ``written``'s files as one new version of the table, creating the table when it
    does not exist (check :func:`can_append` before writing them)."""
    from deltalake import CommitProperties, DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    if not written.files:
        return
    now = int(time.time() * 1000)
    adds = [AddAction(name, size, {}, now, True, stats) for name, size, stats in written.files]
    props = CommitProperties(custom_metadata={f"knowlyr.{k}": str(v) for k, v in meta.items()})
    uri = written.uri
    if not DeltaTable.is_deltatable(uri, storage_options=storage_options):
        create_table_with_add_actions(
            uri,
            DeltaSchema.from_arrow(written.schema),
            adds,
            mode="append",
            commit_properties=props,
            storage_options=storage_options,
        )
        return
    dt = DeltaTable(uri, storage_options=storage_options)
    dt.create_write_transaction(adds, "append", dt.schema(), commit_properties=props)

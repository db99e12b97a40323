"""How :meth:`Store.add_trajectories <knowlyr.store.Store.add_trajectories>` adds: the id,
row, sort key and sighting of each item (a :class:`~knowlyr.trajectory.Trajectory`, or a
ready row: the recorder's ``Encoded``, the store's ``DocumentRow``), and the streamed write
of a local store (:func:`stream`: items pulled one by one under the table lock, their rows
written as Parquet batch by batch by :mod:`knowlyr.store._append`, one commit) or of an object
store (:func:`spooled`: the rows spooled to a local file, then merged)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from knowlyr.store._delta import _digest
from knowlyr.store._lock import table_lock
from knowlyr.store.models import Manifest
from knowlyr.store.tables import rows_arrow, trajectory_row
from knowlyr.trajectory import Trajectory

if TYPE_CHECKING:
    import pyarrow as pa

    from knowlyr.store.store import Store

_STREAM_ROWS = 1000  # rows per Arrow batch handed to the Parquet writer

#: an item of ``add_trajectories``: a Trajectory, or a record carrying its table ``row``
Item = Any


def stream(
    store: Store, items: Iterator[Item], *, run_id: str | None, sightings: bool = True
) -> Manifest:
    """:func:`_stream` under a journal naming the files it writes ahead of their commit (the
    caller's, e.g. an ingest's, else one of its own): ``store gc`` reclaims them if this
    process dies first, and never takes them while it lives, however long the items take."""
    import contextlib

    from knowlyr.store._inflight import current_file_note

    own = current_file_note() is None
    with store.blob_journal() if own else contextlib.nullcontext():
        return _stream(store, items, run_id=run_id, sightings=sightings)


def _stream(
    store: Store, items: Iterator[Item], *, run_id: str | None, sightings: bool = True
) -> Manifest:
    """``store.add_trajectories`` on a local store: ``items`` are pulled one by one, each
    new one's row made at once (the item is not kept), and the rows written as Parquet
    ``_STREAM_ROWS`` at a time (:mod:`knowlyr.store._append`); then, holding the table lock
    only for that, rows another writer committed meanwhile are dropped from the files and
    they are committed as one version. The sightings of every item follow as one commit
    (unless ``sightings`` is False: the caller adds them)."""
    from knowlyr.store import _append

    table = "trajectories"
    uri = store.table_uri(table)
    seen: dict[tuple[str, str, str], tuple] = {}
    ids: list[str] = []
    new_keys: list[str] = []
    schema = rows_arrow([]).schema
    base = store.version(table)
    known = store.trajectory_ids(version=base) if base is not None else set()
    written = None
    if _append.can_append(uri, schema, store._so()):

        def batches() -> Iterator[pa.RecordBatch]:
            for rows in new_rows(items, known, ids, new_keys, seen if sightings else None):
                yield from rows.to_batches()

        written = _append.write_files(uri, schema, batches(), no_bounds=("data",))
    else:  # a table another writer widened: delta-rs merges the schemas
        trajs = list(items)
        ids = [id_of(t) for t in trajs]
        for t, i in zip(trajs, ids, strict=True):
            if sightings:
                sight(seen, t, i)
    with table_lock(store._lock_dir, table):
        now = store.version(table)
        if now != base:  # another writer committed meanwhile: its rows are not ours to add
            latest = store.trajectory_ids(version=now)
            clash = {k for k in new_keys if k in latest}
            if clash:
                _append.drop_rows(written, "id", clash)
                new_keys = [k for k in new_keys if k not in clash]
            known, base = latest, now
        if written is not None and _append.can_append(uri, schema, store._so()):
            m = _committed(store, written, base, ids, new_keys)
        else:
            if written is not None:  # widened meanwhile: the rows go through delta-rs
                data = _append.read_rows(written)
                fresh_keys = new_keys
            else:
                fresh = store._fresh(trajs, ids, known)
                fresh.sort(key=task_key)
                fresh_keys = [t.id for t in fresh]
                data = trajectory_stream(fresh) if fresh else None
            m = _merged(store, data, ids, fresh_keys, base)
    if sightings and ids:
        store._add_sightings(seen_columns(seen), run_id=run_id, version=m.version)
    return m


def _merged(
    store: Store, data: Any, ids: list[str], new_keys: list[str], base: int | None
) -> Manifest:
    """Commit ``data`` (the rows of ``new_keys``, an Arrow stream factory, or None when there
    are none) through delta-rs as the next ``trajectories`` version of an add of ``ids``."""
    return store._write(
        "trajectories",
        data,
        new=len(new_keys),
        dups=len(ids) - len(new_keys),
        digest=_digest(ids),
        base=base,
        key=["id"],
        new_keys=new_keys,
    )


def new_rows(
    items: Iterator[Item],
    known: set[str],
    ids: list[str],
    new_keys: list[str],
    seen: dict[tuple[str, str, str], tuple] | None,
) -> Iterator[pa.Table]:
    """The rows of the items whose id is neither ``known`` nor met before, ``_STREAM_ROWS`` at
    a time. Item by item: a model is serialised and dropped at once, so memory holds rows
    (their JSON), not models. Every item's id goes to ``ids``, its sighting to ``seen``
    (unless None), each new id to ``new_keys``."""
    taken: set[str] = set()
    rows: list[tuple] = []
    for t in items:
        i = id_of(t)
        ids.append(i)
        if seen is not None:
            sight(seen, t, i)
        if i not in known and i not in taken:
            taken.add(i)
            new_keys.append(i)
            rows.append(row_of(t))
            if len(rows) == _STREAM_ROWS:
                yield rows_arrow(rows)
                rows = []
    if rows:
        yield rows_arrow(rows)


def spooled(store: Store, items: Iterator[Item], *, run_id: str | None) -> Manifest:
    """``store.add_trajectories`` of an iterator on an object store: each new item's row is
    made at once (the item is not kept) and spooled to a local Arrow file ``_STREAM_ROWS``
    rows at a time, so memory stays bounded however many come; the file is then the input of
    the MERGE, read again if a concurrent commit makes it retry. The sightings follow as one
    commit, as for :func:`stream`."""
    import os
    import tempfile

    import pyarrow as pa

    table = "trajectories"
    base = store.version(table)
    known = store.trajectory_ids(version=base) if base is not None else set()
    seen: dict[tuple[str, str, str], tuple] = {}
    ids: list[str] = []
    new_keys: list[str] = []
    schema = rows_arrow([]).schema
    options = pa.ipc.IpcWriteOptions(compression="lz4")  # rows are JSON: ~4x smaller on disk
    with tempfile.TemporaryDirectory(prefix="knowlyr-add-") as tmp:
        path = os.path.join(tmp, "rows.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema, options=options) as w:
            for rows in new_rows(items, known, ids, new_keys, seen):
                w.write_table(rows)
        spool = (lambda: pa.ipc.open_stream(pa.memory_map(path))) if new_keys else None
        m = _merged(store, spool, ids, new_keys, base)
    if ids:
        store._add_sightings(seen_columns(seen), run_id=run_id, version=m.version)
    return m


def _committed(
    store: Store, written: Any, base: int | None, ids: list[str], new_keys: list[str]
) -> Manifest:
    """Commit what :func:`stream` wrote (holding the lock) and keep the row count and id
    set of the new version cached, as ``DeltaTables._write`` does."""
    from knowlyr.store import _append

    table = "trajectories"
    new, dups = len(new_keys), len(ids) - len(new_keys)
    rows = store.count(table, version=base) if base is not None else 0
    if not new:
        return Manifest(
            store=store.url,
            table=table,
            version=-1 if base is None else base,
            rows=rows,
            new=0,
            duplicates=dups,
            committed=False,
            digest=_digest(ids),
        )
    _append.commit_files(
        written, meta={"new": new, "duplicates": dups}, storage_options=store._so()
    )
    version = store.version(table)
    assert version is not None
    store._rows[(table, version)] = rows + new
    ck = (f"{table}:id", base)
    if base is None:
        store._keys[(ck[0], version)] = set(new_keys)
    elif ck in store._keys:
        store._keys[(ck[0], version)] = store._keys[ck] | set(new_keys)
    return Manifest(
        store=store.url,
        table=table,
        version=version,
        rows=rows + new,
        new=new,
        duplicates=dups,
        committed=True,
        digest=_digest(ids),
    )


_MODEL: dict[type, bool] = {}  # item type -> whether it is a Trajectory (class)


def _is_model(t: Item) -> bool:
    """Whether ``t`` is a Trajectory, by its type (pydantic's ``isinstance`` runs Python code:
    ~1 us, paid for every item of every add)."""
    return _is_model_type(type(t))


def _is_model_type(kind: type) -> bool:
    known = _MODEL.get(kind)
    if known is None:
        known = _MODEL[kind] = issubclass(kind, Trajectory)
    return known


def id_of(t: Item) -> str:
    """The content hash of an item of ``Store.add_trajectories`` (rehashing a trajectory
    whose ``id`` was cleared)."""
    if t.id or not _is_model(t):
        return t.id
    return t.rehash().id


def row_of(t: Item) -> tuple:
    return trajectory_row(t) if _is_model(t) else t.row


def task_key(t: Item) -> tuple[str, str]:
    return (t.task.task_id, t.id) if _is_model(t) else (t.row[1], t.row[0])


def sight(rows: dict[tuple[str, str, str], tuple], t: Item, i: str) -> None:
    """Note ``t``'s sighting (agent, model, source format, path, blob) under (id, agent,
    path), the first one of each kept (see :func:`sighting_columns`): a log identical to
    another of the same add is still named by its own path."""
    if _is_model(t):
        a, src = t.agent, t.source
        row = (a.name, a.model, src.format, src.path, src.blob)
    else:  # a recorder row
        r = t.row
        row = (r[4], r[5], r[9], r[10], r[11])
    rows.setdefault((i, row[0] or "", row[3] or ""), row)


#: a sighting's fields (agent, model, source format, path, blob) in a recorder row
_ROW_FIELDS = (4, 5, 9, 10, 11)

#: the ``sightings`` columns an add makes: trajectory id, agent, model, source format, path, blob
Sightings = list[list[Any]]


def sighting_columns(items: list[Item], ids: list[str]) -> Sightings:
    """The sightings of ``items`` (content hashes ``ids``) as columns, the first item of
    each (id, agent, source path) only, in order (what :func:`sight` notes item by item): read in one
    pass over the models (or with ``itemgetter`` from rows) and deduplicated with dicts,
    without a Python call per item."""
    from operator import attrgetter, itemgetter

    kinds = [_is_model_type(k) for k in dict.fromkeys(map(type, items))]
    if all(kinds):  # one pass: the models are cold in memory, each access a cache miss
        fields = [(a.name, a.model, s.format, s.path, s.blob)
                  for a, s in map(attrgetter("agent", "source"), items)]  # fmt: skip
        cols = list(map(list, zip(*fields, strict=True))) if fields else [[] for _ in range(5)]
    elif not any(kinds):
        rows = list(map(attrgetter("row"), items))
        cols = [list(map(itemgetter(k), rows)) for k in _ROW_FIELDS]
    else:  # models and rows mixed
        seen: dict[tuple[str, str, str], tuple] = {}
        for t, i in zip(items, ids, strict=True):
            sight(seen, t, i)
        return seen_columns(seen)
    agents = cols[0] if None not in cols[0] else ["" if a is None else a for a in cols[0]]
    paths = cols[3] if None not in cols[3] else ["" if p is None else p for p in cols[3]]
    keys = list(zip(ids, agents, paths, strict=True))
    first = dict.fromkeys(keys)
    if len(first) == len(keys):
        return [ids, agents, *cols[1:]]
    at = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))  # first index
    index = list(map(at.__getitem__, first))
    return [list(map(c.__getitem__, index)) for c in (ids, agents, *cols[1:])]


def seen_columns(seen: dict[tuple[str, str, str], tuple]) -> Sightings:
    """:func:`sight`'s notes as :func:`sighting_columns` gives them."""
    keys, rows = list(seen), list(seen.values())
    return [
        [k[0] for k in keys],
        [k[1] for k in keys],
        *([r[k] for r in rows] for k in (1, 2, 3, 4)),
    ]


def trajectory_stream(trajs: list[Item]) -> Callable[[], Any]:
    """A factory of Arrow streams over ``trajs`` (sorted by the caller), serialised
    ``_STREAM_ROWS`` at a time as the Delta writer pulls them (for delta-rs: the MERGE of an
    object store, or a local table whose schema another writer widened)."""
    import pyarrow as pa

    schema = rows_arrow([]).schema

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(0, len(trajs), _STREAM_ROWS):
            chunk = [row_of(t) for t in trajs[i : i + _STREAM_ROWS]]
            yield from rows_arrow(chunk, sort=False).to_batches()

    return lambda: pa.RecordBatchReader.from_batches(schema, batches())

"""The versioned store: Delta Lake tables + content-addressed blobs + lineage.

Layout under the root (a local directory or any fsspec URL)::

    <root>/tables/<name>/        one Delta table per name (trajectories, rewards, runs, ...)
    <root>/blobs/sha256/ab/cd..  content-addressed blobs (raw logs, snapshots, checkpoints)
    <root>/_locks/<name>.lock    writer locks (local stores only)
    <root>/_inflight/<id>.blobs  blobs a run wrote ahead of its commit (local only; see gc)
    <root>/redaction.key         the key of the ingests' redaction placeholders (keep it private)

Every write is one Delta transaction and returns a :class:`Manifest`; every read takes an
optional ``version`` (time travel). See DESIGN.md §4.

Concurrency and crashes
-----------------------
Delta commits are atomic: data files are written first and become visible only when the
commit file for the next version is created, so a writer killed mid-write leaves invisible
orphan files and the previous version intact. Two *appends* never conflict in Delta, so
dedup needs more than optimistic commits: on local stores a write holds an ``fcntl`` lock on
the table (released by the kernel if the writer dies) while it reads the current keys,
anti-joins the input and appends, so overlapping writers in different processes serialise
and never insert a key twice. On object stores, where no such lock exists, new rows are
committed with a Delta MERGE on the key (insert when not matched), retried on commit
conflicts. What makes a commit itself safe there is Delta's own mechanism: deltalake (>= 1.0)
creates the commit file ``_delta_log/<version>.json`` with a conditional write (S3
``PutObject`` with ``If-None-Match: *``, which S3 has honoured since 2024; GCS and Azure
have the same), so of two writers racing for one version exactly one wins and the other
re-reads the log, checks for conflicts and retries. No locking provider is needed (delta-rs
1.0 removed the DynamoDB one); an S3-compatible server without conditional writes is not
safe for several writers. Dedup itself is an anti-join on the key column only, against a per-version
cached key set, so re-adding known content reads nothing but the id column once.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from knowlyr._gc import paused
from knowlyr.errors import ConfigError, NotFoundError
from knowlyr.store import _adds
from knowlyr.store._delta import DeltaTables, _digest
from knowlyr.store._lock import table_lock
from knowlyr.store.blobs import BlobStore
from knowlyr.store.models import GcReport, Lineage, Manifest, RunRecord
from knowlyr.store.tables import TABLES
from knowlyr.trajectory import Trajectory

if TYPE_CHECKING:
    from datetime import datetime

    import polars as pl
    from deltalake import DeltaTable

    from knowlyr.labels import Label
    from knowlyr.recorder.pipeline import Encoded
    from knowlyr.store.labels import LabelReport

__all__ = ["DEFAULT_STORE", "Store"]

_ID_FILE = "store.id"
_KEY_FILE = "redaction.key"

DEFAULT_STORE = ".knowlyr/store"
# URL schemes deltalake's object stores serve (memory:// is fsspec's only: not for tables)
_TABLE_SCHEMES = frozenset(
    {"file", "s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "hdfs", "lakefs"}
)
_DECODE = 256  # trajectories decoded at once by iter_trajectories
#: Rows of the trajectories table :meth:`Store.iter_data` reads at once. A polars batch
#: iterator over a scan decodes far ahead of its reader (over 20,000 20-step trajectories it
#: peaks higher than collecting them all), so the table is read a slice at a time.
READ_ROWS = 1_000


def _fsspec_knows(protocol: str) -> bool:
    from fsspec.registry import known_implementations, registry

    return protocol in known_implementations or protocol in registry


def default_url() -> str:
    """``$KNOWLYR_STORE`` or ``.knowlyr/store`` under the working directory."""
    return os.environ.get("KNOWLYR_STORE") or DEFAULT_STORE


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


class Store(DeltaTables):
    """A versioned, content-addressed store (see the module docstring).

    Example:
        >>> store = Store.open("/tmp/knowlyr-doc-store")            # doctest: +SKIP
        >>> m = store.add_trajectories(trajs)                        # doctest: +SKIP
        >>> (m.new, m.duplicates, m.version)                         # doctest: +SKIP
        (120, 0, 0)
        >>> store.add_trajectories(trajs).new                        # doctest: +SKIP
        0
        >>> store.read("trajectories", version=0).height             # doctest: +SKIP
        120
    """

    def __init__(
        self, url: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
    ):
        url = os.fspath(url)
        if not url:
            raise ConfigError("store url must be a path or fsspec URL, got an empty string")
        scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
        if scheme not in _TABLE_SCHEMES and _fsspec_knows(scheme):  # else fsspec's error below
            raise ConfigError(
                f"store {url}: Delta tables cannot live on {scheme}:// (deltalake reads and "
                f"writes {', '.join(s + '://' for s in sorted(_TABLE_SCHEMES))} and local "
                "paths); use a local path or a bucket URL such as s3://bucket/prefix"
            )
        self.local = _is_local(url)
        if self.local:
            path = url[len("file://") :] if url.startswith("file://") else url
            self.root = os.path.abspath(os.path.expanduser(path))
            if "%" in self.root:  # delta-rs reads '%20' as ' ' in some calls and not in others
                raise ConfigError(
                    f"store path {self.root} contains '%': deltalake cannot write a table under "
                    "it (it decodes '%xx' in part of its calls, then misses its own log file); "
                    "choose a store path without '%'"
                )
            if os.path.exists(self.root) and not os.path.isdir(self.root):
                raise ConfigError(
                    f"store path {self.root} is a file, not a store folder: give a folder "
                    "(an existing store, or a new path to create one)"
                )
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"store path {self.root} cannot be created: {e}") from e
            self._lock_dir: str | None = os.path.join(self.root, "_locks")
            self._inflight_dir: str | None = os.path.join(self.root, "_inflight")
        else:
            self.root = url.rstrip("/")
            self._lock_dir = None
            self._inflight_dir = None
        self.url = url if not self.local else self.root
        self.storage_options = dict(storage_options or {})
        self.blobs = BlobStore(
            f"{self.root}/blobs", local=self.local, storage_options=self.storage_options
        )
        self._tables: dict[str, DeltaTable] = {}
        self._keys: dict[tuple[str, int], Any] = {}  # (table, version) -> set[str] | pl.DataFrame
        self._rows: dict[tuple[str, int], int] = {}

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> Store:
        """Open (creating if needed) the store at ``url``.

        Args:
            url: a local path, ``file://`` URL or fsspec URL (``s3://bucket/prefix``...).
                Default: ``$KNOWLYR_STORE``, else ``.knowlyr/store`` under the cwd.
            storage_options: passed to deltalake and fsspec (credentials, endpoint...).
        """
        return cls(url or default_url(), storage_options=storage_options)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def identity(self) -> str:
        """A random id written when the store is first asked for it (``<root>/store.id``).

        Unlike the URL it changes when a store is deleted and created again at the same
        place, so caches keyed on it (the flows' stage cache) never serve results that point
        into a store that is gone.
        """
        if self.local:
            path = os.path.join(self.root, _ID_FILE)
            try:
                with open(path, encoding="ascii") as f:
                    return f.read().strip()
            except FileNotFoundError:
                pass
            new = uuid.uuid4().hex
            tmp = f"{path}.tmp-{new}"
            with open(tmp, "w", encoding="ascii") as f:
                f.write(new)
            try:
                os.link(tmp, path)  # appears whole, and only if no other process was first
            except FileExistsError:
                with open(path, encoding="ascii") as f:
                    new = f.read().strip()
            finally:
                os.unlink(tmp)
            return new
        from knowlyr.store.blobs import url_to_fs

        fs, root = url_to_fs(self.root, self.storage_options)
        path = f"{root}/{_ID_FILE}"
        if not fs.exists(path):
            fs.pipe_file(path, uuid.uuid4().hex.encode())
        return fs.cat_file(path).decode().strip()

    @property
    def redaction_key(self) -> bytes:
        """The key of this store's redaction placeholders (``<root>/redaction.key``, 32 random
        bytes written when first asked for, mode 0600 on a local store): an ingest's
        placeholders are HMACs under it (:mod:`knowlyr.recorder.redact`), so they correlate
        within this store and nowhere else. Share the tables and exports, not this file:
        whoever holds it can test guesses against the placeholders."""
        if self.local:
            path = os.path.join(self.root, _KEY_FILE)
            try:
                with open(path, encoding="ascii") as f:
                    return bytes.fromhex(f.read().strip())
            except FileNotFoundError:
                pass
            new = os.urandom(32)
            tmp = f"{path}.tmp-{new[:8].hex()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(new.hex())
            try:
                os.link(tmp, path)  # appears whole, and only if no other process was first
            except FileExistsError:
                with open(path, encoding="ascii") as f:
                    new = bytes.fromhex(f.read().strip())
            finally:
                os.unlink(tmp)
            return new
        from knowlyr.store.blobs import url_to_fs

        fs, root = url_to_fs(self.root, self.storage_options)
        path = f"{root}/{_KEY_FILE}"
        if not fs.exists(path):
            fs.pipe_file(path, os.urandom(32).hex().encode())
        return bytes.fromhex(fs.cat_file(path).decode().strip())

    # -- trajectories ---------------------------------------------------------------------

    def trajectory_ids(self, *, version: int | None = None) -> set[str]:
        """Content hashes of every trajectory at ``version`` (cached; do not mutate)."""
        return self.keys("trajectories", key="id", version=version)

    def add_trajectories(
        self,
        trajs: Iterable[Trajectory | Encoded],
        *,
        raw: Mapping[str, bytes] | None = None,
        run_id: str | None = None,
    ) -> Manifest:
        """Add trajectories, deduplicated on their content hash (``Trajectory.id``).

        Items may be trajectories or the recorder's :class:`~knowlyr.recorder.Encoded`
        records (their table row is ready: nothing is serialised again).

        One Delta transaction for the whole batch; known or repeated ids are counted as
        duplicates and not written. ``raw`` maps a blob hash (``trajectory.source.blob``) to
        the raw log bytes it was recorded from; they are stored as blobs (verified) first.

        ``trajs`` may be any iterable: on a local store an iterator is consumed as it is
        written (each item serialised as it comes, ``_STREAM_ROWS`` rows per Parquet batch),
        so memory stays bounded however many it yields (the knowlyr ingest streams the
        recorder's records this way); the table lock is taken only to commit, and what other
        writers committed meanwhile is left out then. A list is written the same way, sorted
        by task first. On an object store an iterator's new rows are spooled to a local file
        as they come, which the MERGE then reads (memory stays bounded there too).

        Every item, new or duplicate, is also a row of the ``sightings`` table: its agent,
        its source and ``run_id``, so a duplicate from another agent, run or file keeps its
        attribution (:meth:`sightings`; one row per trajectory, agent and source path of a
        run). ``run_id`` is the run recording this add (pass the
        same id to :meth:`record_run`); default: a new id for this call.

        Example:
            >>> m = store.add_trajectories(trajs)           # doctest: +SKIP
            >>> m.new, m.duplicates, m.version              # doctest: +SKIP
            (2, 0, 0)
        """
        if raw:
            for digest, data in raw.items():
                self.blobs.put(data, digest=digest)
        if not isinstance(trajs, list):
            if self._lock_dir is not None:
                return _adds.stream(self, iter(trajs), run_id=run_id)
            return _adds.spooled(self, iter(trajs), run_id=run_id)
        # the cyclic GC paused: a list of models is millions of live objects, which each
        # collection the add's allocations trigger walks (~70 ms of re-adding 20,000); the
        # add builds no cycles that must go before it ends
        with paused():
            return self._add_list(trajs, run_id=run_id)

    def _add_list(self, trajs: list[Trajectory | Encoded], *, run_id: str | None) -> Manifest:
        ids = [_adds.id_of(t) for t in trajs]
        digest = _digest(ids)
        v = self.version("trajectories")
        known = self.trajectory_ids(version=v) if v is not None else set()
        fresh = self._fresh(trajs, ids, known)
        if not fresh:
            m = Manifest(
                store=self.url,
                table="trajectories",
                version=-1 if v is None else v,
                rows=len(known),
                new=0,
                duplicates=len(trajs),
                committed=False,
                digest=digest,
            )
        elif self._lock_dir is not None:
            fresh.sort(key=_adds.task_key)  # similar rows compress together
            m = _adds.stream(self, iter(fresh), run_id=None, sightings=False)
            m = m.model_copy(update={"duplicates": len(trajs) - m.new, "digest": digest})
        else:
            fresh.sort(key=_adds.task_key)
            m = self._write(
                "trajectories",
                _adds.trajectory_stream(fresh),
                new=len(fresh),
                dups=len(trajs) - len(fresh),
                digest=digest,
                base=v,
                key=["id"],
                new_keys=[t.id for t in fresh],
            )
        if trajs:
            sightings = _adds.sighting_columns(trajs, ids)
            self._add_sightings(sightings, run_id=run_id, version=m.version)
        return m

    def _add_sightings(self, columns: _adds.Sightings, *, run_id: str | None, version: int) -> None:
        """One ``sightings`` row per (trajectory, agent, source path) of this add (``columns``,
        made by :func:`_adds.sighting_columns`), as one commit.

        A caller's ``run_id`` may add in several batches (an ingest with ``--batch-size``),
        so rows that run already has are skipped; reading them touches only that run's
        files (one run id per commit, pruned by the file statistics).
        """
        from datetime import UTC, datetime

        import pyarrow as pa

        from knowlyr import _arrow as col
        from knowlyr.store.tables import spec_for

        ids, agents, *fields = columns
        n = len(ids)
        df = pa.Table.from_arrays(  # built from buffers: no pandas, no polars (knowlyr._arrow)
            [
                col.strings(ids, large=True),
                col.strings([run_id or uuid.uuid4().hex] * n, large=True),
                col.strings(agents, large=True),
                *(col.strings(f, large=True) for f in fields),
                col.int64s([version] * n),
                col.timestamps(datetime.now(UTC), n),
            ],
            names=list(spec_for("sightings").columns),
        )
        with table_lock(self._lock_dir, "sightings"):
            base = self.version("sightings")
            if run_id is not None and base is not None:
                import polars as pl

                path = pl.col("source_path").fill_null("").alias("_path")  # null is no path
                had = (
                    self.scan("sightings", version=base)
                    .filter(pl.col("run_id") == run_id)
                    .select("trajectory_id", "agent", path)
                    .collect()
                )
                if had.height:
                    frame = (
                        pl.from_arrow(df)
                        .with_columns(path)
                        .join(had, on=["trajectory_id", "agent", "_path"], how="anti")
                        .drop("_path")
                    )
                    df = frame.to_arrow()
            if not df.num_rows:
                return
            if self._lock_dir is not None:  # appended as the trajectories were (no MERGE)
                from knowlyr.store import _append

                uri = self.table_uri("sightings")
                if _append.can_append(uri, df.schema, self._so()):
                    written = _append.write_files(uri, df.schema, df.to_batches())
                    meta = {"new": df.num_rows, "duplicates": 0}
                    _append.commit_files(written, meta=meta, storage_options=self._so())
                    return
            self._write("sightings", df, new=df.num_rows, dups=0, digest="", base=base)

    def sightings(self, id: str | None = None, *, version: int | None = None) -> pl.DataFrame:
        """Who produced trajectory ``id`` (or every trajectory), oldest first: one row per
        (trajectory, run, agent, source path) with the blob, the trajectories version the
        add left, and when.

        Example:
            >>> store.sightings(t.id)["agent"].to_list()   # doctest: +SKIP
            ['claude', 'gpt']
        """
        import polars as pl

        f = None if id is None else pl.col("trajectory_id").str.starts_with(id)
        return self.read("sightings", version=version, filter=f).sort("seen_at")

    @staticmethod
    def _fresh(trajs: list[Any], ids: list[str], known: set[str]) -> list[Any]:
        seen: set[str] = set()
        out = []
        for t, i in zip(trajs, ids, strict=True):
            if i not in known and i not in seen:
                seen.add(i)
                out.append(t)
        return out

    def get_trajectory(self, id: str, *, version: int | None = None) -> Trajectory:
        """The trajectory with content hash ``id`` (a unique prefix of >= 8 chars works)."""
        import polars as pl

        if len(id) < 64:
            if len(id) < 8:
                raise ConfigError(
                    f"trajectory id prefix must have at least 8 characters, got {id!r}"
                )
            f = pl.col("id").str.starts_with(id)
        else:
            f = pl.col("id") == id
        df = self.read("trajectories", version=version, filter=f, columns=["id", "data"])
        if df.height == 0:
            raise NotFoundError(f"no trajectory {id} in {self.url} (version {version or 'latest'})")
        if df.height > 1:
            raise ConfigError(
                f"trajectory id prefix {id!r} is ambiguous ({df.height} matches): give more characters"
            )
        return Trajectory.model_validate_json(df["data"][0])

    def iter_trajectories(
        self,
        *,
        version: int | None = None,
        ids: Iterable[str] | None = None,
        filter: pl.Expr | None = None,
        batch_size: int | None = None,
    ) -> Iterator[Trajectory]:
        """Trajectories at ``version``, optionally restricted to ``ids`` and a polars filter
        on the query columns (``pl.col("success")``, ``pl.col("task_id") == "t1"``...);
        ``batch_size``: rows of the table read at once (None: :data:`READ_ROWS`)."""
        import polars as pl

        where = None if ids is None else pl.col("id").is_in(list(ids))
        if filter is not None:
            where = filter if where is None else where & filter
        # streamed: memory stays at one slice of JSON however large the table is; they are
        # decoded _DECODE at a time with the cyclic GC paused (~6x cheaper when the caller
        # keeps them all, see knowlyr._gc)
        validate = Trajectory.model_validate_json
        for datas in self.iter_data(version=version, filter=where, slice_rows=batch_size):
            for i in range(0, len(datas), _DECODE):
                with paused():
                    trajs = [validate(data) for data in datas[i : i + _DECODE]]
                yield from trajs

    def iter_data(
        self,
        *,
        version: int | None = None,
        filter: pl.Expr | None = None,
        rows: tuple[int, int] | None = None,
        slice_rows: int | None = None,
    ) -> Iterator[list[str]]:
        """The trajectories' JSON documents (the ``data`` column) at ``version``, in table
        order, as lists: rows ``rows`` (``(start, stop)``; None: all) that ``filter`` keeps,
        read ``slice_rows`` rows at a time (None: :data:`READ_ROWS`; memory: one slice,
        whatever the table's size).
        With a filter, the query columns are read first and only the slices holding a match
        are read again with their ``data``."""
        import polars as pl

        slice_rows = READ_ROWS if slice_rows is None else slice_rows
        if slice_rows < 1:
            raise ConfigError(f"slice_rows must be positive, got {slice_rows}")
        if rows is not None and not 0 <= rows[0] <= rows[1]:
            raise ConfigError(f"rows must be (start, stop) with 0 <= start <= stop, got {rows}")
        v = self.version("trajectories") if version is None else version
        if v is None:
            return
        lf = self.scan("trajectories", version=v)
        lo, hi = rows if rows is not None else (0, self.count("trajectories", version=v))
        starts: Iterable[int] = range(lo, hi, slice_rows)
        if filter is not None:
            at = (
                lf.slice(lo, hi - lo)
                .with_row_index("_row", offset=lo)
                .filter(filter)
                .select((pl.col("_row") - lo) // slice_rows * slice_rows + lo)
                .unique(maintain_order=True)
                .collect()
            )
            starts = at.to_series().to_list()
        for start in starts:
            part = lf.slice(start, min(slice_rows, hi - start))
            if filter is not None:
                part = part.filter(filter)
            yield part.select("data").collect().get_column("data").to_list()

    def read_trajectories(
        self,
        *,
        version: int | None = None,
        ids: Iterable[str] | None = None,
        filter: pl.Expr | None = None,
        limit: int | None = None,
    ) -> list[Trajectory]:
        """Like :meth:`iter_trajectories`, as a list (at most ``limit``)."""
        out = []
        with paused():  # see knowlyr._gc: the caller keeps them all
            for t in self.iter_trajectories(version=version, ids=ids, filter=filter):
                if limit is not None and len(out) >= limit:
                    break
                out.append(t)
        return out

    def attach_labels(
        self,
        results: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | Mapping[str, Label],
        *,
        override: bool = False,
    ) -> LabelReport:
        """Apply evaluation labels (SWE-bench reports, run summaries, ``{id: resolved}`` maps)
        to every stored trajectory of their instances, as one new version of
        ``trajectories``; see :func:`knowlyr.store.labels.attach_labels`.

        Example:
            >>> rep = store.attach_labels(["logs/run_evaluation/run1"])  # doctest: +SKIP
            >>> rep.applied, rep.unknown, rep.trajectories.version      # doctest: +SKIP
            (12, ['astropy__astropy-7166'], 4)
        """
        from knowlyr.store.labels import attach_labels

        return attach_labels(self, results, override=override)

    # -- blobs ----------------------------------------------------------------------------

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` content-addressed; returns its sha256 hex."""
        return self.blobs.put(data)

    def get_blob(self, digest: str) -> bytes:
        """The blob's bytes; raises BlobCorruptedError when they no longer match ``digest``."""
        return self.blobs.get(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blobs.has(digest)

    def gc(self, *, dry_run: bool = True, min_age_s: float = 3600.0) -> GcReport:
        """Delete blobs no table or run references (``dry_run`` only reports them).

        Referenced: every string column whose name contains ``blob`` or is ``checkpoint``, in
        every table at its latest version, plus the blob hashes in run inputs/outputs. So a
        blob you want to keep (a checkpoint, a calibration map) must be named by a row or by
        the run that made it: ``store.record_run("calibrate", outputs={"calibration": h})``.

        Blobs that runs wrote ahead of their commit are journaled (``<root>/_inflight``, see
        :mod:`knowlyr.store._inflight`; the store's ingest does this): the unreferenced blobs
        of a run that is no longer in flight (killed, or it raised) are deleted whatever
        their age, and the blobs of a run still in flight are kept. Other unreferenced blobs
        younger than ``min_age_s`` are kept too, so a writer that stored a blob without a
        journal and has not committed its rows yet is safe; leftover temporary files older
        than that go too.

        Table files go the same way (local stores): a Parquet file in a table's folder that
        no Delta commit or checkpoint adds or removes (a run killed between writing and
        committing it) is deleted when the run's journal names it and the run is gone, or
        when it is older than ``min_age_s`` (``table_files``); files older versions read are
        kept (``vacuum`` is what drops those). A dead run's ``runs`` row still marked
        ``running`` becomes ``killed`` (``killed_runs``).

        Example:
            >>> store.gc(dry_run=True, min_age_s=0).unreferenced   # doctest: +SKIP
            ['9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08']
        """
        import time

        from knowlyr.store import _orphans
        from knowlyr.store._inflight import Journals, scan_journals
        from knowlyr.store.lineage import mark_killed, referenced_blobs

        # table files listed before the journals are read (a live run names each file in its
        # journal before creating it), journals before references: a run that commits and
        # finishes in between has its blobs and files named by one or the other
        files = _orphans.table_files(f"{self.root}/tables") if self.local else []
        journals = scan_journals(self._inflight_dir) if self._inflight_dir else Journals()
        refs = referenced_blobs(self)
        now = time.time()
        scanned, unref, size, kept = 0, [], 0, 0
        for h in self.blobs.iter_hashes():
            scanned += 1
            if h in refs:
                continue
            if h in journals.live:
                kept += 1
                continue
            if h not in journals.dead:
                path = self.blobs.path(h) if self.local else self.blobs._fs_path(h)
                if now - self.blobs.mtime(path) < min_age_s:
                    continue
            unref.append(h)
            size += self.blobs.size(h)
        stray, kept_files = _orphans.uncommitted(
            files,
            live=journals.live_tables,
            dead=journals.dead_tables,
            now=now,
            min_age_s=min_age_s,
        )
        deleted = 0
        killed: list[str] = []
        if not dry_run:
            for f in stray:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f.path)
            killed = mark_killed(self, journals.dead_runs) if journals.dead_runs else []
            for h in unref:
                self.blobs.remove(h)
                deleted += 1
            for tmp in self.blobs.iter_temp():
                if now - self.blobs.mtime(tmp) >= min_age_s:
                    self.blobs.remove_path(tmp)
            for path in journals.dead_files:  # their blobs are reclaimed: the journals go
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        return GcReport(
            dry_run=dry_run,
            scanned=scanned,
            referenced=scanned - len(unref),
            unreferenced=unref,
            bytes=size,
            deleted=deleted,
            aborted_runs=sum(p.endswith(".blobs") for p in journals.dead_files),
            in_flight=kept + kept_files,
            table_files=[f.name for f in stray],
            table_bytes=sum(f.size for f in stray),
            killed_runs=killed,
        )

    def blob_journal(self, *, run_id: str | None = None):
        """A :class:`~knowlyr.store._inflight.BlobJournal` for a run that writes blobs (and
        table files) ahead of the rows naming them (a no-op on object stores): ``with
        store.blob_journal() as j: j.put(raw)``. ``run_id``: the run's ``runs`` row, marked
        ``killed`` by gc if the run dies. See :meth:`gc`."""
        from knowlyr.store._inflight import BlobJournal

        return BlobJournal(self.blobs, self._inflight_dir, run_id)

    # -- runs and lineage -----------------------------------------------------------------

    def record_run(
        self,
        stage: str,
        *,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        code_version: str | None = None,
        started: datetime | None = None,
        ended: datetime | None = None,
        status: str = "completed",
        error: str | None = None,
        run_id: str | None = None,
    ) -> RunRecord:
        """Record one stage run in the ``runs`` table (lineage); see :mod:`knowlyr.store.lineage`."""
        from knowlyr.store.lineage import record_run

        return record_run(
            self,
            stage,
            inputs=inputs,
            outputs=outputs,
            params=params,
            code_version=code_version,
            started=started,
            ended=ended,
            status=status,
            error=error,
            run_id=run_id,
        )

    def runs(self, *, stage: str | None = None, version: int | None = None) -> list[RunRecord]:
        """Recorded runs, oldest first (optionally one stage)."""
        from knowlyr.store.lineage import read_runs

        return read_runs(self, stage=stage, version=version)

    def lineage(self, ref: str | Manifest) -> Lineage:
        """Walk back from ``ref`` to the runs, trajectories and raw logs that made it.

        ``ref``: ``"table@version"`` (e.g. ``"datasets@4"``), a table name (latest version),
        a blob hash (e.g. a checkpoint), a trajectory id, a run id, or a Manifest.
        """
        from knowlyr.store.lineage import lineage

        return lineage(self, ref)


def known_tables() -> list[str]:
    return list(TABLES)

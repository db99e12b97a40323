"""The versioned store: Delta Lake tables + content-addressed blobs + lineage.

Layout under the root (a local directory or any fsspec URL)::

    <root>/tables/<name>/        one Delta table per name (trajectories, rewards, runs, ...)
    <root>/blobs/sha256/ab/cd..  content-addressed blobs (raw logs, snapshots, checkpoints)
    <root>/_locks/<name>.lock    writer locks (local stores only)

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
conflicts. Dedup itself is an anti-join on the key column only, against a per-version
cached key set, so re-adding known content reads nothing but the id column once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from knowlyr.errors import ConfigError, NotFoundError, StoreError
from knowlyr.store._lock import table_lock
from knowlyr.store.blobs import BlobStore
from knowlyr.store.models import GcReport, Lineage, Manifest, RunRecord, TableRef
from knowlyr.store.tables import (
    TABLES,
    conform,
    empty_frame,
    spec_for,
    trajectory_arrow,
)

if TYPE_CHECKING:
    from datetime import datetime

    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable

    from knowlyr.trajectory import Trajectory

__all__ = ["DEFAULT_STORE", "Store"]

DEFAULT_STORE = ".knowlyr/store"
_MAX_COMMIT_RETRIES = 20
_ZSTD_LEVEL = 3
_STREAM_ROWS = 1000  # trajectories serialised per Arrow batch while the writer compresses


def default_url() -> str:
    """``$KNOWLYR_STORE`` or ``.knowlyr/store`` under the working directory."""
    return os.environ.get("KNOWLYR_STORE") or DEFAULT_STORE


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _digest(keys: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()


def _check_table(table: str) -> str:
    if not table or not table.replace("_", "").isalnum() or not table[0].isalpha():
        raise ConfigError(
            f"table name must be letters, digits and underscores starting with a letter, got {table!r}"
        )
    return table


class Store:
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

    def __init__(self, url: str, *, storage_options: Mapping[str, str] | None = None):
        if not url:
            raise ConfigError("store url must be a path or fsspec URL, got an empty string")
        self.local = _is_local(url)
        if self.local:
            path = url[len("file://") :] if url.startswith("file://") else url
            self.root = os.path.abspath(os.path.expanduser(path))
            os.makedirs(self.root, exist_ok=True)
            self._lock_dir: str | None = os.path.join(self.root, "_locks")
        else:
            self.root = url.rstrip("/")
            self._lock_dir = None
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
        cls, url: str | None = None, *, storage_options: Mapping[str, str] | None = None
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

    # -- tables ---------------------------------------------------------------------------

    def table_uri(self, table: str) -> str:
        return f"{self.root}/tables/{_check_table(table)}"

    def _so(self) -> dict[str, str] | None:
        return self.storage_options or None

    def _dt(self, table: str) -> DeltaTable | None:
        """The latest snapshot of ``table`` (refreshed), or None when it does not exist."""
        from deltalake import DeltaTable

        dt = self._tables.get(table)
        if dt is not None:
            dt.update_incremental()
            return dt
        uri = self.table_uri(table)
        if not DeltaTable.is_deltatable(uri, storage_options=self._so()):
            return None
        dt = DeltaTable(uri, storage_options=self._so())
        self._tables[table] = dt
        return dt

    def version(self, table: str) -> int | None:
        """The latest version of ``table``, or None when it was never written."""
        dt = self._dt(table)
        return None if dt is None else dt.version()

    def ref(self, table: str, *, version: int | None = None) -> TableRef:
        """A small, hashable pointer to ``table`` at ``version`` (latest by default): what a
        stage that reads the table should take as input, so its cache key follows the data.

        Example:
            >>> store.ref("trajectories")               # doctest: +SKIP
            TableRef(store='/work/.knowlyr/store', table='trajectories', version=3, rows=1200)
        """
        v = self._resolve(table, version)
        if v is None:
            raise NotFoundError(
                f"no table {table!r} in {self.url}; existing: {sorted(self.tables())}"
            )
        return TableRef(store=self.url, table=table, version=v, rows=self.count(table, version=v))

    def tables(self) -> dict[str, int]:
        """Every existing table and its latest version."""
        names: list[str] = []
        if self.local:
            base = os.path.join(self.root, "tables")
            names = sorted(os.listdir(base)) if os.path.isdir(base) else []
        else:
            import fsspec

            fs, path = fsspec.core.url_to_fs(f"{self.root}/tables", **self.storage_options)
            if fs.exists(path):
                names = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))
        out = {}
        for name in names:
            v = self.version(name)
            if v is not None:
                out[name] = v
        return out

    def _resolve(self, table: str, version: int | None) -> int | None:
        latest = self.version(table)
        if version is None:
            return latest
        if latest is None or version < 0 or version > latest:
            raise NotFoundError(
                f"table {table!r} has no version {version} (latest: {latest}) in {self.url}"
            )
        return version

    def scan(self, table: str, *, version: int | None = None) -> pl.LazyFrame:
        """A lazy polars frame over ``table`` at ``version`` (latest by default)."""
        import polars as pl

        v = self._resolve(table, version)
        if v is None:
            return empty_frame(spec_for(table)).lazy()
        return pl.scan_delta(self.table_uri(table), version=v, storage_options=self._so())

    def read(
        self,
        table: str,
        *,
        version: int | None = None,
        filter: pl.Expr | None = None,
        columns: list[str] | None = None,
    ) -> pl.DataFrame:
        """Read ``table`` at ``version`` (time travel), optionally filtered and projected.

        Example:
            >>> store.read("rewards", filter=pl.col("total") > 0.5, columns=["trajectory_id"])  # doctest: +SKIP
        """
        lf = self.scan(table, version=version)
        if filter is not None:
            lf = lf.filter(filter)
        if columns is not None:
            lf = lf.select(columns)
        return lf.collect()

    def count(self, table: str, *, version: int | None = None) -> int:
        v = self._resolve(table, version)
        if v is None:
            return 0
        if (table, v) not in self._rows:
            import polars as pl

            self._rows[(table, v)] = self.scan(table, version=v).select(pl.len()).collect().item()
        return self._rows[(table, v)]

    def history(self, table: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Commits of ``table``, newest first: version, timestamp (ms), operation, metadata."""
        dt = self._dt(table)
        if dt is None:
            raise NotFoundError(
                f"no table {table!r} in {self.url}; existing: {sorted(self.tables())}"
            )
        return dt.history(limit)

    def keys(
        self,
        table: str,
        *,
        key: str | list[str] | tuple[str, ...] | None = None,
        version: int | None = None,
    ) -> Any:
        """The key set of ``table`` at ``version``: a ``set[str]`` for a one-column key, else a
        polars frame of the key columns. Cached per version (versions are immutable)."""
        cols = self._key_cols(table, key)
        v = self._resolve(table, version)
        if v is None:
            return set() if len(cols) == 1 else empty_frame(spec_for(table)).select(cols)
        ck = (f"{table}:{','.join(cols)}", v)
        if ck not in self._keys:
            df = self.scan(table, version=v).select(cols).collect()
            self._keys[ck] = set(df[cols[0]].to_list()) if len(cols) == 1 else df
            self._rows[(table, v)] = df.height
        return self._keys[ck]

    def _key_cols(self, table: str, key: str | list[str] | tuple[str, ...] | None) -> list[str]:
        if key is None:
            spec = spec_for(table)
            if spec is None:
                raise ConfigError(f"table {table!r} has no declared key: pass key=column(s)")
            return list(spec.key)
        return [key] if isinstance(key, str) else list(key)

    def added(
        self,
        table: str,
        version: int,
        *,
        since: int | None = None,
        key: str | list[str] | None = None,
    ) -> pl.DataFrame:
        """Rows of ``table`` present at ``version`` but not at ``since`` (default version-1)."""

        cols = self._key_cols(table, key)
        v = self._resolve(table, version)
        rows = self.scan(table, version=v)
        base = version - 1 if since is None else since
        if base < 0:
            return rows.collect()
        old = self.scan(table, version=base).select(cols)
        return rows.join(old, on=cols, how="anti").collect()

    # -- writes ---------------------------------------------------------------------------

    def append(
        self,
        table: str,
        data: pl.DataFrame | pa.Table | list[dict[str, Any]],
        *,
        key: str | list[str] | None = None,
        on_duplicate: Literal["skip", "update", "append"] = "skip",
    ) -> Manifest:
        """Add rows to ``table`` in one Delta transaction; dedup on ``key``.

        Args:
            table: table name (``rewards``, ``preferences``, ``datasets``, ``evaluations``,
                ``runs`` or any new name).
            data: a polars/arrow frame or a list of row dicts. Declared columns of known
                tables are cast (see :mod:`knowlyr.store.tables`); extra columns are kept.
            key: dedup columns (default: the table's declared key).
            on_duplicate: ``"skip"`` keeps existing rows (re-running a stage adds nothing and
                leaves the version unchanged); ``"update"`` overwrites them (Delta MERGE);
                ``"append"`` writes every row without dedup.

        Example:
            >>> store.append("rewards", [{"trajectory_id": tid, "config_hash": "c1",
            ...                           "total": 0.8, "per_step": [0.5, 1.0]}])  # doctest: +SKIP
        """
        import polars as pl

        if on_duplicate not in ("skip", "update", "append"):
            raise ConfigError(
                f"on_duplicate must be 'skip', 'update' or 'append', got {on_duplicate!r}"
            )
        _check_table(table)
        if isinstance(data, list):
            df = pl.DataFrame(data, infer_schema_length=None) if data else pl.DataFrame()
        elif isinstance(data, pl.DataFrame):
            df = data
        else:
            df = pl.from_arrow(data)
        cols = self._key_cols(table, key) if on_duplicate != "append" else []
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ConfigError(
                f"rows for table {table!r} lack key column(s) {missing}: add them or pass key="
            )
        spec = spec_for(table)
        if spec is not None and "created_at" in spec.columns and "created_at" not in df.columns:
            from datetime import UTC, datetime

            df = df.with_columns(pl.lit(datetime.now(UTC)).alias("created_at"))
        df = conform(df, spec)
        if on_duplicate == "append":
            with table_lock(self._lock_dir, table):
                v0 = self.version(table)
                return self._write(table, df, new=df.height, dups=0, digest="", base=v0)
        nulls = df.select(pl.any_horizontal([pl.col(c).is_null() for c in cols]).sum()).item()
        if nulls:
            raise ConfigError(
                f"{nulls} row(s) for table {table!r} have a null key ({cols}): fill them"
            )
        n_in = df.height
        df = df.unique(subset=cols, keep="first", maintain_order=True)
        digest = _digest(
            df.select(pl.concat_str([pl.col(c).cast(pl.String) for c in cols], separator="\x1f"))
            .to_series()
            .to_list()
        )
        with table_lock(self._lock_dir, table):
            v0 = self.version(table)
            if on_duplicate == "update" and v0 is not None:
                return self._merge_update(table, df, cols, n_in, digest)
            existing = self.keys(table, key=cols, version=v0)
            if len(cols) == 1:
                new_df = df.filter(~pl.col(cols[0]).is_in(list(existing))) if existing else df
            else:
                new_df = df.join(existing, on=cols, how="anti") if existing.height else df
            return self._write(
                table,
                new_df,
                new=new_df.height,
                dups=n_in - new_df.height,
                digest=digest,
                base=v0,
                key=cols,
            )

    def _write(
        self,
        table: str,
        data: pl.DataFrame | pa.Table | Callable[[], Any] | None,
        *,
        new: int,
        dups: int,
        digest: str,
        base: int | None,
        key: list[str] | None = None,
        new_keys: list[str] | None = None,
    ) -> Manifest:
        """Commit ``data`` (already deduped against ``base``) as the next version of ``table``.

        ``data`` may be a factory returning a fresh Arrow stream (so a large batch is
        serialised while the writer compresses, and can be replayed on a commit retry);
        ``new_keys`` are then the single-column keys it holds (to extend the key cache).
        """
        import polars as pl

        if new == 0 or data is None:
            rows = self.count(table, version=base) if base is not None else 0
            return Manifest(
                store=self.url,
                table=table,
                version=-1 if base is None else base,
                rows=rows,
                new=0,
                duplicates=dups,
                committed=False,
                digest=digest,
            )
        if isinstance(data, pl.DataFrame):
            data = data.to_arrow()
        if key is not None and len(key) == 1 and new_keys is None and not callable(data):
            new_keys = data.column(key[0]).to_pylist()
        factory = data if callable(data) else (lambda: data)
        total = new + dups
        version, inserted = self._commit(
            table, factory, key=key, meta={"new": new, "duplicates": dups}
        )
        if inserted is None and base is not None and version == base + 1:
            rows = self.count(table, version=base) + new  # we held the lock: exact
            self._rows[(table, version)] = rows
            ck = (f"{table}:{key[0]}", base) if key is not None and len(key) == 1 else None
            if ck is not None and ck in self._keys and new_keys is not None:
                self._keys[(ck[0], version)] = self._keys[ck] | set(new_keys)
        else:
            new = new if inserted is None else inserted
            rows = self.count(table, version=version)
        return Manifest(
            store=self.url,
            table=table,
            version=version,
            rows=rows,
            new=new,
            duplicates=total - new,
            committed=True,
            digest=digest,
        )

    def _writer_properties(self) -> Any:
        from deltalake import WriterProperties

        return WriterProperties(
            compression="ZSTD", compression_level=_ZSTD_LEVEL, data_page_size_limit=8 << 20
        )

    def _commit(
        self,
        table: str,
        factory: Callable[[], Any],
        *,
        key: list[str] | None,
        meta: dict[str, Any],
    ) -> tuple[int, int | None]:
        """Write ``factory()`` as one transaction.

        Returns the new version and, for a MERGE, how many rows it inserted (None for a
        plain append, where every row was inserted).
        """
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError

        uri = self.table_uri(table)
        props = CommitProperties(custom_metadata={f"knowlyr.{k}": str(v) for k, v in meta.items()})
        wp = self._writer_properties()
        inserted: int | None = None
        if self._lock_dir is not None or key is None:
            # Local: we hold the table lock, so a plain append is dedup-safe.
            try:
                write_deltalake(
                    uri,
                    factory(),
                    mode="append",
                    schema_mode="merge",
                    writer_properties=wp,
                    commit_properties=props,
                    storage_options=self._so(),
                )
            except Exception as e:
                raise StoreError(f"could not write table {table!r} in {self.url}: {e}") from e
        else:
            # Object store: no lock; a MERGE on the key inserts only unseen keys, and a commit
            # conflict with a concurrent writer is retried against the new snapshot.
            pred = " AND ".join(f"t.{c} = s.{c}" for c in key)
            for attempt in range(_MAX_COMMIT_RETRIES):
                dt = self._dt(table)
                try:
                    if dt is None:
                        write_deltalake(
                            uri,
                            factory(),
                            mode="error",
                            writer_properties=wp,
                            commit_properties=props,
                            storage_options=self._so(),
                        )
                    else:
                        metrics = (
                            dt.merge(
                                factory(),
                                pred,
                                source_alias="s",
                                target_alias="t",
                                merge_schema=True,
                                writer_properties=wp,
                                commit_properties=props,
                            )
                            .when_not_matched_insert_all()
                            .execute()
                        )
                        inserted = int(metrics.get("num_target_rows_inserted", 0))
                    break
                except (CommitFailedError, FileExistsError) as e:
                    if attempt == _MAX_COMMIT_RETRIES - 1:
                        raise StoreError(
                            f"gave up writing {table!r} after {attempt + 1} conflicts: {e}"
                        ) from e
                except Exception as e:
                    if dt is None and "exists" in str(e).lower():
                        continue
                    raise StoreError(f"could not write table {table!r} in {self.url}: {e}") from e
        v = self.version(table)
        assert v is not None
        return v, inserted

    def _merge_update(
        self, table: str, df: pl.DataFrame, cols: list[str], n_in: int, digest: str
    ) -> Manifest:
        dt = self._dt(table)
        assert dt is not None
        pred = " AND ".join(f"t.{c} = s.{c}" for c in cols)
        try:
            metrics = (
                dt.merge(
                    df.to_arrow(),
                    pred,
                    source_alias="s",
                    target_alias="t",
                    merge_schema=True,
                    writer_properties=self._writer_properties(),
                )
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        except Exception as e:
            raise StoreError(f"could not merge into table {table!r} in {self.url}: {e}") from e
        v = self.version(table)
        assert v is not None
        new = int(metrics.get("num_target_rows_inserted", 0))
        return Manifest(
            store=self.url,
            table=table,
            version=v,
            rows=self.count(table, version=v),
            new=new,
            duplicates=n_in - new,
            committed=True,
            digest=digest,
        )

    # -- trajectories ---------------------------------------------------------------------

    def trajectory_ids(self, *, version: int | None = None) -> set[str]:
        """Content hashes of every trajectory at ``version`` (cached; do not mutate)."""
        return self.keys("trajectories", key="id", version=version)

    def add_trajectories(
        self,
        trajs: Iterable[Trajectory],
        *,
        raw: Mapping[str, bytes] | None = None,
    ) -> Manifest:
        """Add trajectories, deduplicated on their content hash (``Trajectory.id``).

        One Delta transaction for the whole batch; known or repeated ids are counted as
        duplicates and not written. ``raw`` maps a blob hash (``trajectory.source.blob``) to
        the raw log bytes it was recorded from; they are stored as blobs (verified) first.

        Example:
            >>> m = store.add_trajectories(trajs)           # doctest: +SKIP
            >>> m.new, m.duplicates, m.version              # doctest: +SKIP
            (2, 0, 0)
        """
        trajs = trajs if isinstance(trajs, list) else list(trajs)
        if raw:
            for digest, data in raw.items():
                self.blobs.put(data, digest=digest)
        ids = [t.id or t.rehash().id for t in trajs]
        digest = _digest(ids)
        known = self.trajectory_ids()
        fresh = self._fresh(trajs, ids, known)
        if not fresh:
            v = self.version("trajectories")
            return Manifest(
                store=self.url,
                table="trajectories",
                version=-1 if v is None else v,
                rows=len(known),
                new=0,
                duplicates=len(trajs),
                committed=False,
                digest=digest,
            )
        with table_lock(self._lock_dir, "trajectories"):
            base = self.version("trajectories")
            latest = self.trajectory_ids(version=base)
            if latest is not known:
                fresh = self._fresh(trajs, ids, latest)
            return self._write(
                "trajectories",
                _trajectory_stream(fresh) if fresh else None,
                new=len(fresh),
                dups=len(trajs) - len(fresh),
                digest=digest,
                base=base,
                key=["id"],
                new_keys=[t.id for t in fresh],
            )

    @staticmethod
    def _fresh(trajs: list[Trajectory], ids: list[str], known: set[str]) -> list[Trajectory]:
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

        from knowlyr.trajectory import Trajectory

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
        batch_size: int = 2000,
    ) -> Iterator[Trajectory]:
        """Trajectories at ``version``, optionally restricted to ``ids`` and a polars filter
        on the query columns (``pl.col("success")``, ``pl.col("task_id") == "t1"``...)."""
        import polars as pl

        from knowlyr.trajectory import Trajectory

        lf = self.scan("trajectories", version=version)
        if ids is not None:
            lf = lf.filter(pl.col("id").is_in(list(ids)))
        if filter is not None:
            lf = lf.filter(filter)
        # streamed: memory stays at one batch of JSON however large the table is
        for chunk in lf.select("data").collect_batches(chunk_size=batch_size):
            for data in chunk["data"].to_list():
                yield Trajectory.model_validate_json(data)

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
        for t in self.iter_trajectories(version=version, ids=ids, filter=filter):
            if limit is not None and len(out) >= limit:
                break
            out.append(t)
        return out

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
        """Delete blobs no table references (``dry_run`` only reports them).

        Referenced: every ``*blob*`` string column and ``checkpoint`` column of every table
        at its latest version, plus blob hashes in run inputs/outputs. Blobs younger than
        ``min_age_s`` are kept, so a writer that stored a blob but has not committed its rows
        yet is safe; leftover temporary files older than that are removed too.
        """
        import time

        from knowlyr.store.lineage import referenced_blobs

        refs = referenced_blobs(self)
        now = time.time()
        scanned, unref, size = 0, [], 0
        for h in self.blobs.iter_hashes():
            scanned += 1
            if h in refs:
                continue
            path = self.blobs.path(h) if self.local else self.blobs._fs_path(h)
            if now - self.blobs.mtime(path) < min_age_s:
                continue
            unref.append(h)
            size += self.blobs.size(h)
        deleted = 0
        if not dry_run:
            for h in unref:
                self.blobs.remove(h)
                deleted += 1
            for tmp in self.blobs.iter_temp():
                if now - self.blobs.mtime(tmp) >= min_age_s:
                    self.blobs.remove_path(tmp)
        return GcReport(
            dry_run=dry_run,
            scanned=scanned,
            referenced=scanned - len(unref),
            unreferenced=unref,
            bytes=size,
            deleted=deleted,
        )

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


def _trajectory_stream(trajs: list[Trajectory]) -> Callable[[], Any]:
    """A factory of Arrow streams over ``trajs`` sorted by task (similar rows compress together),
    serialised ``_STREAM_ROWS`` at a time as the Delta writer pulls them."""
    import pyarrow as pa

    ordered = sorted(trajs, key=lambda t: (t.task.task_id, t.id))
    schema = trajectory_arrow(ordered[:1]).schema

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(0, len(ordered), _STREAM_ROWS):
            yield from trajectory_arrow(ordered[i : i + _STREAM_ROWS], sort=False).to_batches()

    return lambda: pa.RecordBatchReader.from_batches(schema, batches())


def known_tables() -> list[str]:
    return list(TABLES)

"""Delta Lake tables of a store: versions, time-travel reads, keyed appends, commits.

:class:`DeltaTables` is the table half of :class:`~knowlyr.store.Store` (which adds
trajectories, blobs, runs and lineage). See the ``knowlyr.store.store`` module docstring for
the concurrency and crash-safety design.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from knowlyr.errors import ConfigError, NotFoundError, StoreError
from knowlyr.store._lock import table_lock
from knowlyr.store.models import Manifest, TableRef
from knowlyr.store.tables import conform, empty_frame, spec_for

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["DeltaTables"]

_MAX_COMMIT_RETRIES = 20
_PARTIAL_UPLOAD = re.compile(r"\.parquet#\d+$")
_ZSTD_LEVEL = 3


def _digest(keys: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()


def _check_table(table: str) -> str:
    if not table or not table.replace("_", "").isalnum() or not table[0].isalpha():
        raise ConfigError(
            f"table name must be letters, digits and underscores starting with a letter, got {table!r}"
        )
    return table


class DeltaTables:
    """Tables under ``<root>/tables/<name>`` (set up by :class:`~knowlyr.store.Store`)."""

    url: str
    root: str
    local: bool
    storage_options: dict[str, str]
    _lock_dir: str | None
    _tables: dict[str, DeltaTable]
    _keys: dict[tuple[str, int], Any]
    _rows: dict[tuple[str, int], int]

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
            from knowlyr.store.blobs import url_to_fs

            fs, path = url_to_fs(f"{self.root}/tables", self.storage_options, shown=self.root)
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
        spec = spec_for(table)
        name = f"{table}:{','.join(cols)}"
        if version is not None and (name, version) in self._keys:
            return self._keys[(name, version)]  # no log refresh on the hot (re-add) path
        v = self._resolve(table, version)
        if v is None:
            return set() if len(cols) == 1 else empty_frame(spec_for(table)).select(cols)
        ck = (name, v)
        if ck not in self._keys and len(cols) == 1 and (spec is None or spec.derive is None):
            got = self._key_column(table, cols[0], v)
            if got is not None:
                self._keys[ck], self._rows[(table, v)] = got
        if ck not in self._keys:
            lf = self.scan(table, version=v)
            if spec is not None and spec.derive is not None:
                lf = spec.derive(lf)  # rows written before a derived key column existed
            df = lf.select(cols).collect()
            self._keys[ck] = set(df[cols[0]].to_list()) if len(cols) == 1 else df
            self._rows[(table, v)] = df.height
        return self._keys[ck]

    def _key_column(self, table: str, key: str, version: int) -> tuple[set[str], int] | None:
        """(the values, the row count) of one key column of a local table at ``version``,
        read from the data files the Delta log lists (pyarrow.parquet; no polars scan, whose
        import alone costs a re-add ~0.15 s). None where a plain read of the files would not
        be the table: a reader protocol above 1 (deletion vectors, column mapping),
        partitions, or a file without the column."""
        from urllib.parse import unquote

        import pyarrow.parquet as pq
        from deltalake import DeltaTable

        if not self.local or (dt := self._dt(table)) is None:
            return None
        if dt.version() != version:
            dt = DeltaTable(self.table_uri(table), version=version, storage_options=self._so())
        if dt.protocol().min_reader_version > 1 or dt.metadata().partition_columns:
            return None
        values: set[str] = set()
        rows = 0
        for uri in dt.file_uris():  # percent-encoded: a space is %20
            f = pq.ParquetFile(unquote(uri.removeprefix("file://")))
            if key not in f.schema_arrow.names:
                return None
            column = f.read(columns=[key]).column(key)
            values.update(column.to_pylist())
            rows += len(column)
        return values, rows

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
        spec = spec_for(table)
        derive = spec.derive if spec is not None and spec.derive is not None else lambda lf: lf
        rows = derive(self.scan(table, version=v))
        base = version - 1 if since is None else since
        if base < 0:
            return rows.collect()
        old = derive(self.scan(table, version=base)).select(cols)
        return rows.join(old, on=cols, how="anti").collect()

    def vacuum(self, table: str, *, dry_run: bool = True, retention_hours: int = 168) -> list[str]:
        """Delete data files of ``table`` that no version still within ``retention_hours``
        needs, including orphans left by writers that crashed before committing.

        Time travel to versions older than the retention stops working for files a later
        version rewrote (MERGE updates: ``on_duplicate="update"``, and labels attached to
        ``trajectories`` by :func:`knowlyr.store.labels.attach_labels`); tables only ever
        appended to lose nothing but orphans. ``dry_run`` only lists the files.

        Example:
            >>> store.vacuum("trajectories", dry_run=True, retention_hours=1)  # doctest: +SKIP
            ['part-00000-….zstd.parquet']
        """
        if retention_hours < 0:
            raise ConfigError(f"retention_hours must be >= 0, got {retention_hours}")
        dt = self._dt(table)
        if dt is None:
            raise NotFoundError(
                f"no table {table!r} in {self.url}; existing: {sorted(self.tables())}"
            )
        with table_lock(self._lock_dir, table):
            listed = dt.vacuum(
                retention_hours=retention_hours,
                dry_run=dry_run,
                enforce_retention_duration=retention_hours >= 168,
                full=True,
            )
            return listed + self._partial_uploads(table, retention_hours, dry_run=dry_run)

    def _partial_uploads(self, table: str, retention_hours: int, *, dry_run: bool) -> list[str]:
        """Half-written ``*.parquet#N`` files of a local writer killed mid-upload.

        The local object store writes a data file under a temporary ``name#N`` and renames it
        when complete, so a writer killed in between leaves a file Delta's vacuum does not know.
        Called under the table lock, which every local writer holds while it writes, so none of
        these files belongs to a live write. Remote stores have no such files.
        """
        if not self.local:
            return []
        root = self.table_uri(table).removeprefix("file://")
        cutoff = time.time() - retention_hours * 3600
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "_delta_log"]
            for name in filenames:
                path = os.path.join(dirpath, name)
                if _PARTIAL_UPLOAD.search(name) and os.path.getmtime(path) <= cutoff:
                    found.append(os.path.relpath(path, root))
                    if not dry_run:
                        os.remove(path)
        return sorted(found)

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
        if df.height == 0:
            v = self.version(table)
            return Manifest(
                store=self.url,
                table=table,
                version=-1 if v is None else v,
                rows=0 if v is None else self.count(table, version=v),
                digest=_digest([]),
            )
        spec = spec_for(table)
        if spec is not None and spec.derive is not None:
            df = spec.derive(df)
        cols = self._key_cols(table, key) if on_duplicate != "append" else []
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ConfigError(
                f"rows for table {table!r} lack key column(s) {missing}: add them or pass key="
            )
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

"""Table files no Delta version names: what :meth:`Store.gc <knowlyr.store.Store.gc>` removes
besides blobs.

A writer puts a table's Parquet files in its folder first and commits them after (one Delta
log entry adding them); a run killed in between (``kill -9``, a full disk, an exception)
leaves files that no version reads but that take their space for good. A file is *named* by
the log when any entry, in a JSON commit or a checkpoint, adds or removes it: removed files
are kept too, since older versions (time travel, ``read(..., version=)``) still read them;
only ``vacuum`` may drop those. Local stores only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote

import orjson

__all__ = ["TableFile", "logged_files", "table_files"]

_LOG = "_delta_log"


@dataclass(frozen=True)
class TableFile:
    """A data file in a table's folder: its table, path (absolute), size and mtime."""

    table: str
    path: str
    size: int
    mtime: float

    @property
    def name(self) -> str:
        """``table/relative path``, as reports show it."""
        return f"{self.table}/{os.path.basename(self.path)}"


def table_files(tables_dir: str) -> list[TableFile]:
    """Every Parquet file in the tables under ``tables_dir`` (not their logs or other
    ``_folders``), with its size and mtime; a folder whose first commit never came (no log)
    is a table too, all of whose files are uncommitted."""
    out: list[TableFile] = []
    if not os.path.isdir(tables_dir):
        return out
    for table in sorted(os.listdir(tables_dir)):
        root = os.path.join(tables_dir, table)
        if not os.path.isdir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
            for name in sorted(filenames):
                if not name.endswith(".parquet"):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:  # removed meanwhile (a writer's drop_rows)
                    continue
                out.append(TableFile(table, path, st.st_size, st.st_mtime))
    return out


def logged_files(table_dir: str) -> set[str]:
    """The absolute paths of every file the Delta log of ``table_dir`` adds or removes, in
    any commit or checkpoint still in the log."""
    log = os.path.join(table_dir, _LOG)
    found: set[str] = set()
    for name in sorted(os.listdir(log)) if os.path.isdir(log) else ():
        path = os.path.join(log, name)
        if name.endswith(".json") and name[:20].isdigit():
            with open(path, "rb") as f:
                for line in f:
                    if b'"add"' not in line and b'"remove"' not in line:
                        continue
                    action = orjson.loads(line)
                    for kind in ("add", "remove"):
                        if isinstance(action.get(kind), dict) and action[kind].get("path"):
                            found.add(action[kind]["path"])
        elif ".checkpoint" in name and name.endswith(".parquet"):
            found |= _checkpoint_files(path)
    return {_absolute(table_dir, p) for p in found}


def _checkpoint_files(path: str) -> set[str]:
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    kinds = [k for k in ("add", "remove") if k in f.schema_arrow.names]
    out: set[str] = set()
    for batch in f.iter_batches(columns=kinds):
        for k in kinds:
            column = batch.column(k)
            out.update(p for p in column.field("path").to_pylist() if p)
    return out


def _absolute(table_dir: str, path: str) -> str:
    """A log entry's path (relative and percent-encoded, or a file:// URL) as a local path."""
    if "://" in path:
        return unquote(path.split("://", 1)[1])
    return os.path.normpath(os.path.join(table_dir, unquote(path)))


def uncommitted(
    candidates: list[TableFile],
    *,
    live: set[str],
    dead: set[str],
    now: float,
    min_age_s: float,
) -> tuple[list[TableFile], int]:
    """Which of ``candidates`` (listed before the journals were read) no Delta version
    names: a file of a dead run (in ``dead``) whatever its age, any other one older than
    ``min_age_s``; the files of live runs (``live``) are kept. Also: how many were kept for
    a live run. The logs are read now, after the journals, so a run that committed in
    between has its files named by one or the other."""
    logged: dict[str, set[str]] = {}
    out, kept = [], 0
    for f in candidates:
        table_dir = os.path.dirname(f.path)
        while os.path.basename(table_dir) != f.table:  # a file in a partition folder
            table_dir = os.path.dirname(table_dir)
        if table_dir not in logged:
            logged[table_dir] = logged_files(table_dir)
        if f.path in logged[table_dir]:
            continue
        if f.path in live:
            kept += 1
            continue
        if f.path not in dead and now - f.mtime < min_age_s:
            continue
        out.append(f)
    return out, kept

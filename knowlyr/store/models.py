"""Small, JSON-able records the store returns: manifests, table refs, runs, lineage, gc reports.

They carry versions and counts, never data, so a Prefect task can return them as its result
and downstream cache keys can hash them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GcReport", "Lineage", "Manifest", "RunRecord", "TableRef"]


class TableRef(BaseModel):
    """One version of one table of one store: what a downstream stage reads.

    Use it (``manifest.ref``) as a task input when only the version matters, so that a
    re-run that added nothing (same version, different counts) keeps downstream caches valid.
    """

    model_config = ConfigDict(frozen=True)

    store: str
    table: str
    version: int
    rows: int

    def __str__(self) -> str:
        return f"{self.table}@{self.version}"


class Manifest(BaseModel):
    """What one write did: the table version it left and how many rows were new.

    Attributes:
        store: the store URL.
        table: the table written.
        version: the table version after the write (unchanged when nothing was new;
            -1 when nothing was new and the table does not exist yet).
        rows: rows in the table at ``version``.
        new: rows this call added.
        duplicates: input rows that were already there (or repeated within the input);
            with ``on_duplicate="update"`` these are the rows that were updated.
        committed: whether this call committed a new Delta version.
        digest: sha256 over the sorted keys (content hashes for trajectories) of the input,
            so two manifests of the same input compare equal without carrying the keys.

    Example:
        >>> m = Manifest(store="/s", table="trajectories", version=3, rows=10, new=2,
        ...              duplicates=0, committed=True, digest="ab")
        >>> str(m.ref)
        'trajectories@3'
    """

    model_config = ConfigDict(frozen=True)

    store: str
    table: str
    version: int
    rows: int
    new: int = 0
    duplicates: int = 0
    committed: bool = False
    digest: str = ""

    @property
    def ref(self) -> TableRef:
        return TableRef(store=self.store, table=self.table, version=self.version, rows=self.rows)

    @property
    def total(self) -> int:
        """Input rows considered (new + duplicates)."""
        return self.new + self.duplicates


class RunRecord(BaseModel):
    """One stage execution, as stored in the ``runs`` table.

    ``inputs`` / ``outputs`` map a table name to the version read or written, or any other
    name (``"checkpoint"``, ``"raw"``...) to a blob hash (64 hex characters).
    """

    run_id: str
    stage: str
    status: str = "completed"
    inputs: dict[str, int | str] = Field(default_factory=dict)
    outputs: dict[str, int | str] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    code_version: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None


class Lineage(BaseModel):
    """Everything a table version, checkpoint, trajectory or run was made from.

    Attributes:
        ref: what was asked about (``"datasets@4"``, a blob hash, a trajectory id, a run id).
        runs: the runs that produced it, walked back breadth-first (nearest first).
        tables: every table version reached, ``{"trajectories": 7, ...}`` (latest per table).
        blobs: blob hashes reached through run inputs/outputs (e.g. checkpoints).
        trajectory_ids: the trajectories that made it, when they can be named exactly.
        raw_blobs: the raw logs those trajectories were recorded from.
    """

    ref: str
    runs: list[RunRecord] = Field(default_factory=list)
    tables: dict[str, int] = Field(default_factory=dict)
    blobs: list[str] = Field(default_factory=list)
    trajectory_ids: list[str] = Field(default_factory=list)
    raw_blobs: list[str] = Field(default_factory=list)


class GcReport(BaseModel):
    """Result of :meth:`Store.gc`: unreferenced blobs and uncommitted table files found (and
    deleted unless a dry run)."""

    dry_run: bool
    scanned: int
    referenced: int
    unreferenced: list[str] = Field(default_factory=list)
    bytes: int = 0
    deleted: int = 0
    aborted_runs: int = 0  # journals of runs that died before their commit (see Store.gc)
    in_flight: int = 0  # blobs and table files of runs still in flight, kept whatever their age
    table_files: list[str] = Field(default_factory=list)  # uncommitted: "table/file.parquet"
    table_bytes: int = 0
    killed_runs: list[str] = Field(default_factory=list)  # runs rows marked killed

"""Read-only access to one store for the viewer: it never writes a table, a blob or a file.

:class:`StoreReader` opens an *existing* store (a missing one is a
:class:`~knowlyr.errors.NotFoundError`, not a new empty store), keeps the list's column index
per version (see :mod:`knowlyr.view.query`) and answers the pages' reads: one trajectory, its
rewards, its lineage (runs, raw log, datasets, preference pairs), and blobs.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.errors import ConfigError, NotFoundError
from knowlyr.view.query import ListPage, ListQuery, index_frame, run_query

if TYPE_CHECKING:
    import polars as pl

    from knowlyr.store import Store
    from knowlyr.trajectory import Trajectory

__all__ = ["RewardRow", "StoreReader", "blob_type", "check_id", "open_existing"]

_HEX = re.compile(r"^[0-9a-f]+$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_INDEX_CACHE = 4  # column indexes kept (one per trajectories x rewards version)


def open_existing(url: str | os.PathLike[str]) -> Store:
    """The store at ``url`` if it exists and has a ``trajectories`` table.

    Unlike :meth:`Store.open`, nothing is created: a path that is not a store is an error.

    Raises:
        NotFoundError: no store there, or a store without trajectories (names the fix).
    """
    from knowlyr.store import Store

    url = os.fspath(url)
    if "://" not in url or url.startswith("file://"):
        path = os.path.abspath(os.path.expanduser(url.removeprefix("file://")))
        if not os.path.isdir(os.path.join(path, "tables")):
            raise NotFoundError(
                f"no store at {path} (no tables/ folder): pass --store with the path of an "
                "existing store (e.g. .knowlyr/store) or run ingest / collect first"
            )
    store = Store(url)
    if store.version("trajectories") is None:
        raise NotFoundError(
            f"the store {store.url} has no trajectories table: run `knowlyr ingest` or a "
            "collect flow first"
        )
    return store


def check_id(value: str, what: str = "trajectory id") -> str:
    """``value`` if it can be a trajectory id (or a prefix of >= 8 hex characters).

    Raises:
        ConfigError: it is not lowercase hex or too short.
    """
    if not _HEX.match(value) or len(value) > 64:
        raise ConfigError(
            f"{what} {value!r} is not a content hash: expected up to 64 lowercase hex characters"
        )
    if len(value) < 8:
        raise ConfigError(f"{what} {value!r} is too short: give at least 8 characters")
    return value


def blob_type(data: bytes) -> tuple[str, str]:
    """The media type and file suffix of a blob's bytes (images by their magic numbers,
    UTF-8 text as text, anything else as bytes)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png", ".png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg", ".jpg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif", ".gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", ".webp"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream", ".bin"
    return "text/plain; charset=utf-8", ".txt"


@dataclass
class RewardRow:
    """One ``rewards`` row of a trajectory, decoded.

    Attributes:
        per_step: each step's reward (``None`` where no rubric applied).
        rubrics: mean score per rubric.
        step_rubrics: per step, each rubric's score (the step's facets).
        rationales: the judge's rationale per step (empty without the judge).
    """

    config_hash: str
    total: float | None
    total_raw: float | None
    judge: str | None
    created_at: datetime | None
    per_step: list[float | None]
    rubrics: dict[str, float]
    step_rubrics: list[dict[str, float | None]] = field(default_factory=list)
    rationales: list[str | None] = field(default_factory=list)
    judge_errors: list[str | None] = field(default_factory=list)
    missing_layers: list[str] = field(default_factory=list)

    def step(self, i: int) -> tuple[float | None, dict[str, float | None], str | None, str | None]:
        """Step ``i``'s reward, facets, rationale and judge error."""

        def at(xs: list, default: Any = None) -> Any:
            return xs[i] if i < len(xs) else default

        return (
            at(self.per_step),
            at(self.step_rubrics, {}) or {},
            at(self.rationales),
            at(self.judge_errors),
        )


def _json(raw: str | None, default: Any) -> Any:
    if not raw:
        return default
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return default


def _nan_none(x: float | None) -> float | None:
    return None if x is None or x != x else x


class StoreReader:
    """Reads what the viewer's pages show from one existing store, caching per version.

    Thread-safe: the app serves requests from a thread pool.

    Example:
        >>> reader = StoreReader(".knowlyr/store")                           # doctest: +SKIP
        >>> page = reader.list(ListQuery(outcome="failure", sort="-reward"))  # doctest: +SKIP
        >>> page.total, page.rows[0]["id"]                                    # doctest: +SKIP
    """

    def __init__(self, url: str | os.PathLike[str]):
        self.store = open_existing(url)
        self._lock = threading.Lock()
        self._indexes: OrderedDict[tuple[int, int | None], pl.DataFrame] = OrderedDict()
        self._run_ids: dict[tuple[str, int | None], pl.DataFrame] = {}
        self._run_list: dict[int, list[dict[str, Any]]] = {}

    @property
    def url(self) -> str:
        return self.store.url

    def version(self, table: str) -> int | None:
        return self.store.version(table)

    # -- the list ---------------------------------------------------------------------------

    def index(self, version: int | None = None) -> pl.DataFrame:
        """The column index of ``trajectories@version`` (latest) with the latest rewards."""
        latest = self.store.version("trajectories")
        v = latest if version is None else version
        if latest is None or v > latest:
            raise NotFoundError(
                f"the store {self.url} has no trajectories version {v} (latest: {latest}): "
                f"pick a version from 0 to {latest}"
            )
        rv = self.store.version("rewards")
        key = (v, rv)
        with self._lock:
            hit = self._indexes.get(key)
            if hit is not None:
                self._indexes.move_to_end(key)
                return hit
            rewards = self.store.scan("rewards") if rv is not None else None
            df = index_frame(self.store.scan("trajectories", version=v), rewards).collect()
            self._indexes[key] = df
            while len(self._indexes) > _INDEX_CACHE:
                self._indexes.popitem(last=False)
            return df

    def run_trajectories(self, run: str) -> pl.DataFrame:
        """``trajectory_id`` of every trajectory a run (id or unique prefix) added or saw."""
        import polars as pl

        ids = self.run_ids()
        matches = [r for r in ids if r == run] or [r for r in ids if r.startswith(run)]
        if not matches:
            raise NotFoundError(
                f"no run {run!r} in the store's sightings: pick one of the runs listed "
                "on the list page"
            )
        if len(matches) > 1:
            raise ConfigError(f"run {run!r} is ambiguous ({len(matches)} runs): give more of it")
        key = (matches[0], self.store.version("sightings"))
        with self._lock:
            if key in self._run_ids:
                return self._run_ids[key]
        df = self.store.read(
            "sightings", filter=pl.col("run_id") == matches[0], columns=["trajectory_id"]
        ).unique()
        with self._lock:
            self._run_ids[key] = df
        return df

    def run_ids(self) -> list[str]:
        """Run ids that added trajectories (the ``sightings`` table), newest first."""
        return [r["run_id"] for r in self.runs()]

    def runs(self) -> list[dict[str, Any]]:
        """One dict per run that added trajectories: run_id, stage, started_at, trajectories."""
        import polars as pl

        sv = self.store.version("sightings")
        if sv is None:
            return []
        with self._lock:
            if sv in self._run_list:
                return self._run_list[sv]
        df = (
            self.store.scan("sightings")
            .group_by("run_id")
            .agg(pl.len().alias("trajectories"), pl.col("seen_at").min().alias("seen_at"))
        )
        if self.store.version("runs") is not None:
            meta = self.store.scan("runs").select("run_id", "stage", "started_at")
            df = df.join(meta, on="run_id", how="left")
        else:
            df = df.with_columns(pl.lit(None, pl.String).alias("stage"))
        out = df.sort("seen_at", descending=True).collect().to_dicts()
        with self._lock:
            self._run_list[sv] = out
        return out

    def list(self, q: ListQuery) -> ListPage:
        """The page of the list that ``q`` asks for."""
        run_ids = self.run_trajectories(q.run).lazy() if q.run else None
        index = self.index(q.version)
        rows, total = run_query(index.lazy(), q, run_ids=run_ids)
        v = q.version if q.version is not None else self.store.version("trajectories")
        return ListPage(query=q, rows=rows.to_dicts(), total=total, version=v)

    def same_task(self, task_id: str, *, exclude: str, limit: int = 20) -> list[dict[str, Any]]:
        """Other trajectories of ``task_id`` (latest version), best reward first."""
        import polars as pl

        df = self.index().filter((pl.col("task_id") == task_id) & (pl.col("id") != exclude))
        return (
            df.sort(["reward", "id"], descending=[True, False], nulls_last=True)
            .head(limit)
            .to_dicts()
        )

    # -- one trajectory ---------------------------------------------------------------------

    def trajectory(self, id: str, *, version: int | None = None) -> Trajectory:
        """The trajectory ``id`` (a unique prefix of >= 8 characters works).

        Raises:
            ConfigError: a malformed or ambiguous id.
            NotFoundError: no such trajectory (at that version).
        """
        check_id(id)
        if version is not None:
            latest = self.store.version("trajectories")
            if latest is None or version > latest:
                raise NotFoundError(
                    f"the store has no trajectories version {version} (latest: {latest})"
                )
        try:
            return self.store.get_trajectory(id, version=version)
        except NotFoundError:
            where = "the latest version" if version is None else f"trajectories@{version}"
            raise NotFoundError(f"no trajectory {id} in {where} of {self.url}") from None

    def rewards(self, id: str) -> list[RewardRow]:
        """Every reward row of trajectory ``id``, newest first."""
        import polars as pl

        if self.store.version("rewards") is None:
            return []
        df = self.store.read("rewards", filter=pl.col("trajectory_id") == id)
        df = df.sort("created_at", descending=True, nulls_last=True)
        out = []
        for r in df.iter_rows(named=True):
            out.append(
                RewardRow(
                    config_hash=r["config_hash"],
                    total=_nan_none(r.get("total")),
                    total_raw=_nan_none(r.get("total_raw")),
                    judge=r.get("judge"),
                    created_at=r.get("created_at"),
                    per_step=[_nan_none(x) for x in r.get("per_step") or []],
                    rubrics=_json(r.get("per_rubric"), {}),
                    step_rubrics=_json(r.get("step_rubrics"), []),
                    rationales=_json(r.get("rationale"), []),
                    judge_errors=_json(r.get("judge_errors"), []),
                    missing_layers=_json(r.get("missing_layers"), []),
                )
            )
        return out

    def sightings(self, id: str) -> list[dict[str, Any]]:
        """Who added trajectory ``id``: run, agent, source log, with the run's stage."""
        import polars as pl

        if self.store.version("sightings") is None:
            return []
        df = self.store.read("sightings", filter=pl.col("trajectory_id") == id).sort("seen_at")
        if df.height and self.store.version("runs") is not None:
            runs = self.store.read(
                "runs",
                filter=pl.col("run_id").is_in(df["run_id"].unique().to_list()),
                columns=["run_id", "stage", "status", "started_at"],
            )
            df = df.join(runs, on="run_id", how="left")
        return df.to_dicts()

    def datasets(self, id: str) -> list[dict[str, Any]]:
        """The datasets that trajectory ``id`` went into: name, kind, split, rows."""
        import polars as pl

        if self.store.version("datasets") is None:
            return []
        df = self.store.read("datasets")
        found = []
        if "trajectory_ids" in df.columns:
            made = df.filter(pl.col("trajectory_ids").list.contains(id))
            if made.height:
                mine = set(
                    self.store.read(
                        "dataset_rows", filter=pl.col("trajectory_id") == id, columns=["row_hash"]
                    )["row_hash"]
                )
                counts = [sum(h in mine for h in hs) for hs in made["row_hashes"].to_list()]
                found.append(
                    made.select("dataset", "kind", "split", "created_at").with_columns(
                        pl.Series("rows", counts, dtype=pl.UInt32)
                    )
                )
        if "trajectory_id" in df.columns:  # rows of stores written before manifests
            found.append(
                df.filter(pl.col("trajectory_id") == id)
                .group_by("dataset", "kind", "split")
                .agg(pl.len().alias("rows"), pl.col("created_at").min())
                .select("dataset", "kind", "split", "created_at", "rows")
            )
        if not found:
            return []
        return pl.concat(found).sort("created_at").to_dicts()

    def preferences(
        self, id: str | None = None, *, pair_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Stored preference pairs with trajectory ``id`` on either side (or the pair
        ``pair_id``), newest first."""
        import polars as pl

        if self.store.version("preferences") is None:
            return []
        if pair_id is not None:
            f = pl.col("pair_id") == pair_id
        else:
            f = (pl.col("chosen_id") == id) | (pl.col("rejected_id") == id)
        return (
            self.store.read("preferences", filter=f)
            .sort("created_at", descending=True, nulls_last=True)
            .to_dicts()
        )

    def blob(self, digest: str) -> bytes:
        """A blob's bytes (its hash verified).

        Raises:
            ConfigError: ``digest`` is not a sha256 hex digest.
            NotFoundError: no such blob.
        """
        if not _HEX64.match(digest):
            raise ConfigError(f"blob {digest!r} is not a sha256 hex digest (64 hex characters)")
        if not self.store.has_blob(digest):
            raise NotFoundError(f"no blob {digest} in the store {self.url}")
        return self.store.get_blob(digest)

    def has_blob(self, digest: str | None) -> bool:
        return bool(digest) and bool(_HEX64.match(digest)) and self.store.has_blob(digest)

"""The store's tables: their declared columns, keys, and the trajectory row layout.

Known tables have *declared* columns (cast on write, filled with nulls when missing) and a
key used for dedup; writers may add extra columns (the Delta schema is merged). Unknown
table names are allowed too (no declared columns; pass ``key=`` to dedup).

=============  ===================================  ===========================================
table          key                                  declared columns
=============  ===================================  ===========================================
trajectories   id                                   see :data:`TRAJECTORY_COLUMNS`
rewards        trajectory_id, config_hash           total, per_step (list[f64]), per_rubric
                                                    (JSON str), rationale (JSON str), judge,
                                                    created_at
preferences    pair_id                              task_id, chosen_id, rejected_id, margin,
                                                    config_hash, created_at
datasets       dataset, rows_hash                   kind, split, n_rows, row_hashes (list[str]),
                                                    trajectory_ids (list[str]), created_at
dataset_rows   row_hash                             kind, trajectory_id, data (JSON str),
                                                    created_at
evaluations    eval_id, task_id, agent, seed        checkpoint (blob hash), trajectory_id,
                                                    success, score, n_steps, metrics (JSON
                                                    str), created_at
runs           run_id                               stage, status, inputs/outputs/params (JSON
                                                    str), code_version, started_at, ended_at,
                                                    error
rejected       raw_blob, reason, where              path, line, format, created_at
calibrations   calibration_id                       kind, blob, profile, n, positives, cv_auc,
                                                    cv_brier, created_at
sightings      trajectory_id, run_id, agent,        model, source_format, source_blob,
               source_path                          version, seen_at
=============  ===================================  ===========================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import Callable

    import polars as pl
    import pyarrow as pa

    from knowlyr.trajectory import Trajectory

__all__ = [
    "TABLES",
    "TRAJECTORY_COLUMNS",
    "TRAJECTORY_ROW",
    "TableSpec",
    "rows_arrow",
    "spec_for",
    "trajectory_arrow",
    "trajectory_row",
]


@dataclass(frozen=True)
class TableSpec:
    """A known table: its dedup key and declared column types (polars type names)."""

    name: str
    key: tuple[str, ...]
    columns: dict[str, str] = field(default_factory=dict)
    doc: str = ""
    #: fills columns derived from others (e.g. a key part) on rows that lack them
    derive: Callable[[Any], Any] | None = None


TRAJECTORY_COLUMNS: dict[str, str] = {
    "id": "str",
    "task_id": "str",
    "domain": "str",
    "suite": "str",
    "agent": "str",
    "model": "str",
    "n_steps": "i32",
    "success": "bool",
    "score": "f64",
    "source_format": "str",
    "source_path": "str",
    "source_blob": "str",
    "created_at": "datetime",
    "data": "str",
}

TABLES: dict[str, TableSpec] = {
    s.name: s
    for s in [
        TableSpec(
            "trajectories",
            ("id",),
            TRAJECTORY_COLUMNS,
            "one row per content hash; `data` is the full trajectory JSON",
        ),
        TableSpec(
            "rewards",
            ("trajectory_id", "config_hash"),
            {
                "trajectory_id": "str",
                "config_hash": "str",
                "total": "f64",
                "per_step": "list[f64]",
                "per_rubric": "str",
                "rationale": "str",
                "judge": "str",
                "created_at": "datetime",
            },
            "trajectory id x reward-config hash",
        ),
        TableSpec(
            "preferences",
            ("pair_id",),
            {
                "pair_id": "str",
                "task_id": "str",
                "chosen_id": "str",
                "rejected_id": "str",
                "margin": "f64",
                "config_hash": "str",
                "created_at": "datetime",
            },
            "preference pairs built from scored trajectories",
        ),
        TableSpec(
            "datasets",
            ("dataset", "rows_hash"),
            {
                "dataset": "str",
                "rows_hash": "str",
                "kind": "str",
                "split": "str",
                "n_rows": "i64",
                "row_hashes": "list[str]",
                "trajectory_ids": "list[str]",
                "created_at": "datetime",
            },
            "one manifest row per exported dataset: its rows, in order, as `dataset_rows` "
            "hashes; a dataset version is a version of this table. Stores written before "
            "manifests held one row per dataset row (`row_id`, `data`): still readable",
            derive=lambda df: _legacy_dataset_key(df),
        ),
        TableSpec(
            "dataset_rows",
            ("row_hash",),
            {
                "row_hash": "str",
                "kind": "str",
                "trajectory_id": "str",
                "data": "str",
                "created_at": "datetime",
            },
            "exported rows, stored once by content hash (sha256 of the row's sorted-key "
            "JSON) however many datasets name them",
        ),
        TableSpec(
            "evaluations",
            ("eval_id", "task_id", "agent", "seed"),
            {
                "eval_id": "str",
                "task_id": "str",
                "agent": "str",
                "seed": "i64",
                "checkpoint": "str",
                "trajectory_id": "str",
                "success": "bool",
                "score": "f64",
                "n_steps": "i32",
                "metrics": "str",
                "created_at": "datetime",
            },
            "per-episode evaluation results",
        ),
        TableSpec(
            "runs",
            ("run_id",),
            {
                "run_id": "str",
                "stage": "str",
                "status": "str",
                "inputs": "str",
                "outputs": "str",
                "params": "str",
                "code_version": "str",
                "started_at": "datetime",
                "ended_at": "datetime",
                "error": "str",
            },
            "lineage: one row per stage run",
        ),
        TableSpec(
            "rejected",
            ("raw_blob", "reason", "where"),
            {
                "raw_blob": "str",
                "reason": "str",
                "path": "str",
                "line": "i64",
                "format": "str",
                "created_at": "datetime",
                "where": "str",
            },
            "records the recorder could not convert and labels not applied (contradictions), "
            "with the reason; raw bytes (the log record, the results file) are blobs; one row "
            "per place (`where` = path:line), so identical bad files are each named",
            derive=lambda df: _rejected_where(df),
        ),
        TableSpec(
            "calibrations",
            ("calibration_id",),
            {
                "calibration_id": "str",
                "kind": "str",
                "blob": "str",
                "profile": "str",
                "n": "i64",
                "positives": "i64",
                "cv_auc": "f64",
                "cv_brier": "f64",
                "created_at": "datetime",
            },
            "fitted reward calibrations (the JSON is a blob), with their cross-validated "
            "quality; `reward score --calibration ID` and the reward flow apply one",
        ),
        TableSpec(
            "sightings",
            ("trajectory_id", "run_id", "agent", "source_path"),
            {
                "trajectory_id": "str",
                "run_id": "str",
                "agent": "str",
                "model": "str",
                "source_format": "str",
                "source_path": "str",
                "source_blob": "str",
                "version": "i64",
                "seen_at": "datetime",
            },
            "every time a trajectory was added (new or a duplicate): which agent and run "
            "produced it, from which log, and the trajectories version it left; the "
            "trajectories row keeps only the first",
        ),
    ]
}


def spec_for(table: str) -> TableSpec | None:
    return TABLES.get(table)


def polars_type(name: str) -> pl.DataType:
    import polars as pl

    return {
        "str": pl.String(),
        "i32": pl.Int32(),
        "i64": pl.Int64(),
        "f64": pl.Float64(),
        "bool": pl.Boolean(),
        "datetime": pl.Datetime("us", "UTC"),
        "list[f64]": pl.List(pl.Float64()),
        "list[str]": pl.List(pl.String()),
    }[name]


def _rejected_where(df: Any) -> Any:
    """``where`` = ``path:line`` (either may be empty) for rejected rows (a DataFrame or a
    LazyFrame) that lack it, or hold it null (rows written before it existed)."""
    import polars as pl

    names = df.collect_schema().names()
    part = [
        pl.col(c).cast(pl.String).fill_null("") if c in names else pl.lit("")
        for c in ("path", "line")
    ]
    where = pl.concat_str(part, separator=":")
    if "where" in names:
        where = pl.col("where").fill_null(where)
    return df.with_columns(where.alias("where"))


def _legacy_dataset_key(df: Any) -> Any:
    """``rows_hash`` for ``datasets`` rows written before manifests (one row per dataset row,
    keyed by ``row_id``): their ``row_id`` keeps them distinct."""
    import polars as pl

    names = df.collect_schema().names()
    if "row_id" not in names:
        return df
    if "rows_hash" not in names:
        return df.with_columns(pl.col("row_id").alias("rows_hash"))
    return df.with_columns(pl.col("rows_hash").fill_null(pl.col("row_id")))


def conform(df: pl.DataFrame, spec: TableSpec | None) -> pl.DataFrame:
    """Cast declared columns, add missing declared ones as nulls, declared columns first."""
    import polars as pl

    if spec is not None and spec.derive is not None:
        df = spec.derive(df)
    if spec is None or not spec.columns:
        return df
    exprs = []
    for col, tname in spec.columns.items():
        dtype = polars_type(tname)
        if col in df.columns:
            exprs.append(
                pl.col(col).cast(dtype, strict=False) if df[col].dtype != dtype else pl.col(col)
            )
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(col))
    extra = [pl.col(c) for c in df.columns if c not in spec.columns]
    return df.select(exprs + extra)


def empty_frame(spec: TableSpec | None) -> pl.DataFrame:
    import polars as pl

    if spec is None:
        return pl.DataFrame()
    return pl.DataFrame(schema={c: polars_type(t) for c, t in spec.columns.items()})


#: The fields of :func:`trajectory_row`: the ``trajectories`` columns but ``created_at``.
TRAJECTORY_ROW: tuple[str, ...] = tuple(c for c in TRAJECTORY_COLUMNS if c != "created_at")


def trajectory_row(t: Trajectory) -> tuple:
    """``t``'s row of the ``trajectories`` table without ``created_at`` (fields as
    :data:`TRAJECTORY_ROW`; ``data`` is ``t.to_json()``). The recorder's workers make these
    rows (:class:`knowlyr.recorder.Encoded`), so a store write needs no trajectory models."""
    task, agent, out, src = t.task, t.agent, t.outcome, t.source
    return (
        t.id,
        task.task_id,
        task.domain,
        task.suite,
        agent.name,
        agent.model,
        len(t.steps),
        out.success,
        out.score,
        src.format,
        src.path,
        src.blob,
        t.to_json(),
    )


def document_row(doc: dict[str, Any]) -> tuple:
    """:func:`trajectory_row` of a trajectory given as its JSON document
    (:meth:`knowlyr.recorder.Adapter.document`, ``source`` filled in); ``data`` is the
    document written by orjson, what ``to_json`` writes for the same trajectory."""
    task, agent, out, src = doc["task"], doc["agent"], doc["outcome"], doc["source"]
    try:
        data = orjson.dumps(doc, option=orjson.OPT_UTC_Z)  # "Z" for UTC, as pydantic writes
    except orjson.JSONEncodeError:  # a value orjson cannot write (an int over 64 bits...)
        from knowlyr.trajectory import Trajectory

        data = Trajectory.model_validate(doc).to_json()
    return (
        doc["id"],
        task["task_id"],
        task["domain"],
        task.get("suite"),
        agent["name"],
        agent.get("model"),
        len(doc["steps"]),
        out.get("success"),
        out.get("score"),
        src["format"],
        src.get("path"),
        src.get("blob"),
        data,
    )


def trajectory_arrow(
    trajs: list[Trajectory], *, now: datetime | None = None, sort: bool = True
) -> pa.Table:
    """Rows of the ``trajectories`` table for ``trajs`` (sorted by task for compression)."""
    return rows_arrow([trajectory_row(t) for t in trajs], now=now, sort=sort)


def rows_arrow(rows: list[tuple], *, now: datetime | None = None, sort: bool = True) -> pa.Table:
    """The ``trajectories`` table of :func:`trajectory_row` rows (sorted by task, then id,
    for compression). ``data`` goes in as the bytes the serialiser wrote (a str is encoded).
    Built column by column from buffers (:mod:`knowlyr._arrow`): neither pandas
    (which ``pyarrow.array`` imports on first use) nor polars' row-wise construction."""
    import pyarrow as pa

    from knowlyr import _arrow as col

    now = now or datetime.now(UTC)
    if sort and len(rows) > 1:
        rows = sorted(rows, key=_task_then_id)
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(TRAJECTORY_ROW)
    arrays = [col.strings(cols[i]) for i in range(6)]
    arrays += [col.int32s(cols[6]), col.bools(cols[7]), col.float64s(cols[8])]
    arrays += [col.strings(cols[i]) for i in range(9, 12)]
    arrays += [col.timestamps(now, len(rows)), col.strings(cols[12], large=True)]
    return pa.Table.from_arrays(arrays, names=list(TRAJECTORY_COLUMNS))


def _task_then_id(row: tuple) -> tuple[str, str]:
    return row[1], row[0]

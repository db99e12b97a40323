"""Runs and lineage: which stage made which version, from what.

Each stage run is one row of the ``runs`` table: its ``inputs`` and ``outputs`` map a table
name to a version (``{"trajectories": 7}``) or any other name to a blob hash
(``{"checkpoint": "9f2c..."}``). :func:`lineage` walks these rows backwards:

1. the runs whose outputs are the asked-for version or blob (a snapshot ``table@v`` that no
   run wrote exactly is made of every run that wrote ``table`` at a version <= v);
2. then, recursively, the runs behind each of their inputs;
3. the trajectories that made it: the ``trajectory_id`` (or ``chosen_id`` / ``rejected_id``,
   or a dataset manifest's ``trajectory_ids``) values of the rows added at the first table version reached that has them, else every
   trajectory of the ``trajectories`` version read; and their raw logs (``source_blob``).
   Runs that wrote ``trajectories`` are kept only if they added one of those trajectories.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.errors import ConfigError, NotFoundError
from knowlyr.store.models import Lineage, Manifest, RunRecord, TableRef

if TYPE_CHECKING:
    from knowlyr.store.store import Store

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TRAJ_COLS = ("trajectory_id", "chosen_id", "rejected_id", "trajectory_ids")


def _ref_value(name: str, value: Any) -> int | str:
    if isinstance(value, Manifest | TableRef):
        return value.version
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(
            f"run input/output {name!r} must be a table version (int), a blob hash (str) or a "
            f"Manifest, got {type(value).__name__}"
        )
    return value


def record_run(
    store: Store,
    stage: str,
    *,
    inputs: Mapping[str, Any] | None,
    outputs: Mapping[str, Any] | None,
    params: Mapping[str, Any] | None,
    code_version: str | None,
    started: datetime | None,
    ended: datetime | None,
    status: str,
    error: str | None,
    run_id: str | None,
) -> RunRecord:
    import knowlyr

    if not stage:
        raise ConfigError("record_run needs a stage name, got an empty string")
    now = datetime.now(UTC)
    rec = RunRecord(
        run_id=run_id or uuid.uuid4().hex,
        stage=stage,
        status=status,
        inputs={k: _ref_value(k, v) for k, v in (inputs or {}).items()},
        outputs={k: _ref_value(k, v) for k, v in (outputs or {}).items()},
        params=dict(params or {}),
        code_version=code_version or f"knowlyr {knowlyr.__version__}",
        started_at=started or now,
        ended_at=ended or now,
        error=error,
    )
    row = {
        "run_id": rec.run_id,
        "stage": rec.stage,
        "status": rec.status,
        "inputs": orjson.dumps(rec.inputs, option=orjson.OPT_SORT_KEYS).decode(),
        "outputs": orjson.dumps(rec.outputs, option=orjson.OPT_SORT_KEYS).decode(),
        "params": orjson.dumps(rec.params, option=orjson.OPT_SORT_KEYS, default=str).decode(),
        "code_version": rec.code_version,
        "started_at": rec.started_at,
        "ended_at": rec.ended_at,
        "error": rec.error,
    }
    store.append("runs", [row], on_duplicate="update")
    return rec


def mark_killed(store: Store, run_ids: list[str]) -> list[str]:
    """Mark the ``runs`` rows of ``run_ids`` that still say ``running`` as ``killed``: their
    process is gone (``store gc`` found their journals unlocked). Returns those run ids."""
    import polars as pl

    if not run_ids or "runs" not in store.tables():
        return []
    df = store.read(
        "runs", filter=pl.col("run_id").is_in(list(run_ids)) & (pl.col("status") == "running")
    )
    if not df.height:
        return []
    now = datetime.now(UTC)
    error = "the run's process died before it finished (found by store gc)"
    rows = [
        {**r, "status": "killed", "ended_at": now, "error": error} for r in df.iter_rows(named=True)
    ]
    store.append("runs", rows, on_duplicate="update")
    return [r["run_id"] for r in rows]


def read_runs(
    store: Store, *, stage: str | None = None, version: int | None = None
) -> list[RunRecord]:
    import polars as pl

    df = store.read("runs", version=version, filter=(pl.col("stage") == stage) if stage else None)
    df = df.sort("started_at", nulls_last=False)
    out = []
    for r in df.iter_rows(named=True):
        out.append(
            RunRecord(
                run_id=r["run_id"],
                stage=r["stage"],
                status=r["status"] or "",
                inputs=orjson.loads(r["inputs"] or "{}"),
                outputs=orjson.loads(r["outputs"] or "{}"),
                params=orjson.loads(r["params"] or "{}"),
                code_version=r["code_version"] or "",
                started_at=r["started_at"],
                ended_at=r["ended_at"],
                error=r["error"],
            )
        )
    return out


def referenced_blobs(store: Store) -> set[str]:
    """Blob hashes referenced by any table (latest version) or run."""
    import polars as pl

    refs: set[str] = set()
    for table in store.tables():
        lf = store.scan(table)
        schema = lf.collect_schema()
        cols = [
            c for c, t in schema.items() if t == pl.String and ("blob" in c or c == "checkpoint")
        ]
        if cols:
            df = lf.select(cols).collect()
            for c in cols:
                refs.update(v for v in df[c].drop_nulls().unique().to_list() if _HEX64.match(v))
        if table == "trajectories" and "data" in schema:
            refs |= _step_blobs(lf)
    for run in store.runs() if "runs" in store.tables() else []:
        for v in (*run.inputs.values(), *run.outputs.values()):
            if isinstance(v, str) and _HEX64.match(v):
                refs.add(v)
    return refs


#: A blob named inside a trajectory's JSON: a step's ``metadata`` key such as ``screenshot``
#: (the browser env's PNGs) or one ending in ``blob``.
_STEP_BLOB = r'"(?:screenshot|[a-z_]*blob)":\s*"([0-9a-f]{64})"'


def _step_blobs(lf: Any) -> set[str]:
    """Blob hashes that trajectories' steps name in their metadata (e.g. screenshots)."""
    import polars as pl

    hits = (
        lf.select(pl.col("data").cast(pl.String))
        .filter(pl.col("data").str.contains(_STEP_BLOB))
        .select(pl.col("data").str.extract_all(_STEP_BLOB).explode().str.extract(_STEP_BLOB, 1))
        .collect()
    )
    return {h for h in hits.to_series().drop_nulls().unique().to_list() if _HEX64.match(h)}


def _first_version_with(store: Store, tid: str, latest: int) -> int:
    """Binary search for the first trajectories version holding ``tid`` (ids only grow)."""
    lo, hi = 0, latest
    while lo < hi:
        mid = (lo + hi) // 2
        if tid in store.trajectory_ids(version=mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _parse(store: Store, ref: str | Manifest | TableRef) -> tuple[str, Any]:
    if isinstance(ref, Manifest | TableRef):
        return "table", (ref.table, ref.version)
    if "@" in ref:
        table, _, v = ref.partition("@")
        if not v.isdigit():
            raise ConfigError(f"lineage ref {ref!r}: expected TABLE@VERSION, e.g. datasets@3")
        store._resolve(table, int(v))
        return "table", (table, int(v))
    tables = store.tables()
    if ref in tables:
        return "table", (ref, tables[ref])
    runs = store.runs() if "runs" in tables else []
    if any(r.run_id == ref for r in runs):
        return "run", ref
    if "trajectories" in tables and len(ref) >= 8:
        import polars as pl

        hit = store.read("trajectories", filter=pl.col("id").str.starts_with(ref), columns=["id"])
        if hit.height == 1:
            return "trajectory", hit["id"][0]
    if _HEX64.match(ref) and (store.has_blob(ref) or any(ref in r.outputs.values() for r in runs)):
        return "blob", ref
    raise NotFoundError(
        f"lineage: {ref!r} is not a TABLE@VERSION, table, run id, trajectory id or blob in {store.url}"
    )


def lineage(store: Store, ref: str | Manifest | TableRef) -> Lineage:
    import polars as pl

    kind, target = _parse(store, ref)
    runs = store.runs() if "runs" in store.tables() else []
    out = Lineage(
        ref=str(ref)
        if not isinstance(ref, Manifest | TableRef)
        else str(ref.ref if isinstance(ref, Manifest) else ref)
    )
    seen_runs: set[str] = set()
    traj_ids: set[str] | None = None
    queue: list[tuple[str, Any]] = []

    if kind == "trajectory":
        traj_ids = {target}
        first = _first_version_with(store, target, store.version("trajectories") or 0)
        producers = sorted(
            (
                r
                for r in runs
                if isinstance(r.outputs.get("trajectories"), int)
                and r.outputs["trajectories"] >= first
            ),
            key=lambda r: r.outputs["trajectories"],
        )
        out.tables["trajectories"] = first
        if producers:
            queue.append(("run", producers[0].run_id))
    elif kind == "run":
        queue.append(("run", target))
    elif kind == "blob":
        out.blobs.append(target)
        queue.extend(("run", r.run_id) for r in runs if target in r.outputs.values())
    else:
        queue.append(("table", target))

    by_id = {r.run_id: r for r in runs}
    while queue:
        k, t = queue.pop(0)
        if k == "run":
            if t in seen_runs:
                continue
            seen_runs.add(t)
            run = by_id[t]
            out.runs.append(run)
            for name, v in run.inputs.items():
                if isinstance(v, int):
                    queue.append(("table", (name, v)))
                elif _HEX64.match(v):
                    if v not in out.blobs:
                        out.blobs.append(v)
                    queue.extend(("run", r.run_id) for r in runs if v in r.outputs.values())
            continue
        table, v = t
        if out.tables.get(table, -1) >= v:
            continue
        out.tables[table] = v
        if traj_ids is None and table != "trajectories":
            traj_ids = _trajectory_ids_of(store, table, v, runs)
        writers = sorted(
            (r for r in runs if isinstance(r.outputs.get(table), int) and r.outputs[table] <= v),
            key=lambda r: r.outputs[table],
        )
        if table == "trajectories" and traj_ids is not None:
            writers = _writers_of(store, writers, traj_ids)
        queue.extend(("run", r.run_id) for r in writers)

    if traj_ids is None and "trajectories" in out.tables:
        traj_ids = store.trajectory_ids(version=out.tables["trajectories"])
    if traj_ids:
        out.trajectory_ids = sorted(traj_ids)
        v = out.tables.get("trajectories")
        df = store.read(
            "trajectories",
            version=v,
            filter=pl.col("id").is_in(out.trajectory_ids),
            columns=["source_blob"],
        )
        out.raw_blobs = sorted(set(df["source_blob"].drop_nulls().to_list()))
    return out


def _trajectory_ids_of(store: Store, table: str, v: int, runs: list[RunRecord]) -> set[str] | None:
    """Trajectory ids named by the rows this version's writer added (None if none named)."""
    import polars as pl

    cols = [c for c in _TRAJ_COLS if c in store.scan(table, version=v).collect_schema()]
    if not cols:
        return None
    prev = [
        r.outputs[table]
        for r in runs
        if isinstance(r.outputs.get(table), int) and r.outputs[table] < v
    ]
    since = max(prev) if prev else -1
    rows = store.added(table, v, since=since) if since >= 0 else store.read(table, version=v)
    ids: set[str] = set()
    for c in cols:
        values = rows.get_column(c)
        if isinstance(values.dtype, pl.List):
            values = values.explode()
        ids.update(values.drop_nulls().to_list())
    return ids or None


def _writers_of(store: Store, writers: list[RunRecord], ids: set[str]) -> list[RunRecord]:
    """The runs (sorted by output version) that added at least one of ``ids``."""
    keep = []
    prev: set[str] = set()
    for r in writers:
        cur = store.trajectory_ids(version=r.outputs["trajectories"])
        if (cur - prev) & ids:
            keep.append(r)
        prev = cur
    return keep

"""Attach evaluation labels to stored trajectories: one Delta MERGE, lineage, rejected rows.

A label (:class:`knowlyr.labels.Label`: an instance id and the evaluation's verdict) applies
to every trajectory whose ``task_id`` is the instance id: several runs of one instance all
get it. It sets the outcome inside the ``data`` JSON (``resolved``, ``success`` where the log
did not know, test counts, ``label_source``) and the ``success`` column; the trajectory id is
a hash of the content, not the outcome, so it does not change. See
:func:`knowlyr.labels.label_outcome` for the rules.

:func:`attach_labels` updates the matching rows of the ``trajectories`` table in one Delta
transaction (a MERGE on ``id`` updating ``success`` and ``data``), so the earlier outcomes
stay readable at the earlier version (time travel), and records a ``runs`` row (stage
``label``: inputs the results files, stored as blobs, by hash; outputs the new version).
Nothing is silent:

- labels naming an instance with no trajectory are counted and listed (``unknown``);
- a label that contradicts what a trajectory's outcome already says (the log's success, or
  an earlier label's resolved) is not applied unless ``override``; it is counted, listed
  with both values and their sources, and kept in the ``rejected`` table with the reason.

Applying the same labels again changes nothing and commits nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, Field

from knowlyr.errors import StoreError
from knowlyr.labels import Label, LabelDecision, iter_results_files, label_outcome, load_labels
from knowlyr.store._lock import table_lock
from knowlyr.store.models import Manifest
from knowlyr.store.tables import TRAJECTORY_ROW

if TYPE_CHECKING:
    from knowlyr.recorder.pipeline import Encoded
    from knowlyr.store.store import Store

__all__ = ["Contradiction", "LabelReport", "attach_labels", "label_encoded"]

_SUCCESS = TRAJECTORY_ROW.index("success")
_DATA = TRAJECTORY_ROW.index("data")
_TASK = TRAJECTORY_ROW.index("task_id")
_RETRIES = 20

Results = Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | Mapping[str, Label]


class Contradiction(BaseModel):
    """A label that disagrees with what a trajectory's outcome already says."""

    trajectory_id: str
    instance_id: str
    stored: bool
    stored_source: str
    label: bool
    label_source: str
    overridden: bool = False

    def describe(self) -> str:
        verb = "overridden" if self.overridden else "not applied (override to apply it)"
        return (
            f"trajectory {self.trajectory_id[:12]} (task {self.instance_id}) says "
            f"resolved={self.stored} ({self.stored_source}); {self.label_source} says "
            f"resolved={self.label}: {verb}"
        )


class LabelReport(BaseModel):
    """What attaching labels did, counted per trajectory (small: fine as a Prefect result).

    Attributes:
        labels: labels read (one per instance id).
        applied: trajectories whose outcome changed (overridden ones included).
        unchanged: trajectories that already said so.
        contradicting: trajectories whose outcome said the opposite of their label.
        overridden: of those, the ones changed because ``override`` was on.
        unknown: instance ids labelled that no trajectory has (sorted).
        contradictions: every contradiction, with both values and sources.
        trajectories: the label commit (``None`` when no row changed).
        rejected: the write of the contradictions to the ``rejected`` table, if any.
        run_id: the ``runs`` row of a standalone attach (``None`` when nothing was committed,
            or inside an ingest, whose run it is).
        inputs: ``{"results:<path>": sha256}`` of the results files read.
    """

    labels: int
    applied: int = 0
    unchanged: int = 0
    contradicting: int = 0
    overridden: int = 0
    unknown: list[str] = Field(default_factory=list)
    contradictions: list[Contradiction] = Field(default_factory=list)
    trajectories: Manifest | None = None
    rejected: Manifest | None = None
    run_id: str | None = None
    inputs: dict[str, str] = Field(default_factory=dict)

    def summary(self) -> str:
        """One line of counts, e.g. ``5 labels: 3 applied, 1 unchanged, 1 contradicting, 0
        unknown instances``."""
        extra = f" ({self.overridden} overridden)" if self.overridden else ""
        return (
            f"{self.labels} labels: {self.applied} applied, {self.unchanged} unchanged, "
            f"{self.contradicting} contradicting{extra}, {len(self.unknown)} unknown instances"
        )

    def counts(self) -> dict[str, int]:
        """The counts as a flat dict (run params, artifacts)."""
        return {
            "labels": self.labels,
            "applied": self.applied,
            "unchanged": self.unchanged,
            "contradicting": self.contradicting,
            "overridden": self.overridden,
            "unknown": len(self.unknown),
        }

    def problems(self, limit: int = 10) -> list[str]:
        """Lines naming the unknown instances and the contradictions (``limit`` of each)."""
        out = []
        if self.unknown:
            names = ", ".join(self.unknown[:limit]) + ("..." if len(self.unknown) > limit else "")
            out.append(f"{len(self.unknown)} labels name instances with no trajectory: {names}")
        for c in self.contradictions[:limit]:
            out.append(f"contradiction: {c.describe()}")
        if len(self.contradictions) > limit:
            out.append(f"... and {len(self.contradictions) - limit} more contradictions")
        return out


class _Tally:
    """Decisions per trajectory id, and the rows to update / reject."""

    def __init__(self) -> None:
        self.decisions: dict[str, tuple[LabelDecision, Label]] = {}
        self.updates: dict[str, tuple[bool | None, bytes | str]] = {}

    def add(self, tid: str, dec: LabelDecision, label: Label, data: bytes | str | None) -> None:
        self.decisions[tid] = (dec, label)
        if data is not None and dec.outcome is not None:
            self.updates[tid] = (dec.outcome.get("success"), data)


def _relabel(data: bytes | str, label: Label, override: bool) -> tuple[LabelDecision, Any]:
    """The decision for a trajectory given as its JSON, and the new JSON when it changes.

    orjson reads and writes the document exactly: a trajectory never holds an integer past
    64 bits (its content hash could not be computed), the only number orjson would round.
    """
    doc = orjson.loads(data)
    dec = label_outcome(doc.get("outcome") or {}, label, override=override)
    if dec.outcome is None:
        return dec, None
    doc["outcome"] = dec.outcome
    return dec, orjson.dumps(doc)


def label_encoded(
    rec: Encoded, label: Label, *, override: bool = False
) -> tuple[Encoded, LabelDecision]:
    """``rec`` (a recorder record about to be stored) with ``label`` applied to its row's
    outcome and ``success`` column, and the decision (see :func:`knowlyr.labels.label_outcome`)."""
    dec, data = _relabel(rec.row[_DATA], label, override)
    if data is None:
        return rec, dec
    row = list(rec.row)
    row[_SUCCESS] = dec.outcome["success"] if dec.outcome else row[_SUCCESS]
    row[_DATA] = data
    return replace(rec, row=tuple(row)), dec


def _as_labels(results: Results) -> tuple[dict[str, Label], list[Path]]:
    """The labels and the results files they were read from."""
    if isinstance(results, Mapping):
        files = sorted({Path(lab.path) for lab in results.values() if lab.path})
        files = [f for f in files if f.is_file()]
        return dict(results), files
    paths = [results] if isinstance(results, str | os.PathLike) else list(results)
    labels = load_labels(paths)
    files = [f for p in paths for f in iter_results_files(p)]
    return labels, files


class _Inputs:
    """The results files as run inputs: their hashes, stored as blobs once something is
    committed (so lineage reaches them and blob GC keeps them)."""

    def __init__(self, files: list[Path]):
        self.raw: dict[str, bytes] = {}
        for f in files:
            path = os.path.abspath(f)
            try:
                self.raw[path] = f.read_bytes()
            except OSError as e:
                raise StoreError(f"cannot read results file {path}: {e}") from e
        self.hashes = {p: hashlib.sha256(b).hexdigest() for p, b in self.raw.items()}

    def refs(self) -> dict[str, str]:
        return {f"results:{p}": h for p, h in self.hashes.items()}

    def put(self, store: Store) -> None:
        for p, data in self.raw.items():
            store.blobs.put(data, digest=self.hashes[p])

    def blob(self, path: str | None) -> str | None:
        return self.hashes.get(os.path.abspath(path)) if path else None


def _plan_stored(
    store: Store,
    labels: Mapping[str, Label],
    tally: _Tally,
    *,
    override: bool,
    exclude: set[str],
    version: int | None,
) -> set[str]:
    """Decide for every stored trajectory a label names (but ``exclude``); return the task
    ids that have a trajectory."""
    import polars as pl

    if version is None or not labels:
        return set()
    df = store.read(
        "trajectories",
        version=version,
        filter=pl.col("task_id").is_in(list(labels)),
        columns=["id", "task_id", "data"],
    )
    for tid, task_id, data in df.iter_rows():
        if tid in exclude:
            continue
        lab = labels[task_id]
        dec, new = _relabel(data, lab, override)
        tally.add(tid, dec, lab, new)
    return set(df["task_id"].unique().to_list())


def _merge(
    store: Store, updates: dict[str, tuple[bool | None, bytes | str]], base: int
) -> Manifest:
    """Update ``success`` and ``data`` of the rows ``updates`` names, as one MERGE commit."""
    import pyarrow as pa
    from deltalake import CommitProperties

    ids = sorted(updates)
    src = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "success": pa.array([updates[i][0] for i in ids], pa.bool_()),
            "data": pa.array([updates[i][1] for i in ids], pa.large_string()),
        }
    )
    dt = store._dt("trajectories")
    assert dt is not None
    props = CommitProperties(
        custom_metadata={"knowlyr.stage": "label", "knowlyr.updated": str(len(ids))}
    )
    metrics = (
        dt.merge(
            src,
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
            writer_properties=store._writer_properties(),
            commit_properties=props,
        )
        .when_matched_update({"success": "s.success", "data": "s.data"})
        .execute()
    )
    v = store.version("trajectories")
    assert v is not None
    rows = store.count("trajectories", version=base)
    store._rows[("trajectories", v)] = rows  # an update adds no rows and no ids
    ck = ("trajectories:id", base)
    if v == base + 1 and ck in store._keys:
        store._keys[("trajectories:id", v)] = store._keys[ck]
    return Manifest(
        store=store.url,
        table="trajectories",
        version=v,
        rows=rows,
        new=0,
        duplicates=int(metrics.get("num_target_rows_updated", len(ids))),
        committed=True,
        digest=hashlib.sha256("\n".join(ids).encode()).hexdigest(),
    )


def _apply_stored(
    store: Store,
    labels: Mapping[str, Label],
    tally: _Tally,
    *,
    override: bool,
    exclude: set[str],
) -> tuple[set[str], Manifest | None]:
    """Plan and MERGE under the table's writer lock (retried on object-store conflicts)."""
    from deltalake.exceptions import CommitFailedError

    with table_lock(store._lock_dir, "trajectories"):
        for attempt in range(_RETRIES):
            base = store.version("trajectories")
            stored = _Tally()
            matched = _plan_stored(
                store, labels, stored, override=override, exclude=exclude, version=base
            )
            if not stored.updates or base is None:
                break
            try:
                manifest = _merge(store, stored.updates, base)
            except CommitFailedError as e:
                if store._lock_dir is not None or attempt == _RETRIES - 1:
                    raise StoreError(f"could not label trajectories in {store.url}: {e}") from e
                continue
            except Exception as e:
                raise StoreError(f"could not label trajectories in {store.url}: {e}") from e
            tally.decisions.update(stored.decisions)
            return matched, manifest
    tally.decisions.update(stored.decisions)
    return matched, None


def _report(
    labels: Mapping[str, Label],
    tally: _Tally,
    matched: set[str],
    inputs: _Inputs,
    trajectories: Manifest | None,
) -> LabelReport:
    rep = LabelReport(labels=len(labels), trajectories=trajectories, inputs=inputs.refs())
    for tid, (dec, lab) in sorted(tally.decisions.items()):
        if dec.status == "unchanged":
            rep.unchanged += 1
        elif dec.status == "applied":
            rep.applied += 1
        else:
            over = dec.status == "overridden"
            rep.contradicting += 1
            rep.overridden += over
            rep.applied += over
            assert dec.stored is not None
            rep.contradictions.append(
                Contradiction(
                    trajectory_id=tid,
                    instance_id=lab.instance_id,
                    stored=dec.stored,
                    stored_source=dec.stored_source or "log",
                    label=lab.resolved,
                    label_source=lab.source,
                    overridden=over,
                )
            )
    rep.unknown = sorted(set(labels) - matched)
    return rep


def _rejected_rows(rep: LabelReport, labels: Mapping[str, Label], inputs: _Inputs) -> list[dict]:
    """A ``rejected`` row per contradiction not applied: the results file is the raw blob."""
    rows = []
    for c in rep.contradictions:
        if c.overridden:
            continue
        lab = labels[c.instance_id]
        blob = inputs.blob(lab.path)
        rows.append(
            {
                "raw_blob": blob or "",
                "reason": f"label contradicts the stored outcome: {c.describe()}",
                "path": lab.path,
                "line": lab.line,
                "format": f"labels:{lab.kind}",
            }
        )
    return rows


def _finish(
    store: Store,
    labels: Mapping[str, Label],
    inputs: _Inputs,
    tally: _Tally,
    *,
    override: bool,
    exclude: set[str],
) -> tuple[LabelReport, list[dict]]:
    """Label the stored trajectories (``tally`` may hold decisions made already, for
    ``exclude``); the report and the ``rejected`` rows to write."""
    matched, manifest = _apply_stored(store, labels, tally, override=override, exclude=exclude)
    rep = _report(labels, tally, matched, inputs, manifest)
    return rep, _rejected_rows(rep, labels, inputs)


def attach_labels(store: Store, results: Results, *, override: bool = False) -> LabelReport:
    """Apply evaluation labels to the stored trajectories of their instances.

    Every trajectory whose ``task_id`` is a label's instance id gets it (several runs of one
    instance all do). Changed rows are written as one new version of ``trajectories`` (a
    Delta MERGE updating ``success`` and ``data``); earlier versions keep the earlier
    outcomes. A ``runs`` row records stage ``label`` with the results files (stored as
    blobs) as inputs and the new version as output. When nothing changes (the same labels
    again), nothing is committed.

    Args:
        store: the store.
        results: results files or directories (see :func:`knowlyr.labels.read_labels`),
            or labels already loaded (``{instance_id: Label}``).
        override: apply labels that contradict a trajectory's outcome (the log's success or
            an earlier label); without it they are counted, listed and kept in ``rejected``.

    Raises:
        LabelError: a results file cannot be read (names the file, key and fix).

    Example:
        >>> rep = attach_labels(store, ["logs/run_evaluation/run1"])   # doctest: +SKIP
        >>> rep.summary()                                              # doctest: +SKIP
        '300 labels: 12 applied, 0 unchanged, 1 contradicting, 288 unknown instances'
        >>> rep.trajectories.version                                   # doctest: +SKIP
        4
    """
    started = datetime.now(UTC)
    labels, files = _as_labels(results)
    inputs = _Inputs(files)
    rep, rows = _finish(store, labels, inputs, _Tally(), override=override, exclude=set())
    if rep.trajectories is not None or rows:
        inputs.put(store)
    if rows:
        rep.rejected = store.append("rejected", rows)
    outputs: dict[str, int] = {}
    if rep.trajectories is not None:
        outputs["trajectories"] = rep.trajectories.version
    if rep.rejected is not None and rep.rejected.committed:
        outputs["rejected"] = rep.rejected.version
    if outputs:
        run = store.record_run(
            "label",
            inputs=rep.inputs,
            outputs=outputs,
            params={"override": override, **rep.counts()},
            started=started,
        )
        rep.run_id = run.run_id
    return rep

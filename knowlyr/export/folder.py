"""Write an export folder from Arrow record batches, one batch at a time, without ``datasets``.

The folder is the one :meth:`~knowlyr.export.common.ExportResult.save` writes: ``dataset/``
(what ``datasets.Dataset.save_to_disk`` writes: one Arrow stream file, ``dataset_info.json``
and ``state.json``, so ``datasets.load_from_disk`` reads it), ``data.parquet``, ``README.md``
(the card) and ``card.json``. Streaming the batches keeps memory at one batch whatever the
export's size, and a command line that only writes the folder never imports ``datasets``
(~0.7 s and ~150 MB). The features written are those ``datasets`` derives for the column
types an export has (string, bool, int64, float64, lists of them and ``list<json>``).

Example:
    >>> write_folder("out/sft", schema, batches, card)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowlyr._gc import paused
from knowlyr.errors import ExportError

if TYPE_CHECKING:
    import pyarrow as pa

    from knowlyr.export.common import DatasetCard
    from knowlyr.trajectory import Trajectory

__all__ = ["SavedExport", "features", "save_sft", "write_folder", "write_parquet"]

_DATA_FILE = "data-00000-of-00001.arrow"


@dataclass
class SavedExport:
    """What :func:`save_sft` wrote: the folder (``None`` when there were no rows), the card
    and the trajectories left out with the reason."""

    path: Path | None
    card: DatasetCard
    rejected: list[tuple[str, str]]


def save_sft(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    path: str | os.PathLike[str],
    **kw: Any,
) -> SavedExport:
    """:func:`export_sft` straight into the folder ``ExportResult.save`` writes, streaming.

    The keyword arguments are :func:`export_sft`'s. Batches of rows go to a spill file beside
    ``path`` as they are built and are written out one at a time once the tool schemas are
    known (a row's are inferred from every call of its agent when its source does not say), so memory holds one batch whatever the size
    of the export, and the ``datasets`` library is not imported
    (:func:`~knowlyr.export.folder.write_folder`). An export of no rows writes nothing.

    Example:
        >>> saved = save_sft(documents, "out/sft", min_reward=0.5)  # doctest: +SKIP
        >>> saved.card.rows  # doctest: +SKIP
    """
    import tempfile

    from knowlyr.export.sft import _gather, _schema

    path = Path(path)
    where = path.parent if path.parent.is_dir() else None
    with paused(), tempfile.TemporaryDirectory(prefix=".knowlyr-sft-", dir=where) as tmp:
        g = _gather(trajectories, **_defaults(kw), spill=os.path.join(tmp, "rows.arrow"))
        try:
            if not g.card.rows:
                return SavedExport(None, g.card, g.rejected)
            batches = g.rows.record_batches(g.row_tools)
            write_folder(path, _schema(), batches, g.card)
        finally:
            g.rows.close()
    return SavedExport(path, g.card, g.rejected)


def _defaults(kw: dict[str, Any]) -> dict[str, Any]:
    """:func:`export_sft`'s keyword arguments with its defaults filled in."""
    import inspect

    from knowlyr.export.sft import export_sft

    params = inspect.signature(export_sft).parameters
    unknown = sorted(set(kw) - set(params))
    if unknown:
        raise TypeError(f"save_sft() got unexpected keyword arguments: {', '.join(unknown)}")
    return {k: kw.get(k, p.default) for k, p in params.items() if k != "trajectories"}


def features(schema: pa.Schema) -> dict[str, Any]:
    """The ``datasets`` features (as their JSON) of an export's Arrow schema."""
    return {f.name: _feature(f.type, f.name) for f in schema}


def _feature(t: pa.DataType, name: str) -> dict[str, Any]:
    import pyarrow as pa

    if t == pa.json_():
        return {"_type": "Json"}
    if pa.types.is_list(t):
        return {"feature": _feature(t.value_type, name), "_type": "List"}
    for check, dtype in (
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "large_string"),
        (pa.types.is_boolean, "bool"),
        (pa.types.is_int64, "int64"),
        (pa.types.is_int32, "int32"),
        (pa.types.is_float64, "float64"),
    ):
        if check(t):
            return {"dtype": dtype, "_type": "Value"}
    raise ExportError(f"column {name!r}: no dataset feature for Arrow type {t}")


def write_folder(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    card: DatasetCard,
    *,
    parquet: bool = True,
) -> Path:
    """Write ``batches`` (of ``schema``) and ``card`` as an export folder; returns its path.

    The dataset's fingerprint is the hash of the Arrow data file written
    (:func:`~knowlyr._arrow.file_fingerprint`), and the cache files of an earlier export in
    the folder go (see :func:`clear_caches`). ``parquet=False`` leaves ``data.parquet`` out,
    for :func:`write_parquet` to write."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from knowlyr._arrow import file_fingerprint
    from knowlyr.export.common import RowsDigest, readme

    path = Path(path)
    data = path / "dataset"
    data.mkdir(parents=True, exist_ok=True)
    clear_caches(data)
    feats = features(schema)
    digest = RowsDigest(card)
    info = {"citation": "", "description": "", "features": feats, "homepage": "", "license": ""}
    schema = _with_features(schema)
    with (
        pa.OSFile(str(data / _DATA_FILE), "wb") as sink,
        pa.ipc.new_stream(sink, schema) as arrow,
        pq.ParquetWriter(str(path / "data.parquet"), schema) if parquet else nullcontext() as pw,
    ):
        for batch in batches:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
            arrow.write_batch(batch)
            digest.update(batch)
            if pw is not None:
                pw.write_batch(batch)
    state = {
        "_data_files": [{"filename": _DATA_FILE}],
        "_fingerprint": file_fingerprint(str(data / _DATA_FILE)),
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    (data / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), "utf-8")
    (data / "dataset_info.json").write_text(json.dumps(info, indent=2), "utf-8")
    # data.parquet: written here or by write_parquet
    (path / "README.md").write_text(readme(card, digest), encoding="utf-8")
    (path / "card.json").write_text(
        json.dumps(card.to_dict(), indent=2, default=str), encoding="utf-8"
    )
    return path


def clear_caches(folder: Path) -> None:
    """Remove the ``cache-*.arrow`` files ``datasets`` left in a dataset folder (what ``map``
    and the like wrote for the dataset there before): a new export replaces that data."""
    for cache in folder.glob("cache-*.arrow"):
        cache.unlink(missing_ok=True)


def write_parquet(
    path: str | os.PathLike[str], schema: pa.Schema, batches: Iterable[pa.RecordBatch]
) -> None:
    """The ``data.parquet`` of the export folder ``path`` that :func:`write_folder` writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _with_features(schema)
    Path(path).mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(str(Path(path) / "data.parquet"), schema) as pw:
        for batch in batches:
            pw.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))


def _with_features(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its ``datasets`` features as metadata (what ``save_to_disk`` writes)."""
    return schema.with_metadata(
        {"huggingface": json.dumps({"info": {"features": features(schema)}})}
    )

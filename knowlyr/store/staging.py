"""Stage trajectories as raw JSONL blobs, then add staged blobs to the trajectories table.

Parallel collectors write their episodes as one content-addressed blob each
(:func:`stage_trajectories`); one writer later adds every staged blob to the table
(:func:`add_staged`), where known content hashes are duplicates and bad lines are kept in
the ``rejected`` table with their reason. The raw blob and line stay the trajectory's source,
so lineage reaches the raw episodes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowlyr.store.models import Manifest

if TYPE_CHECKING:
    from knowlyr.store.store import Store
    from knowlyr.trajectory import Trajectory

__all__ = ["AddStagedResult", "StagedBlob", "add_staged", "stage_trajectories"]


@dataclass(frozen=True)
class StagedBlob:
    """One staged blob and the source path its trajectories get when they have none.

    Attributes:
        blob: the blob's digest (see :func:`stage_trajectories`).
        source_path: e.g. ``"collect:knowlyr/conversation:expert"``.
    """

    blob: str
    source_path: str


@dataclass
class AddStagedResult:
    """What :func:`add_staged` wrote.

    Attributes:
        trajectories: the trajectories manifest (``.new``, ``.duplicates``, ``.version``).
        rejected: rows added to the ``rejected`` table (``raw_blob``, ``reason``, ``line``).
        read: trajectories parsed from the blobs.
    """

    trajectories: Manifest
    rejected: list[dict[str, object]]
    read: int


def stage_trajectories(store: Store, trajectories: Sequence[Trajectory]) -> str:
    """Write ``trajectories`` as one JSONL blob (one trajectory a line); return its digest.

    Example:
        >>> blob = stage_trajectories(store, trajs)  # doctest: +SKIP
        >>> add_staged(store, [StagedBlob(blob, "collect:my-env:expert")])  # doctest: +SKIP
    """
    import orjson

    raw = b"".join(orjson.dumps(t.model_dump(mode="json")) + b"\n" for t in trajectories)
    return store.put_blob(raw)


def add_staged(
    store: Store, staged: Sequence[StagedBlob], *, stage: str = "collect"
) -> AddStagedResult:
    """Add the trajectories of staged blobs to the table; record the run as ``stage``.

    Every trajectory's source becomes its blob and line (its path, if empty, the blob's
    ``source_path``). A line that is not a valid trajectory is kept as a blob and a row of
    the ``rejected`` table with the reason; the rest of the batch goes on.

    The lines become table rows without trajectory models (validated by the model's own
    schema, :mod:`knowlyr.store._documents`) and are streamed into the table blob by blob,
    so memory holds one blob and one batch of rows, however many are staged.

    Args:
        store: the store holding the blobs.
        staged: the blobs, in order.
        stage: the run's stage name in the lineage.

    Example:
        >>> res = add_staged(store, [StagedBlob(blob, "collect:env:expert")])  # doctest: +SKIP
        >>> res.trajectories.new, len(res.rejected)  # doctest: +SKIP
        (12, 0)
    """
    from knowlyr.store._documents import DocumentRow, document_row_of, validate_line

    rejected: list[dict[str, object]] = []
    read = 0

    def rows() -> Iterator[DocumentRow]:
        nonlocal read
        for s in staged:
            for line_no, line in enumerate(store.get_blob(s.blob).splitlines(), 1):
                try:
                    doc = validate_line(line)
                except ValueError as e:  # a bad record is kept with its reason, the batch goes on
                    reason = f"invalid trajectory: {str(e).splitlines()[0][:300]}"
                    rejected.append(
                        {"raw_blob": store.put_blob(line), "reason": reason, "line": line_no}
                    )
                    continue
                src = doc["source"]
                src["blob"], src["line"] = s.blob, line_no
                src["path"] = src["path"] or s.source_path
                read += 1
                yield document_row_of(doc)

    run_id = uuid.uuid4().hex  # the run's sightings of its trajectories name it
    m = store.add_trajectories(rows(), run_id=run_id)
    if rejected:
        store.append("rejected", rejected)
    store.record_run(
        stage,
        outputs={"trajectories": m.version},
        params={"raw_blobs": [s.blob for s in staged], "episodes": read},
        run_id=run_id,
    )
    return AddStagedResult(trajectories=m, rejected=rejected, read=read)

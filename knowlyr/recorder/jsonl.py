"""Trajectory JSONL from logs: :func:`write_jsonl`, what ``knowlyr record convert`` writes.

Every converted record's trajectory JSON (what :func:`~knowlyr.recorder.iter_encoded` gives
as :attr:`Encoded.json <knowlyr.recorder.Encoded.json>`) becomes one line of the output, in
file order; the caller gets a :class:`Written` for it (id, format, where it came from, the
redaction audit), or the :class:`~knowlyr.recorder.Rejected` record with its reason.

With workers, each writes the lines of its work unit to a file of its own beside the output,
and this process appends the units' files to the output in order (``os.copy_file_range``: the
kernel copies them). Sending the JSON to this process through the pool's pipes instead cost
~20 us per 20-step log here (pickled, piped, unpickled, copied into the file buffer), a tenth
of converting the log, in the process that shares the CPUs with the workers.

Example:
    >>> from knowlyr.recorder import Written, write_jsonl
    >>> done = list(write_jsonl(["tests/data/fixtures/openhands"], "trajs.jsonl"))  # doctest: +SKIP
    >>> sum(isinstance(r, Written) for r in done)  # doctest: +SKIP
    4
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from knowlyr.recorder.pipeline import (
    Encoded,
    Rejected,
    _iter_file,
    _Writer,
    auto_workers,
    prepare,
)
from knowlyr.recorder.redact import Redaction, RedactionPolicy

__all__ = ["Written", "write_jsonl"]


@dataclass(slots=True)
class Written:
    """A record converted and written as a line of the output.

    Attributes:
        id: the trajectory's content hash.
        format: the format its log was read as.
        path: the log (as :func:`~knowlyr.recorder.shown_path` shows it).
        line: 1-based line of the record in a JSONL file, else ``None``.
        redactions: what was redacted and where (never the secret itself).
        nulled: non-finite numbers (``NaN``, ``Infinity``) of the record stored as null.
    """

    id: str
    format: str
    path: str | None
    line: int | None
    redactions: list[Redaction] = field(default_factory=list)
    nulled: int = 0


def _lines(results: Iterable[Encoded | Rejected], out: BinaryIO) -> Iterator[Written | Rejected]:
    """``results`` with each :class:`Encoded` record's JSON written to ``out`` as a line, and
    yielded as its :class:`Written`."""
    write = out.write
    for r in results:
        if isinstance(r, Encoded):
            row = r.row
            write(row[12])
            write(b"\n")
            yield Written(row[0], row[9], row[10], r.line, r.redactions, r.nulled)
        else:
            yield r


def write_jsonl(
    paths: Iterable[str | Path] | str | Path,
    output: str | os.PathLike[str],
    *,
    format: str | None = None,
    redact: bool | RedactionPolicy = True,
    workers: int = 0,
    progress: Callable[[Path], None] | None = None,
    on_skip: Callable[[Path], None] | None = None,
) -> Iterator[Written | Rejected]:
    """Convert every record under ``paths`` and write each trajectory's JSON as one line of
    ``output`` (created or truncated; complete once the iterator is exhausted), in file
    order: the lines :func:`~knowlyr.recorder.iter_encoded` gives, byte for byte.

    Args:
        output: the JSONL file to write.
        workers: processes to convert with; ``0``: one per CPU from 2 CPUs up (small inputs
            stay in this process, see :func:`~knowlyr.recorder.iter_records`).
        Others: as :func:`~knowlyr.recorder.iter_records`.

    Yields:
        A :class:`Written` per converted record, a :class:`~knowlyr.recorder.Rejected` per
        record that could not be (``read == written + rejected``).

    Raises:
        UnknownFormatError: when ``format`` names no registered format (nothing is read).
    """
    policy, files, n = prepare(paths, format, redact, workers, on_skip, auto_workers(encoded=True))
    output = Path(output)
    with open(output, "wb", buffering=1 << 20) as out:
        if n > 1:
            from knowlyr.recorder import pool

            parts = _parts_folder(output)
            try:
                yield from pool.iter_pool(
                    files, format, policy, n, progress, parts=(parts, _appender(out))
                )
            finally:
                shutil.rmtree(parts, ignore_errors=True)
            return
        writer = _Writer()
        for p in files:
            yield from _lines(_iter_file(p, format, policy, writer), out)
            if progress is not None:
                progress(Path(p))


def _parts_folder(output: Path) -> str:
    """A new folder for the units' files: beside the output (the same file system, where the
    kernel copies fastest), else (``-o /dev/stdout``, a folder this user cannot write to) in
    the system's temporary folder."""
    try:
        return tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent)
    except OSError:
        return tempfile.mkdtemp(prefix="knowlyr-jsonl-")


_copy_range = getattr(os, "copy_file_range", None)  # Linux


def _appender(out: BinaryIO) -> Callable[[str], None]:
    """What appends a unit's file to ``out`` (and removes the file): the kernel copies it
    where it can, else it is read and written here."""

    def append(part: str) -> None:
        out.flush()
        with open(part, "rb") as f:
            left = os.fstat(f.fileno()).st_size
            try:
                while left > 0 and _copy_range is not None:
                    k = _copy_range(f.fileno(), out.fileno(), left)
                    if k == 0:
                        break
                    left -= k
            except OSError:  # not on this file system, or to this kind of file
                pass
            if left > 0:
                f.seek(-left, os.SEEK_END)
                shutil.copyfileobj(f, out)
                out.flush()
        os.unlink(part)

    return append

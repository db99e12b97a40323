"""Walk paths, detect formats, stream records through adapters: :func:`iter_records`,
:func:`iter_encoded` (for writers: each trajectory as its JSON and store row), :func:`convert`.

Every record ends as exactly one :class:`Converted` (or :class:`Encoded`) or
:class:`Rejected`, so a run's counts always add up (``read == converted + rejected``).
Files are read one at a time and JSONL is streamed line by line; each line is its own record
with its own raw bytes and line number (except for session formats, where a whole JSONL file
is one trajectory).

Example:
    >>> from knowlyr.recorder import convert
    >>> report = convert(["tests/data/fixtures"])  # doctest: +SKIP
    >>> report.read == report.converted + report.rejected  # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from knowlyr._gc import paused
from knowlyr.errors import RecordError
from knowlyr.recorder.base import (
    Adapter,
    get_adapter,
    source,
)
from knowlyr.recorder.files import (
    _LINE_SUFFIXES,
    _first_line_obj,
    _is_lines,
    _loads_nonfinite,
    _parse,
    _read,
    _read_lines,
    _ReadError,
    _sniff,
    _unknown,
    _utf8,
    _walk,
    _why_not_file,
    shown_path,
)
from knowlyr.recorder.redact import (
    Redaction,
    RedactionPolicy,
    locate_redactions,
    redaction_policy,
)
from knowlyr.store.tables import document_row, trajectory_row
from knowlyr.trajectory import Trajectory

__all__ = [
    "ConvertReport",
    "Converted",
    "Encoded",
    "Rejected",
    "convert",
    "iter_bytes",
    "iter_encoded",
    "iter_records",
]


@dataclass(slots=True)
class Converted:
    """A record that became a trajectory.

    Attributes:
        trajectory: the result; ``trajectory.source`` holds format, path, line and
            ``blob == sha256(raw).hexdigest()``.
        raw: the record's bytes as read (the file, or the JSONL line), with secrets redacted
            when redaction is on: this is what the store keeps as the raw blob.
        redactions: what was redacted and where (never the secret itself).
        nulled: ``NaN`` / ``Infinity`` / ``-Infinity`` values of the record (as Python's
            ``json.dump`` writes non-finite floats; JSON has no such numbers) stored as null.
    """

    trajectory: Trajectory
    raw: bytes
    redactions: list[Redaction] = field(default_factory=list)
    nulled: int = 0


@dataclass(slots=True)
class Encoded:
    """A converted record already serialised: what :func:`iter_encoded` yields to writers
    that keep the trajectory's JSON and never need the models (``knowlyr record convert``,
    the store's ingest).

    Attributes:
        row: the trajectory's row of the store's ``trajectories`` table
            (:func:`knowlyr.store.tables.trajectory_row`: id, task, agent, outcome and source
            fields, and ``data``, the trajectory's JSON).
        line: 1-based line of the record in a JSONL file, else ``None``.
        redactions: what was redacted and where (never the secret itself).
        nulled: non-finite numbers of the record stored as null (see :class:`Converted`).
    """

    row: tuple
    line: int | None
    redactions: list[Redaction] = field(default_factory=list)
    nulled: int = 0

    # positions in TRAJECTORY_ROW (tests check them)
    @property
    def json(self) -> bytes:
        """``trajectory.to_json()``."""
        return self.row[12]

    @property
    def id(self) -> str:
        return self.row[0]

    @property
    def format(self) -> str:
        return self.row[9]

    @property
    def path(self) -> str | None:
        return self.row[10]

    @property
    def blob(self) -> str | None:
        return self.row[11]

    def trajectory(self) -> Trajectory:
        """The trajectory itself, validated from :attr:`json`."""
        return Trajectory.from_json(self.json)


def encode(r: Converted, put_raw: Callable[..., object] | None = None) -> Encoded:
    """``r`` in serialised form (see :class:`Encoded`); its raw bytes go to
    ``put_raw(raw, digest=sha256)`` when given."""
    t = r.trajectory
    if put_raw is not None:
        put_raw(r.raw, digest=t.source.blob)
    return Encoded(trajectory_row(t), t.source.line, r.redactions, r.nulled)


class _Writer:
    """How the record iterators make :class:`Encoded` records (:func:`iter_encoded`): from the
    adapter's JSON document when it has one (:meth:`Adapter.document`: no models at all),
    else from its trajectory; raw bytes go to ``put_raw``."""

    __slots__ = ("put_raw",)

    def __init__(self, put_raw: Callable[..., object] | None = None):
        self.put_raw = put_raw


@dataclass(slots=True)
class Rejected:
    """A record that could not be converted, quarantined with the reason.

    Attributes:
        path: the file.
        line: 1-based line for JSONL records, else ``None``.
        reason: what is wrong, in words a user can act on.
        raw: the record's bytes (redacted when redaction is on).
    """

    path: str
    line: int | None
    reason: str
    raw: bytes

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the quarantine file (raw as text, invalid UTF-8 replaced)."""
        return {
            "path": self.path,
            "line": self.line,
            "reason": self.reason,
            "raw": self.raw.decode("utf-8", "replace"),
        }


@dataclass(slots=True)
class ConvertReport:
    """What :func:`convert` did. ``read == converted + rejected`` always holds."""

    trajectories: list[Trajectory] = field(default_factory=list)
    rejected_records: list[Rejected] = field(default_factory=list)
    redactions: list[tuple[str, int | None, Redaction]] = field(default_factory=list)
    formats: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    #: per file (as shown), the NaN / Infinity values of its converted records stored as null
    nulled: Counter[str] = field(default_factory=Counter)

    @property
    def converted(self) -> int:
        return len(self.trajectories)

    @property
    def rejected(self) -> int:
        return len(self.rejected_records)

    @property
    def read(self) -> int:
        return self.converted + self.rejected

    @property
    def ok(self) -> bool:
        return not self.rejected_records

    def summary(self) -> dict[str, Any]:
        """Counts, formats and the redaction audit (kind, where, fingerprint) as plain data."""
        return {
            "read": self.read,
            "converted": self.converted,
            "rejected": self.rejected,
            "formats": dict(self.formats),
            "skipped": list(self.skipped),
            "nulled": dict(self.nulled),
            "redactions": [{"path": p, "line": ln, **r.to_dict()} for p, ln, r in self.redactions],
        }


# -- conversion -------------------------------------------------------------------------------


# A record that holds no step is no episode: rejected (and counted) rather than stored.
_NO_STEPS = "{}: no steps (the record holds no action, message or observation of the agent)"


def _finish(
    traj: Trajectory,
    adapter: Adapter,
    path: str,
    line: int | None,
    raw: bytes,
    hits: list[Redaction],
    index: int | None,
) -> Converted:
    if not isinstance(traj, Trajectory):
        raise RecordError(
            f"{adapter.name}: adapter returned {type(traj).__name__}, not a Trajectory", path=path
        )
    if not traj.steps:
        raise RecordError(_NO_STEPS.format(adapter.name), path=path, line=line)
    traj.__dict__["source"] = source(adapter.name, path, hashlib.sha256(raw).hexdigest(), line)
    if index is not None:
        traj.metadata["record_index"] = index
    return Converted(traj, raw, locate_redactions(traj, hits) if hits else [])


def _finish_document(
    doc: dict[str, Any],
    adapter: Adapter,
    path: str,
    line: int | None,
    raw: bytes,
    hits: list[Redaction],
    index: int | None,
    put_raw: Callable[..., object] | None,
) -> Encoded:
    """:func:`_finish` and :func:`encode` for an adapter's JSON document."""
    if not doc.get("steps"):
        raise RecordError(_NO_STEPS.format(adapter.name), path=path, line=line)
    blob = hashlib.sha256(raw).hexdigest()
    src = {"format": adapter.name, "path": path, "blob": blob}
    if line is not None:
        src["line"] = line
    doc["source"] = src
    if index is not None:
        doc["metadata"]["record_index"] = index
    found = locate_redactions(Trajectory.model_validate(doc), hits) if hits else []
    if put_raw is not None:
        put_raw(raw, digest=blob)
    return Encoded(document_row(doc), line, found)


def _convert_one(
    adapter: Adapter,
    obj: Any,
    path: str,
    line: int | None,
    raw: bytes,
    hits: list[Redaction],
    writer: _Writer | None = None,
    index: int | None = None,
    nulled: int = 0,
) -> Converted | Encoded | Rejected:
    """One record: a :class:`Converted`, or with a ``writer`` an :class:`Encoded`; a
    :class:`Rejected` with the reason when it cannot be converted. ``nulled``: the record's
    non-finite numbers that were parsed as null."""
    try:
        if writer is not None and adapter.documents:
            doc = adapter.document(obj, path=path, line=line)
            out = _finish_document(doc, adapter, path, line, raw, hits, index, writer.put_raw)
        else:
            t = adapter.convert(obj, path=path, line=line)
            done = _finish(t, adapter, path, line, raw, hits, index)
            done.nulled = nulled
            return done if writer is None else encode(done, writer.put_raw)
        out.nulled = nulled
        return out
    except RecordError as e:
        return Rejected(path, line, e.reason, raw)
    except (
        KeyError,
        IndexError,
        TypeError,
        ValueError,
        AttributeError,
        RecursionError,
        ArithmeticError,  # an int past int64 in a count, a float overflow
    ) as e:
        # An adapter tripping over an unexpected shape: the record is bad, the batch goes on.
        # Anything else (a RuntimeError, a failed blob write) is a bug or the machine's and
        # propagates.
        what = f"{type(e).__name__}: {e}"
        return Rejected(path, line, f"{adapter.name}: unexpected structure ({what[:200]})", raw)


def _clean(data: bytes, redact: bool | RedactionPolicy) -> tuple[bytes, list[Redaction]]:
    if not redact:
        return data, []
    return redaction_policy(redact).redact_bytes(data)


def _clean_text(text: str, redact: bool | RedactionPolicy) -> str:
    """A message (a rejection's reason) with what ``redact`` redacts replaced."""
    return redaction_policy(redact).redact_text(text)[0] if redact else text


def _iter_lines(
    adapter: Adapter,
    path: str,
    lines: Iterable[bytes],
    first_line: int,
    redact: bool | RedactionPolicy,
    writer: _Writer | None = None,
) -> Iterator[Converted | Encoded | Rejected]:
    path = shown_path(path, redact)  # idempotent: callers may pass it shown already
    lineno = first_line - 1
    for raw in lines:
        lineno += 1
        raw = raw.rstrip(b"\r\n")
        if not raw.strip():
            continue
        clean, hits = _clean(raw, redact)
        nulled = 0
        try:
            obj = orjson.loads(clean)
        except orjson.JSONDecodeError as e:
            try:
                obj, nulled = _loads_nonfinite(clean, e)
            except orjson.JSONDecodeError:
                yield Rejected(path, lineno, f"line is not valid JSON ({e})", clean)
                continue
        yield _convert_one(adapter, obj, path, lineno, clean, hits, writer, nulled=nulled)


def _iter_session(
    adapter: Adapter,
    path: str,
    data: bytes,
    redact: bool | RedactionPolicy,
    writer: _Writer | None = None,
) -> Iterator[Converted | Encoded | Rejected]:
    clean, hits = _clean(data, redact)
    lines = clean.split(b"\n")
    loads = orjson.loads
    nulled = 0
    try:  # every line at once; a line that is not JSON sends the file through the loop below
        objs = [loads(raw) for raw in lines if raw and not raw.isspace()]
    except orjson.JSONDecodeError:
        objs = []
        for lineno, raw in enumerate(lines, 1):
            if not raw or raw.isspace():  # what `not raw.strip()` says, without the copy
                continue
            try:
                obj, n = _parse(raw)
                objs.append(obj)
                nulled += n
            except orjson.JSONDecodeError as e:
                yield Rejected(
                    path,
                    lineno,
                    f"line is not valid JSON ({e}); the rest of the session is kept",
                    raw,
                )
    if objs:
        yield _convert_one(adapter, objs, path, None, clean, hits, writer, nulled=nulled)
    elif not clean.strip():
        yield Rejected(path, None, "empty file", clean)


def _iter_file(
    path: str, fmt: str | None, redact: bool | RedactionPolicy, writer: _Writer | None = None
) -> Iterator[Converted | Encoded | Rejected]:
    """Every record of one file (``path``: its text, as :func:`_walk` gives it); never raises
    for what is in the file: a file that cannot be read (a truncated ``.json.gz``, a ``.gz``
    that is not gzip) is a :class:`Rejected` with its path and the reason, after the records
    read before the break."""
    spath = shown_path(path, redact)
    why = _why_not_file(path)
    if why is not None:  # missing, or a symlink loop, a FIFO, a socket...: never opened
        # a dangling link's reason names its target: a secret there must not reach it
        yield Rejected(spath, None, _clean_text(why, redact), b"")
        return
    try:
        yield from _iter_file_records(path, spath, fmt, redact, writer)
    except _ReadError as e:
        # the OS error names the file: a secret in its name must not reach the reason
        yield Rejected(spath, None, _clean_text(e.reason, redact), b"")


def _iter_file_records(
    path: str,
    spath: str,
    fmt: str | None,
    redact: bool | RedactionPolicy,
    writer: _Writer | None,
) -> Iterator[Converted | Encoded | Rejected]:
    adapter = get_adapter(fmt) if fmt else None
    if _is_lines(path):
        if adapter is None:
            try:
                first = _first_line_obj(path)
            except RecordError as e:
                yield Rejected(spath, None, e.reason, _clean(_read(path), redact)[0])
                return
            adapter = _sniff(first)
            if adapter is None:
                yield Rejected(
                    spath,
                    None,
                    _unknown(spath, "file's first line").reason,
                    _clean(_read(path), redact)[0],
                )
                return
        if adapter.session:
            yield from _iter_session(adapter, spath, _read(path), redact, writer)
            return
        yield from _iter_lines(adapter, spath, _read_lines(path), 1, redact, writer)
        return
    yield from _iter_json(_read(path), spath, adapter, redact, writer)


def _iter_json(
    data: bytes,
    spath: str,
    adapter: Adapter | None,
    redact: bool | RedactionPolicy,
    writer: _Writer | None = None,
) -> Iterator[Converted | Encoded | Rejected]:
    """A whole JSON document (or JSON lines in a .json file) from memory."""
    clean, hits = _clean(data, redact)
    try:
        doc, nulled = _parse(clean)
    except orjson.JSONDecodeError as e:
        # A .json/.traj file may hold JSON lines after all.
        lines = clean.split(b"\n")
        if len(lines) > 1:
            try:
                first = _parse(next(x for x in lines if x.strip()))[0]
            except (orjson.JSONDecodeError, StopIteration):
                first = None
            if first is not None:
                a = adapter or _sniff(first)
                if a is not None:
                    if a.session:
                        yield from _iter_session(a, spath, data, redact, writer)
                    else:
                        yield from _iter_lines(a, spath, data.split(b"\n"), 1, redact, writer)
                    return
        yield Rejected(spath, None, f"not valid JSON ({e})", clean)
        return
    if adapter is None:
        adapter = _sniff(doc)
        if adapter is None:
            yield Rejected(spath, None, _unknown(spath, "file", doc).reason, clean)
            return
    try:
        records = adapter.split(doc)
    except RecordError as e:
        yield Rejected(spath, None, e.reason, clean)
        return
    if len(records) == 1 and records[0] is doc:
        yield _convert_one(adapter, doc, spath, None, clean, hits, writer, nulled=nulled)
        return
    for i, rec in enumerate(records):
        raw = orjson.dumps(rec)
        found = [h for h in hits if h.fingerprint.encode() in raw]
        # the file's nulled values are counted once, on its first converted record
        out = _convert_one(adapter, rec, spath, None, raw, found, writer, index=i, nulled=nulled)
        if isinstance(out, Rejected):
            out.reason = f"record {i}: {out.reason}"
        else:
            nulled = 0
        yield out


def iter_bytes(
    data: bytes,
    *,
    path: str = "<bytes>",
    format: str | None = None,
    jsonl: bool | None = None,
    redact: bool | RedactionPolicy = True,
) -> Iterator[Converted | Rejected]:
    """Convert a log held in memory (e.g. read from object storage), like :func:`iter_records`.

    Args:
        data: the log's bytes.
        path: the name to record as ``source.path`` and in rejections.
        format: a format name; detected when ``None``.
        jsonl: one record per line; ``None`` decides from ``path``'s suffix.
        redact: replace secrets first (a :class:`~knowlyr.recorder.redact.RedactionPolicy`
            also redacts the personal-data classes it names).

    Example:
        >>> [r.trajectory.tools_used() for r in iter_bytes(b'[{"action": "run", "args": {"command": "ls"}}]')]
        [['bash']]
    """
    adapter = get_adapter(format) if format else None
    redact = redaction_policy(redact)
    if jsonl is None:
        jsonl = path.lower().endswith(_LINE_SUFFIXES)
    path = shown_path(path, redact)
    data = _utf8(data)  # a byte order mark dropped, UTF-16 read as its text
    if not jsonl:
        yield from _iter_json(data, path, adapter, redact)
        return
    if adapter is None:
        first = None
        for ln in data.split(b"\n", 20)[:20]:
            if ln.strip():
                try:
                    first = _parse(ln)[0]
                    break
                except orjson.JSONDecodeError:
                    continue
        adapter = _sniff(first) if first is not None else None
        if adapter is None:
            reason = (
                _unknown(path, "first line").reason
                if first is not None
                else "no line is a JSON value"
            )
            yield Rejected(path, None, reason, _clean(data, redact)[0])
            return
    if adapter.session:
        yield from _iter_session(adapter, path, data, redact)
    else:
        yield from _iter_lines(adapter, path, data.split(b"\n"), 1, redact)


def auto_workers(*, encoded: bool = False) -> int:
    """What ``workers=0`` means here. For :func:`iter_records`: one process per CPU with 4
    CPUs or more, else 1 (the caller rebuilds every trajectory a worker sends, which costs
    ~20% of converting it). For :func:`iter_encoded`: one process per CPU from 2 CPUs up
    (workers send finished JSON; the caller only writes it)."""
    cpus = os.cpu_count() or 1
    return cpus if cpus >= (2 if encoded else 4) else 1


def prepare(
    paths: Iterable[str | Path] | str | Path,
    format: str | None,
    redact: bool | RedactionPolicy,
    workers: int,
    on_skip: Callable[[Path], None] | None,
    auto: int,
) -> tuple[RedactionPolicy, list[str], int]:
    """What a conversion of ``paths`` starts from (:func:`iter_records`, :func:`iter_encoded`,
    :func:`~knowlyr.recorder.write_jsonl`): the redaction policy, the files to read and the
    processes to read them with (``workers``, ``0``: ``auto``; 1 when a pool would not pay
    for itself). ``format`` is checked first, so a typo fails before anything is read."""
    if format is not None:
        get_adapter(format)
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    policy = redaction_policy(redact)
    files = list(_walk(paths, on_skip))
    n = workers or auto
    if n > 1:
        from knowlyr.recorder import pool

        if not pool.worth_it(files):
            n = 1
    return policy, files, n


def iter_records(
    paths: Iterable[str | Path] | str | Path,
    *,
    format: str | None = None,
    redact: bool | RedactionPolicy = True,
    workers: int = 1,
    progress: Callable[[Path], None] | None = None,
    on_skip: Callable[[Path], None] | None = None,
) -> Iterator[Converted | Rejected]:
    """Convert every record under ``paths``, yielding one result per record, in file order.

    Args:
        paths: files and directories (walked recursively for .json/.jsonl/.ndjson/.traj).
        format: a format name from :func:`list_formats`; ``None`` detects it per file.
        redact: replace API keys, tokens and passwords before anything is parsed or kept, in
            the records and in the paths kept as ``source.path``; a
            :class:`~knowlyr.recorder.redact.RedactionPolicy` also redacts the personal-data
            classes it names (e-mail addresses, phone numbers, IP addresses).
        workers: processes to convert with: ``1`` converts in this process; ``0`` chooses:
            one per CPU on machines with 4 CPUs or more, else this process alone (handing a
            converted trajectory from one process to another costs ~60% of converting it,
            so on 2 CPUs a pool gains little when they are idle and loses when they are not).
            A pool is only started for large inputs (a few hundred logs or a JSONL file over
            1 MB). Results are the same and come back in the same order either way.
        progress: called with each file's path once its records have been yielded.
        on_skip: called with each file of a walked directory that is not read (its suffix
            names no log format), see :func:`iter_files`.

    Raises:
        UnknownFormatError: when ``format`` names no registered format (nothing is read).

    Example:
        >>> for r in iter_records(["logs/"], format="openhands"):  # doctest: +SKIP
        ...     print(r.trajectory.id if isinstance(r, Converted) else r.reason)
    """
    policy, files, n = prepare(paths, format, redact, workers, on_skip, auto_workers())
    if n > 1:
        from knowlyr.recorder import pool

        yield from pool.iter_pool(files, format, policy, n, progress)
        return
    for p in files:
        yield from _iter_file(p, format, policy)
        if progress is not None:
            progress(Path(p))


def iter_encoded(
    paths: Iterable[str | Path] | str | Path,
    *,
    format: str | None = None,
    redact: bool | RedactionPolicy = True,
    workers: int = 0,
    put_raw: Callable[..., object] | None = None,
    progress: Callable[[Path], None] | None = None,
    on_skip: Callable[[Path], None] | None = None,
) -> Iterator[Encoded | Rejected]:
    """:func:`iter_records` for writers: each converted record comes as its trajectory's JSON
    (:class:`Encoded`), serialised where it was converted. With a pool the caller then does
    almost nothing per record, so conversion scales with the workers (``workers=0``: one per
    CPU). Same records, same order, same counts as :func:`iter_records`.

    Args:
        put_raw: called as ``put_raw(raw, digest=sha256)`` with each converted record's
            redacted raw bytes, in the process that converted it, so with a pool it must be
            picklable (the store's ingest passes ``store.blobs.put``: workers write the blobs).
        Others: as :func:`iter_records`.

    Example:
        >>> with open("out.jsonl", "wb") as f:  # doctest: +SKIP
        ...     for r in iter_encoded(["logs/"]):
        ...         if isinstance(r, Encoded):
        ...             f.write(r.json + b"\\n")
    """
    policy, files, n = prepare(paths, format, redact, workers, on_skip, auto_workers(encoded=True))
    if n > 1:
        from knowlyr.recorder import pool

        yield from pool.iter_pool(files, format, policy, n, progress, encoded=True, put_raw=put_raw)
        return
    writer = _Writer(put_raw)
    for p in files:
        yield from _iter_file(p, format, policy, writer)
        if progress is not None:
            progress(Path(p))


@paused()
def convert(
    paths: Iterable[str | Path] | str | Path,
    *,
    format: str | None = None,
    redact: bool | RedactionPolicy = True,
    workers: int = 1,
    progress: Callable[[Path], None] | None = None,
) -> ConvertReport:
    """Convert everything under ``paths`` into a :class:`ConvertReport` (trajectories, the
    quarantined records with reasons, formats seen, the redaction audit, the files skipped
    for their suffix). Arguments as :func:`iter_records`.

    Example:
        >>> r = convert(["tests/data/fixtures/openhands"])  # doctest: +SKIP
        >>> (r.read, r.converted, r.rejected)  # doctest: +SKIP
        (4, 4, 0)
    """
    report = ConvertReport()

    def skip(p: Path) -> None:
        report.skipped.append(shown_path(p, redact))

    for r in iter_records(
        paths, format=format, redact=redact, workers=workers, progress=progress, on_skip=skip
    ):
        if isinstance(r, Converted):
            report.trajectories.append(r.trajectory)
            report.formats[r.trajectory.source.format] += 1
            if r.nulled:
                report.nulled[r.trajectory.source.path or ""] += r.nulled
            for h in r.redactions:
                report.redactions.append(
                    (r.trajectory.source.path or "", r.trajectory.source.line, h)
                )
        else:
            report.rejected_records.append(r)
    return report

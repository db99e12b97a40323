"""Log files: which files a walk reads, how they are read (gunzipped, line by line, with
read errors as rejections), how their paths are shown, and which adapter a file's content
belongs to (:func:`detect_format`).

The conversion itself (records through adapters, counts that add up) is
:mod:`knowlyr.recorder.pipeline`.
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from knowlyr.errors import RecordError, UnknownFormatError
from knowlyr.labels import looks_like_results
from knowlyr.recorder.base import _ORDER, Adapter, adapters
from knowlyr.recorder.redact import RedactionPolicy, redaction_policy

__all__ = ["FILE_SUFFIXES", "detect_format", "is_log_file", "iter_files", "shown_path"]

_PLAIN = (".json", ".jsonl", ".ndjson", ".traj")
FILE_SUFFIXES = _PLAIN + tuple(f"{s}.gz" for s in _PLAIN)
_LINE_SUFFIXES = (".jsonl", ".ndjson")
# what a broken file raises while it is read: a truncated gzip stream (EOFError), a ".gz" that
# is not gzip (gzip.BadGzipFile, an OSError), a corrupt deflate block (zlib.error), I/O errors
_READ_ERRORS = (OSError, EOFError, zlib.error)


class _ReadError(RecordError):
    """A file could not be read to its end (see :data:`_READ_ERRORS`); its records so far
    stand, the rest of the file is one rejected record with this reason."""

    def __init__(self, error: BaseException):
        what = "not gzip or truncated" if _is_gzip_error(error) else "unreadable"
        super().__init__(f"file is {what} ({type(error).__name__}: {str(error)[:200]})")


def _is_gzip_error(e: BaseException) -> bool:
    return isinstance(e, EOFError | zlib.error | gzip.BadGzipFile)


def is_log_file(name: str) -> bool:
    """Whether a directory walk reads the file ``name``: a known suffix, in any case
    (``x.json``, ``X.JSON``, ``run.Traj.GZ``)."""
    return name.lower().endswith(FILE_SUFFIXES)


def _is_gz(path: str | Path) -> bool:
    return os.fspath(path).lower().endswith(".gz")


def _open(path: str | Path) -> IO[bytes]:
    """The file's bytes, gunzipped on the fly for ``*.gz``."""
    return gzip.open(path, "rb") if _is_gz(path) else open(path, "rb")


def _is_file(path: str) -> bool:
    """``Path(path).is_file()`` without building a Path when the stat succeeds (a Path per
    file costs ~5% of converting a log)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return Path(path).is_file()  # its own answer: False, or the error it raises


def _read(path: str | Path) -> bytes:
    """The whole file (gunzipped); :class:`_ReadError` when it cannot be read to its end."""
    try:
        with _open(path) as f:
            return f.read()
    except _READ_ERRORS as e:
        raise _ReadError(e) from e


def _read_lines(path: Path) -> Iterator[bytes]:
    """The file's lines (gunzipped), streamed; :class:`_ReadError` where reading breaks off."""
    try:
        with _open(path) as f:
            yield from f
    except _READ_ERRORS as e:
        raise _ReadError(e) from e


def _is_lines(path: str | Path) -> bool:
    return os.fspath(path).lower().removesuffix(".gz").endswith(_LINE_SUFFIXES)


def shown_path(path: str | os.PathLike[str], redact: bool | RedactionPolicy = True) -> str:
    """``path`` as the store and reports keep it: valid UTF-8 (bytes of a file name that are
    not UTF-8 written as ``\\xff`` escapes, as ``os.fsencode`` gives them back) and, when
    ``redact`` is on, with any secret in it replaced (``logs/AKIA….json`` ->
    ``logs/[REDACTED:aws_access_key#…].json``), so that neither ``source.path`` nor a table's
    column statistics hold it.

    Example:
        >>> shown_path(os.fsdecode(b"logs/run\\xff.json"))
        'logs/run\\\\xff.json'
    """
    s = os.fspath(path)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = os.fsencode(s).decode("utf-8", "backslashreplace")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate that was not a file-name byte
            s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    policy = redaction_policy(redact)
    if policy:
        s = policy.redact_text(s)[0]
    return s


# -- walks and detection ------------------------------------------------------------------------------------


def iter_files(
    paths: Iterable[str | Path] | str | Path, *, on_skip: Callable[[Path], None] | None = None
) -> Iterator[Path]:
    """Files to read: named files as given, directories walked recursively (sorted) for
    ``.json``, ``.jsonl``, ``.ndjson`` and ``.traj`` files, gzipped or not, in any case
    (``X.JSON``, ``run.TRAJ``). Missing paths are yielded too (they become
    :class:`Rejected`). Hidden directories (``.git``) are not walked.

    Args:
        paths: files and directories.
        on_skip: called with every file of a walked directory that is not read because its
            suffix names no log format (``notes.txt``, ``run.log``), so callers can count and
            report them.
    """
    return map(Path, _walk(paths, on_skip))


def _walk(
    paths: Iterable[str | Path] | str | Path, on_skip: Callable[[Path], None] | None = None
) -> Iterator[str]:
    """:func:`iter_files` as the paths' text (``str(path)``), without a Path object per file
    (a tenth of a walk's cost): what the converters walk with."""
    if isinstance(paths, str | Path):
        paths = [paths]
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found, skipped = [], []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                base = str(Path(root))  # what str(Path(root, f)) starts with
                prefix = "" if base == "." else os.path.join(base, "")
                for f in files:
                    (found if is_log_file(f) else skipped).append(prefix + f)
            if on_skip is not None:
                for q in sorted(map(Path, skipped)):
                    on_skip(q)
            yield from sorted(found, key=_order)
        else:
            yield str(p)


def _order(path: str) -> str:
    """The key that sorts paths' text as ``sorted()`` sorts the paths (part by part: the
    separator as the character before any other), ten times faster than comparing Paths."""
    return os.path.normcase(path).replace(os.sep, "\0")


def _detection_order() -> list[Adapter]:
    return _ORDER or adapters()


def _sniff(obj: Any) -> Adapter | None:
    for a in _detection_order():
        try:
            if a.sniff(obj):
                return a
        except Exception:  # a sniff that trips on odd input simply does not match
            continue
    return None


def _unknown(path: str, what: str, obj: Any = None) -> UnknownFormatError:
    if looks_like_results(obj):
        return UnknownFormatError(
            f"this {what} holds evaluation results (resolved verdicts), not an agent's log: "
            "pass it with --results (knowlyr ingest, reward calibrate) or to `knowlyr store "
            "label`, and give the logs without it",
            path=path,
        )
    return UnknownFormatError(
        f"no adapter recognises this {what}; pass the format explicitly (-f/format=) if you know it. "
        f"Known formats: {', '.join(a.name for a in adapters())}",
        path=path,
    )


def _first_line_obj(path: Path, limit: int = 10) -> Any:
    seen = 0
    lines = _read_lines(path)
    for raw in lines:
        if not raw.strip():
            continue
        seen += 1
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            if seen >= limit:
                break
    lines.close()
    raise RecordError("no line of the file is a JSON value", path=str(path))


def detect_format(path: str | Path) -> str:
    """The format name of a log file (its first JSON line for JSONL files).

    Raises:
        UnknownFormatError: when no adapter recognises it; the message lists the known formats.
        RecordError: when the file is missing or not JSON at all.

    Example:
        >>> detect_format("tests/data/fixtures/swe_agent/pydicom__pydicom-1458.traj")  # doctest: +SKIP
        'swe_agent'
    """
    p = Path(path)
    if not p.is_file():
        raise RecordError("no such file", path=str(p))
    if _is_lines(p):
        obj = _first_line_obj(p)
    else:
        data = _read(p)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = _first_line_obj(p)
    a = _sniff(obj)
    if a is None:
        raise _unknown(str(p), "file", obj)
    return a.name

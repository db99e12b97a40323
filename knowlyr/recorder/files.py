"""Log files: which files a walk reads, how they are read (gunzipped, line by line, as
UTF-8 whatever their byte order mark says, with read errors and special files as
rejections), how JSON with ``NaN`` is parsed, how their paths are shown, and which adapter
a file's content belongs to (:func:`detect_format`).

The conversion itself (records through adapters, counts that add up) is
:mod:`knowlyr.recorder.pipeline`.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import io
import json
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
        if isinstance(error, _NotAFile):  # what the path turned out to be
            super().__init__(str(error.strerror))
            return
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


class _NotAFile(OSError):
    """Raised by :func:`_open` for a path that is no regular file when it is opened (a FIFO
    swapped in after the caller's check); its ``strerror`` says what it is."""


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class _GzipFile(gzip.GzipFile):
    """A GzipFile that closes the file it reads (gzip leaves a ``fileobj`` it was given open)."""

    def close(self) -> None:
        raw = self.fileobj
        try:
            super().close()
        finally:
            if raw is not None:
                raw.close()


def _open(path: str | Path) -> IO[bytes]:
    """The file's bytes, gunzipped on the fly for ``*.gz``. Opened without blocking and
    checked to be a regular file, so that a FIFO (swapped in after the caller's check) is an
    error, never a read that waits for a writer forever."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotAFile(errno.EINVAL, _kind(st.st_mode))
        f = os.fdopen(fd, "rb")  # O_NONBLOCK changes nothing for a regular file's reads
    except BaseException:
        os.close(fd)
        raise
    return _GzipFile(fileobj=f, mode="rb") if _is_gz(path) else f


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, as a rejection's reason (for anything but a regular file)."""
    if stat.S_ISDIR(mode):
        return "a directory, not a log file (name the folder itself to walk it)"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a regular file: it is not read, so nothing waits on it"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    if stat.S_ISCHR(mode):
        return "a character device, not a regular file"
    if stat.S_ISBLK(mode):
        return "a block device, not a regular file"
    return "not a regular file"


def _why_not_file(path: str) -> str | None:
    """Why ``path`` is no log file to read, or None when it is a regular file (the usual
    answer, in one ``stat``): missing, a dangling link, a symlink loop, a FIFO, a socket, a
    device, a directory. The reason does not repeat the path (the caller shows it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        try:
            target = os.readlink(path)
        except (OSError, ValueError):
            return "no such file (check the path)"
        return f"a dangling symlink: it points to {target!r}, which does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop (the link leads back to itself, never to a file)"
        if e.errno == errno.ENOTDIR:
            return "no such file (a part of its path is a file, not a folder)"
        if e.errno == errno.EACCES:
            return "permission denied (a folder on its path cannot be searched)"
        return f"cannot be read ({errno.errorcode.get(e.errno or 0, 'OSError')}: {e.strerror})"
    except ValueError:  # an embedded NUL
        return "not a valid file name (it holds a NUL character)"
    return None if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def _is_file(path: str) -> bool:
    """Whether ``path`` is a regular file (following links)."""
    return _why_not_file(path) is None


# -- encodings and non-finite numbers -----------------------------------------------------

# A log written by a Windows or Python tool may start with a byte order mark, or be UTF-16.
# Its text is what counts: it is read as UTF-8 without the mark (its raw blob too, so that
# redaction and every reader see plain text). UTF-32's marks first: FF FE 00 00 starts like
# UTF-16 LE's.
_WIDE = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_BOM_FIRST = frozenset(b"\xef\xff\xfe\x00")  # the first byte of a mark


def _wide(head: bytes) -> str | None:
    """The codec of data starting with a UTF-16 or UTF-32 byte order mark, else None."""
    for bom, codec in _WIDE:
        if head.startswith(bom):
            return codec
    return None


def _utf8(data: bytes) -> bytes:
    """``data`` as UTF-8 without a byte order mark: a UTF-8 mark dropped, UTF-16 / UTF-32
    (with their mark) decoded (a broken code unit becomes U+FFFD). Other data as it is."""
    if not data or data[0] not in _BOM_FIRST:
        return data
    if data.startswith(codecs.BOM_UTF8):
        return data[3:]
    codec = _wide(data[:4])
    if codec is None:
        return data
    return data.decode(codec, "replace").encode("utf-8")


def _loads_nonfinite(data: bytes, error: orjson.JSONDecodeError) -> tuple[Any, int]:
    """``data`` parsed with ``NaN``, ``Infinity`` and ``-Infinity`` (what Python's
    ``json.dump`` writes for non-finite floats; JSON has no such numbers) as null, and how
    many there were. Raises ``error`` (orjson's, for ``data``) when the data is not JSON
    that way either, or holds no such value (it failed for another reason)."""
    if b"NaN" not in data and b"Infinity" not in data:
        raise error
    n = 0

    def null(_name: str) -> None:
        nonlocal n
        n += 1

    try:
        obj = json.loads(data, parse_constant=null)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError: ValueErrors
        raise error from None
    if not n:
        raise error
    return obj, n


def _parse(data: bytes) -> tuple[Any, int]:
    """``data`` parsed as JSON, non-finite numbers as null (and how many, see
    :func:`_loads_nonfinite`); ``orjson.JSONDecodeError`` when it is not JSON."""
    try:
        return orjson.loads(data), 0
    except orjson.JSONDecodeError as e:
        return _loads_nonfinite(data, e)


def _read(path: str | Path) -> bytes:
    """The whole file (gunzipped) as UTF-8 (:func:`_utf8`); :class:`_ReadError` when it
    cannot be read to its end."""
    try:
        with _open(path) as f:
            return _utf8(f.read())
    except _READ_ERRORS as e:
        raise _ReadError(e) from e


def _read_lines(path: str | Path) -> Iterator[bytes]:
    """The file's lines (gunzipped) as UTF-8 (:func:`_utf8`), streamed; :class:`_ReadError`
    where reading breaks off."""
    try:
        with _open(path) as f:
            codec = _wide(f.peek(4)[:4])
            if codec is not None:  # decoded as it is read: lines end at "\n" in any width
                text = io.TextIOWrapper(f, encoding=codec, errors="replace", newline="\n")
                for line in text:
                    yield line.encode("utf-8")
                return
            first = f.readline()
            yield first[3:] if first.startswith(codecs.BOM_UTF8) else first
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
            return _parse(raw)[0]
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
    why = _why_not_file(str(p))
    if why is not None:
        raise RecordError(why, path=str(p))
    if _is_lines(p):
        obj = _first_line_obj(p)
    else:
        data = _read(p)
        try:
            obj = _parse(data)[0]
        except orjson.JSONDecodeError:
            obj = _first_line_obj(p)
    a = _sniff(obj)
    if a is None:
        raise _unknown(str(p), "file", obj)
    return a.name

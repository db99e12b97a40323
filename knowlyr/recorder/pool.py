"""The recorder's process pool: :func:`knowlyr.recorder.iter_records` with ``workers > 1``.

Conversion is CPU-bound Python (JSON parsing, building models), so it scales with processes.
A work unit is a batch of whole files (up to 64, or 4 MB) or a ~1 MB slice of a big JSONL
file, so the pool's per-task cost (futures, queues, waking the parent) is paid once per batch,
not once per log. A worker packs each file's results as soon as it has converted them
(:mod:`knowlyr.recorder.transfer`: plain field dicts, pickled in C) and answers with one
``[(path, bytes), ...]`` list per unit; the parent rebuilds the trajectories without
re-validation and yields them in file order. For :func:`~knowlyr.recorder.iter_encoded` a
worker serialises each trajectory itself and sends its JSON, which the parent passes on as
it is; for :func:`~knowlyr.recorder.write_jsonl` it writes the JSON lines of its unit to a
file of the unit's own and sends only what the caller counts (:class:`Written`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import itertools
import math
import multiprocessing
import os
import pickle
import signal
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from knowlyr._gc import paused
from knowlyr.errors import RecordError
from knowlyr.recorder.base import get_adapter
from knowlyr.recorder.files import _first_line_obj, _is_gz, _is_lines, _sniff, _utf8, _wide
from knowlyr.recorder.jsonl import Written, _lines
from knowlyr.recorder.pipeline import (
    Converted,
    Encoded,
    Rejected,
    _iter_file,
    _iter_lines,
    _Writer,
)
from knowlyr.recorder.transfer import pack_trajectory, unpack_trajectory

__all__ = ["iter_pool", "worth_it"]

_CHUNK_BYTES = 1 << 20  # a slice of a big JSONL file
_BATCH_FILES = 64  # whole files per work unit...
_BATCH_BYTES = 4 << 20  # ... or fewer when they add up to more than this
_MIN_FILES = 200  # below this (and no big JSONL), starting processes costs more than it saves


def worth_it(files: list[str]) -> bool:
    """Whether a pool beats converting ``files`` in this process."""
    return len(files) >= _MIN_FILES or any(_chunkable(p) for p in files)


def _pack(results: Iterable[Converted | Encoded | Written | Rejected]) -> bytes:
    """One file's (or JSONL slice's) results as one pickled blob of plain data: trajectories
    to rebuild, or with a :class:`_Writer` their rows (or, written, what :class:`Written`
    holds)."""
    out: list[tuple] = []
    for r in results:
        if isinstance(r, Rejected):
            out.append((None, r.path, r.line, r.reason, r.raw))
        elif isinstance(r, Encoded):
            out.append((r.row, r.line, r.redactions, r.nulled))
        elif isinstance(r, Written):
            out.append((r.id, r.format, r.path, r.line, r.redactions, r.nulled))
        else:
            out.append((pack_trajectory(r.trajectory), r.raw, r.redactions, r.nulled))
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


def _unpack(blob: bytes, encoded: bool = False, written: bool = False) -> list[Any]:
    if written:
        return [
            Rejected(p[1], p[2], p[3], p[4]) if p[0] is None else Written(*p)
            for p in pickle.loads(blob)
        ]
    if encoded:
        return [
            Rejected(p[1], p[2], p[3], p[4]) if p[0] is None else Encoded(*p)
            for p in pickle.loads(blob)
        ]
    with paused():  # one file's results are rebuilt at once (see knowlyr._gc)
        return [
            Rejected(p[1], p[2], p[3], p[4])
            if p[0] is None
            else Converted(unpack_trajectory(p[0]), p[1], p[2], p[3])
            for p in pickle.loads(blob)
        ]


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> None:
    """End this worker when the process that started the pool dies (even by ``kill -9``).

    An idle worker blocks reading its call queue, and the pipe never closes while a sibling
    worker holds the other end: without this, the workers of a killed ``knowlyr ingest``
    live on for good. Linux delivers SIGKILL on the parent's death (``PR_SET_PDEATHSIG``);
    the pid check after it covers a parent that died before the call. Where prctl is missing,
    a daemon thread polls the parent pid instead.

    The death signal follows the *thread* that forked the worker: with ``fork`` the pool
    starts its workers in the thread of the first ``submit``, i.e. the one iterating
    :func:`iter_pool`, which must outlive the iteration (it does: a generator is driven by
    its consumer).
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent is already gone
        os._exit(1)
    if not armed:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="knowlyr-pool-parent-watch", daemon=True).start()


def _worker_init(parent: int | None = None) -> None:
    """Pool workers: die with ``parent`` (:func:`_die_with_parent`), stop re-scanning what the
    fork inherited, and collect young objects rarely (a work unit makes ~100k short-lived,
    acyclic objects). The collector is switched on even when the parent forked with it paused
    (``store.ingest``, ``convert``): a rejected record's caught exception leaves a reference
    cycle that only it frees."""
    if parent is not None:
        _die_with_parent(parent)
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    gc.enable()


def _work_files(
    args: tuple[list[str], str | None, bool, _Writer | None, str | None],
) -> list[tuple[str, bytes]]:
    """Convert a batch of files; each file's results are packed as soon as they are made, so
    a worker holds one file's objects at a time. With a ``part`` file, the trajectories' JSON
    lines are written there (:func:`~knowlyr.recorder.jsonl._lines`)."""
    paths, fmt, redact, writer, part = args
    if part is None:
        return [(p, _pack(_iter_file(p, fmt, redact, writer))) for p in paths]
    with open(part, "wb", buffering=1 << 20) as out:
        return [(p, _pack(_lines(_iter_file(p, fmt, redact, writer), out))) for p in paths]


def _work_lines(
    args: tuple[str, str, int, int, int, bool, _Writer | None, str | None],
) -> list[tuple[str, bytes]]:
    """Convert a slice of a JSONL file, read here (the parent only sends where it is)."""
    path, fmt, first_line, offset, length, redact, writer, part = args
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    lines = (_utf8(data) if offset == 0 else data).split(b"\n")  # a UTF-8 BOM dropped
    adapter = get_adapter(fmt)
    results = _iter_lines(adapter, path, lines, first_line, redact, writer)
    if part is None:
        return [(path, _pack(results))]
    with open(part, "wb", buffering=1 << 20) as out:
        return [(path, _pack(_lines(results, out)))]


def _chunkable(p: str, size: int | None = None) -> bool:
    """A big plain JSONL file (``size``: its size when a regular file, else None)."""
    if not _is_lines(p) or _is_gz(p):
        return False
    if size is None:
        size = _size(p)
    if size is None or size <= _CHUNK_BYTES:
        return False
    with open(p, "rb") as f:  # UTF-16 / UTF-32 cannot be cut at b"\n": read as a whole
        return _wide(f.read(4)) is None


def _size(p: str) -> int | None:
    """The size of a regular file; None for anything else (missing, a directory...)."""
    try:
        st = os.stat(p)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


Unit = tuple[Callable[[Any], list[tuple[str, bytes]]], tuple]


def _units(
    files: list[str], fmt: str | None, redact: bool, per_batch: int, writer: _Writer | None
) -> Iterator[Unit]:
    """Work units: batches of whole files, and ~1 MB slices of line-per-record JSONL files."""
    batch: list[str] = []
    size = 0
    for p in files:
        n = _size(p)  # one stat per file: the parent's walk is on the pool's critical path
        if _chunkable(p, n):
            try:
                a = get_adapter(fmt) if fmt else _sniff(_first_line_obj(p))
            except RecordError:
                a = None
            if a is not None and not a.session:
                if batch:
                    yield _work_files, (batch, fmt, redact, writer)
                    batch, size = [], 0
                yield from _slices(p, a.name, redact, writer)
                continue
        batch.append(p)
        size += n or 0
        if len(batch) >= per_batch or size >= _BATCH_BYTES:
            yield _work_files, (batch, fmt, redact, writer)
            batch, size = [], 0
    if batch:
        yield _work_files, (batch, fmt, redact, writer)


def _slices(p: str, fmt: str, redact: bool, writer: _Writer | None) -> Iterator[Unit]:
    """~1 MB slices of a JSONL file, cut at line ends: (first line number, offset, length).
    The file is read here only to find the cuts and count lines, block by block."""
    line, start = 1, 0
    with open(p, "rb") as f:
        rest = b""
        while True:
            block = f.read(_CHUNK_BYTES)
            if not block:
                if rest:
                    yield _work_lines, (p, fmt, line, start, len(rest), redact, writer)
                break
            block = rest + block
            cut = block.rfind(b"\n")
            if cut < 0:
                rest = block
                continue
            yield _work_lines, (p, fmt, line, start, cut, redact, writer)
            line += block.count(b"\n", 0, cut) + 1
            start += cut + 1
            rest = block[cut + 1 :]


def _context() -> multiprocessing.context.BaseContext | None:
    """``fork`` wherever it exists, whatever the interpreter's default (Python 3.14 makes it
    ``forkserver`` on Linux): forked workers start in milliseconds with everything imported,
    and never re-import the caller's ``__main__``, which an unguarded script cannot survive."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


def iter_pool(
    files: list[str],
    fmt: str | None,
    redact: bool,
    workers: int,
    progress: Callable[[Path], None] | None,
    *,
    encoded: bool = False,
    put_raw: Callable[..., object] | None = None,
    parts: tuple[str, Callable[[str], None]] | None = None,
) -> Iterator[Converted | Encoded | Written | Rejected]:
    """What :func:`~knowlyr.recorder.iter_records` yields (or, with ``encoded``,
    :func:`~knowlyr.recorder.iter_encoded`), converted by ``workers`` processes. With
    ``parts = (folder, append)``, what :func:`~knowlyr.recorder.write_jsonl` yields: each unit
    writes its JSON lines to a file in ``folder``, given to ``append`` (in order) before the
    unit's records are yielded."""
    writer = _Writer(put_raw) if encoded or parts else None
    # a few units per worker at least, so that no worker waits on a last big batch
    per_batch = max(1, min(_BATCH_FILES, math.ceil(len(files) / (workers * 4))))
    # lazy: big JSONL files are read slice by slice
    units = _units(files, fmt, redact, per_batch, writer)
    with ProcessPoolExecutor(
        max_workers=workers,
        initializer=_worker_init,
        initargs=(os.getpid(),),
        mp_context=_context(),
    ) as pool:
        pending: deque[tuple[Any, str | None]] = deque()
        numbers = itertools.count()

        def submit_next() -> bool:
            nxt = next(units, None)
            if nxt is None:
                return False
            fn, args = nxt
            part = None if parts is None else os.path.join(parts[0], f"{next(numbers)}.jsonl")
            pending.append((pool.submit(fn, (*args, part)), part))
            return True

        more = True
        while more and len(pending) < workers * 2:
            more = submit_next()
        last: str | None = None
        while pending:
            future, part = pending.popleft()
            groups = future.result()
            if more:
                more = submit_next()
            if part is not None:
                parts[1](part)
            for p, blob in groups:
                if progress is not None and last is not None and p != last:
                    progress(Path(last))  # a file's groups are consecutive: it is done
                last = p
                yield from _unpack(blob, encoded, parts is not None)
        if progress is not None and last is not None:
            progress(Path(last))

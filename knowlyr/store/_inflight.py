"""Journals of blobs written ahead of the rows that will reference them.

An ingest stores each record's raw bytes as a blob where the record is converted (in the
recorder's worker processes), before the rows that name those blobs are committed. A run that
dies before its commit (``kill -9``, an exception) leaves blobs that nothing references. So
such a run keeps a journal, ``<root>/_inflight/<id>.blobs``: every digest is appended to it
*before* its blob is written, and the run holds an ``fcntl.flock`` on the journal for as long
as it lives (the kernel drops the lock when the process and the workers it forked are gone).
A finished run deletes its journal.

The same journal names the Parquet files the run writes into a table's folder ahead of their
Delta commit (``file:<path>`` lines, written by :mod:`knowlyr.store._append` before it
creates each file, for the journal of the current context, see :func:`note_table_file`): a
run killed between the two leaves files no version names, which gc deletes the same way.
A journal may be named after its run (``<run_id>.blobs``), so gc can tell which run died.

:meth:`Store.gc <knowlyr.store.Store.gc>` reads the journals: one whose lock it can take
belongs to a run that is no longer in flight, and its unreferenced blobs are reclaimed at
once, whatever their age; the blobs named in live journals are never touched. Local stores
only (object stores have no such lock; there ``min_age_s`` alone protects young blobs).
"""

from __future__ import annotations

import contextvars
import fcntl
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from knowlyr.store.blobs import BlobStore, check_hash, sha256_hex

__all__ = [
    "BlobJournal",
    "JournaledPut",
    "Journals",
    "current_file_note",
    "note_table_file",
    "scan_journals",
]

_SUFFIX = ".blobs"
_FILE = b"file:"  # a journal line naming a table file (the other lines are blob digests)
_APPEND: dict[str, int] = {}  # journal path -> O_APPEND fd, per process (workers open their own)
#: the journal of the run in this context: the table files it writes are named there
_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "knowlyr_inflight_journal", default=None
)


def _append_line(journal: str, line: bytes) -> None:
    fd = _APPEND.get(journal)
    if fd is None:
        fd = _APPEND[journal] = os.open(journal, os.O_WRONLY | os.O_APPEND)
    os.write(fd, line)  # one write < PIPE_BUF: lines never interleave


def current_file_note() -> Callable[[str], None] | None:
    """What names a table file in the journal of the run in this context (None outside a
    run): called by a writer before it creates the file. Take it in the run's thread and
    hand it to a writer thread (a thread does not inherit the context)."""
    journal = _CURRENT.get()
    if journal is None:
        return None
    return lambda path: _append_line(journal, _FILE + os.fsencode(os.path.abspath(path)) + b"\n")


def note_table_file(path: str) -> None:
    """Name the table file ``path`` in the current run's journal, if there is one."""
    note = current_file_note()
    if note is not None:
        note(path)


@dataclass(frozen=True)
class JournaledPut:
    """``put(data, digest=...)`` that names the digest in a journal before writing the blob.

    Picklable (a blob store and a path), so the recorder's worker processes get it as their
    ``put_raw`` and journal the blobs they write themselves.
    """

    blobs: BlobStore
    journal: str

    def __call__(self, data: bytes, *, digest: str | None = None) -> str:
        digest = sha256_hex(data) if digest is None else check_hash(digest)
        _append_line(self.journal, digest.encode() + b"\n")
        return self.blobs.put(data, digest=digest)


@dataclass
class BlobJournal:
    """The journal of one run (a context manager): ``put`` journals then writes a blob.

    Leaving the block normally deletes the journal (the run's rows are committed); leaving it
    by an exception only releases the lock, so ``store gc`` reclaims what the run wrote.
    Without a ``directory`` (object stores) it journals nothing and ``put`` is the blob store's.
    Inside the block, the table files this context writes ahead of their commit are named in
    the journal too (:func:`current_file_note`). ``run_id`` names the journal after its run.

    Example:
        >>> with BlobJournal(store.blobs, f"{store.root}/_inflight") as j:  # doctest: +SKIP
        ...     h = j.put(b"raw log")
        ...     store.append("rejected", [{"raw_blob": h, "reason": "..."}])
    """

    blobs: BlobStore
    directory: str | None
    run_id: str | None = None
    path: str | None = field(default=None, init=False)
    _fd: int | None = field(default=None, init=False, repr=False)
    _token: contextvars.Token | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> BlobJournal:
        if self.directory is None:
            return self
        os.makedirs(self.directory, exist_ok=True)
        # created under a temporary name and locked before it gets its real one, so that gc
        # never sees an unlocked journal of a live run
        tmp = os.path.join(self.directory, f".tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        name = self.run_id if self.run_id and self.run_id.isalnum() else uuid.uuid4().hex
        self.path = os.path.join(self.directory, f"{name}{_SUFFIX}")
        if os.path.exists(self.path):  # a run id used twice: never take another's journal
            self.path = os.path.join(self.directory, f"{uuid.uuid4().hex}{_SUFFIX}")
        os.replace(tmp, self.path)
        self._fd = fd
        self._token = _CURRENT.set(self.path)
        return self

    @property
    def put(self) -> Callable[..., str]:
        """What writes a blob: journaled when there is a journal."""
        if self.path is None:
            return self.blobs.put
        return JournaledPut(self.blobs, self.path)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.path is None or self._fd is None:
            return
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        append = _APPEND.pop(self.path, None)
        if append is not None:
            os.close(append)
        if exc_type is None:
            os.unlink(self.path)  # before the lock goes: gc never reads a finished journal
        os.close(self._fd)  # releases the lock (once forked workers that share it are gone)
        self._fd = None


@dataclass
class Journals:
    """What :func:`scan_journals` found: blobs and table files of live runs, and of runs
    that are gone (with the runs' ids where their journals are named after them)."""

    live: set[str] = field(default_factory=set)
    dead: set[str] = field(default_factory=set)
    dead_files: list[str] = field(default_factory=list)
    live_tables: set[str] = field(default_factory=set)  # absolute paths of table files
    dead_tables: set[str] = field(default_factory=set)
    dead_runs: list[str] = field(default_factory=list)


def _read_journal(fd: int, blobs: set[str], files: set[str]) -> None:
    """The digests (to ``blobs``) and table files (to ``files``) a journal names."""
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        for line in f:
            if line.startswith(_FILE):
                files.add(os.fsdecode(line[len(_FILE) :].rstrip(b"\n")))
                continue
            h = line.strip().decode("ascii", "replace")
            if len(h) == 64:
                blobs.add(h)


def scan_journals(directory: str, *, tmp_grace_s: float = 60.0) -> Journals:
    """Read every journal under ``directory``: a locked one is a live run's, an unlocked one a
    dead run's (its file is listed in ``dead_files`` for the caller to delete once it has
    reclaimed the blobs). A temporary journal younger than ``tmp_grace_s`` is left alone: its
    run may not have locked it yet."""
    out = Journals()
    if not os.path.isdir(directory):
        return out
    now = time.time()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        journal = name.endswith(_SUFFIX)
        try:
            if not journal and now - os.path.getmtime(path) < tmp_grace_s:
                continue
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # finished meanwhile
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if journal:
                    _read_journal(fd, out.live, out.live_tables)
                continue
            if journal:
                _read_journal(fd, out.dead, out.dead_tables)
                out.dead_runs.append(name.removesuffix(_SUFFIX))
            out.dead_files.append(path)
        finally:
            os.close(fd)
    return out

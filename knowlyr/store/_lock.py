"""Serialising writers of one table.

Local stores take an exclusive ``fcntl.flock`` on ``<root>/_locks/<table>.lock`` around the
read-dedup-append of a write. The kernel releases it when the holder dies (even by SIGKILL),
so a crashed writer never wedges the store, and two processes adding overlapping rows cannot
both decide that the same key is new. Readers never take it: Delta snapshots are immutable.

Object stores have no such lock; there the store falls back to Delta's optimistic
concurrency (a MERGE on the key, retried on commit conflicts), see ``Store._commit``.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_THREAD_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def _thread_lock(path: str) -> threading.Lock:
    with _GUARD:
        return _THREAD_LOCKS.setdefault(path, threading.Lock())


@contextmanager
def table_lock(lock_dir: str | None, table: str) -> Iterator[None]:
    """Hold the writer lock of ``table`` (a no-op when ``lock_dir`` is None: remote stores)."""
    if lock_dir is None:
        yield
        return
    os.makedirs(lock_dir, exist_ok=True)
    path = os.path.join(lock_dir, f"{table}.lock")
    with _thread_lock(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

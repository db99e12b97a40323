"""Helpers shared by the sandbox backends: bounded output capture and workspace paths."""

from __future__ import annotations

import posixpath
import sys
from collections import deque

from knowlyr.errors import WorkspacePathError
from knowlyr.sandbox.base import ExecResult

__all__ = ["MAX_COMMAND_BYTES", "OutputCapture", "too_long", "truncate_text", "workspace_relpath"]

MAX_COMMAND_BYTES = 100_000  # one argv string may not exceed 128 KiB (MAX_ARG_STRLEN)


def too_long(cmd: str) -> ExecResult:
    msg = f"command is {len(cmd.encode())} bytes long (limit {MAX_COMMAND_BYTES}): write it to a file and run that\n"
    return ExecResult(126, "", msg)


def truncate_text(text: str, limit: int, *, omitted_extra: int = 0) -> tuple[str, bool]:
    """Keep the head and the tail of ``text`` within ``limit`` characters, with a marker.

    The tail is kept because that is where test summaries and tracebacks end.
    ``omitted_extra`` counts characters already dropped before ``text`` was assembled.
    """
    if len(text) <= limit and not omitted_extra:
        return text, False
    head = limit // 2
    tail = limit - head
    omitted = max(len(text) - limit, 0) + omitted_extra
    if len(text) <= limit:
        head, tail = len(text) // 2, len(text) - len(text) // 2
    marker = f"\n[... {omitted} characters truncated ...]\n"
    return f"{text[:head]}{marker}{text[len(text) - tail :] if tail else ''}", True


class OutputCapture:
    """Collects a byte stream, keeping at most ``limit`` bytes of head and of tail."""

    __slots__ = ("_head", "_limit", "_tail", "_tail_len", "total")

    def __init__(self, max_chars: int):
        # 4 bytes per character covers any UTF-8 text of max_chars characters; 0 keeps everything.
        self._limit = max(4 * max_chars, 4096) if max_chars else sys.maxsize
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail.append(data)
        self._tail_len += len(data)
        while self._tail and self._tail_len - len(self._tail[0]) >= self._limit:
            self._tail_len -= len(self._tail.popleft())

    def data(self) -> bytes:
        """Every byte fed (only complete when nothing was dropped, e.g. with ``max_chars=0``)."""
        return bytes(self._head) + b"".join(self._tail)

    def text(self, max_chars: int) -> tuple[str, bool]:
        """The decoded text, truncated to ``max_chars`` with a marker when longer."""
        tail = b"".join(self._tail)
        if len(tail) > self._limit:
            tail = tail[-self._limit :]
        dropped = self.total - len(self._head) - len(tail)
        if dropped:  # head and tail each hold >= max_chars characters: the cut falls between them
            text = self._head.decode("utf-8", "replace") + tail.decode("utf-8", "replace")
            return truncate_text(text, max_chars, omitted_extra=dropped)
        return truncate_text((bytes(self._head) + tail).decode("utf-8", "replace"), max_chars)


def workspace_relpath(path: str, workdir: str) -> str:
    """``path`` as a normalised path relative to the workspace root ('' for the root itself).

    Accepts a relative path or an absolute one under ``workdir``. ``..`` may not leave the
    workspace. Symlinks are checked by the backend against the real file system.

    Raises:
        WorkspacePathError: the path is empty, contains a NUL byte or points outside.
    """
    if not isinstance(path, str) or not path:
        raise WorkspacePathError(f"path must be a non-empty string, got {path!r}")
    if "\x00" in path:
        raise WorkspacePathError(f"path {path!r} contains a NUL byte")
    wd = posixpath.normpath(workdir)
    if path.startswith("/"):
        norm = posixpath.normpath(path)
        if norm != wd and not norm.startswith(wd.rstrip("/") + "/"):
            raise WorkspacePathError(f"path {path!r} is outside the workspace {wd}")
        rel = posixpath.relpath(norm, wd)
    else:
        rel = posixpath.normpath(path)
    if rel == ".":
        return ""
    if rel == ".." or rel.startswith("../"):
        raise WorkspacePathError(f"path {path!r} is outside the workspace {wd}")
    return rel

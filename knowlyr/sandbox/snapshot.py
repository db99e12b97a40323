"""Workspace snapshots on the host file system, restored incrementally.

A snapshot copies the workspace into a private store (owned by the host user, invisible to
the sandbox) and records every entry's ``lstat``. :meth:`restore` walks the workspace and
only touches what changed: an entry whose (inode, size, mode, owner, mtime, ctime) differs
from the record, or that is new or missing, is deleted or copied back. ``ctime`` cannot be
set by a sandboxed process, so a changed file cannot pass for unchanged; an entry whose
recorded ctime is within :data:`RACY_NS` of the moment it was recorded is always copied back
(the same "racily clean" rule git applies to its index, because kernel timestamps are coarse).

Restoring an episode that touched a handful of files in a 1,000-file workspace costs one
directory walk (a few ms); restoring everything costs a full copy.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkspaceSnapshots"]

RACY_NS = 25_000_000  # coarse kernel clock tick (<= 10 ms at HZ=100) with a margin


@dataclass(slots=True)
class _Entry:
    kind: int  # stat.S_IFMT
    mode: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    uid: int
    gid: int
    link: str | None
    racy: bool


def _key(st: os.stat_result) -> tuple[int, int, int, int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ctime_ns)


class WorkspaceSnapshots:
    """Snapshots of one workspace directory.

    Args:
        workspace: the directory the sandbox sees as its workspace.
        store: a private directory to keep snapshot copies in.
        owner: ``(uid, gid)`` restored files get (the sandbox user), or ``None`` to keep.
    """

    def __init__(self, workspace: Path, store: Path, *, owner: tuple[int, int] | None = None):
        self.workspace = workspace
        self.store = store
        self.owner = owner
        self._manifests: dict[str, dict[str, _Entry]] = {}
        self._roots: dict[
            str, tuple[int, int, int]
        ] = {}  # the workspace directory's own mode/owner
        self._count = 0

    def _scan(self) -> dict[str, _Entry]:
        now = time.time_ns()
        entries: dict[str, _Entry] = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(self.workspace / rel if rel else self.workspace) as it:
                for de in it:
                    p = f"{rel}/{de.name}" if rel else de.name
                    st = de.stat(follow_symlinks=False)
                    kind = stat.S_IFMT(st.st_mode)
                    link = os.readlink(de.path) if kind == stat.S_IFLNK else None
                    entries[p] = _Entry(
                        kind, st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                        st.st_uid, st.st_gid, link, st.st_ctime_ns >= now - RACY_NS,
                    )  # fmt: skip
                    if kind == stat.S_IFDIR:
                        stack.append(p)
        return entries

    def snapshot(self) -> str:
        """Copy the workspace into the store; returns the snapshot id."""
        self._count += 1
        sid = f"snap-{self._count}"
        entries = self._scan()
        newest = max((e.ctime_ns for e in entries.values()), default=0)
        wait = (newest + RACY_NS - time.time_ns()) / 1e9
        if 0 < wait <= RACY_NS / 1e9:  # just-written files: record them once their tick has passed
            time.sleep(wait)
            entries = self._scan()
        dest = self.store / sid
        dest.mkdir(parents=True)
        for rel, e in sorted(entries.items()):
            src, dst = self.workspace / rel, dest / rel
            if e.kind == stat.S_IFDIR:
                dst.mkdir()
            elif e.kind == stat.S_IFLNK:
                os.symlink(e.link, dst)
            elif e.kind == stat.S_IFREG:
                shutil.copyfile(src, dst, follow_symlinks=False)
            # sockets, fifos and devices are not kept
        root = os.stat(self.workspace)
        self._roots[sid] = (stat.S_IMODE(root.st_mode), root.st_uid, root.st_gid)
        self._manifests[sid] = {
            k: v for k, v in entries.items() if v.kind in (stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK)
        }
        return sid

    def __contains__(self, sid: object) -> bool:
        return sid in self._manifests

    def restore(self, sid: str) -> int:
        """Make the workspace equal to snapshot ``sid``; returns the number of entries fixed."""
        manifest = self._manifests[sid]
        src_root = self.store / sid
        missing: set[str] = set(manifest)
        fixed = 0
        mode, uid, gid = self._roots[sid]
        root = os.stat(self.workspace)
        if (stat.S_IMODE(root.st_mode), root.st_uid, root.st_gid) != (mode, uid, gid):
            os.chown(self.workspace, uid, gid)
            os.chmod(self.workspace, mode)  # e.g. after `chmod 000 .` in the sandbox
            fixed += 1
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(self.workspace / rel if rel else self.workspace) as it:
                for de in it:
                    p = f"{rel}/{de.name}" if rel else de.name
                    e = manifest.get(p)
                    st = de.stat(follow_symlinks=False)
                    kind = stat.S_IFMT(st.st_mode)
                    if e is not None and kind == e.kind:
                        if kind == stat.S_IFDIR:
                            missing.discard(p)
                            if st.st_mode != e.mode or (st.st_uid, st.st_gid) != (e.uid, e.gid):
                                os.chown(de.path, e.uid, e.gid)
                                os.chmod(de.path, stat.S_IMODE(e.mode))
                                fixed += 1
                            stack.append(p)
                            continue
                        if not e.racy and _key(st) == (
                            e.ino,
                            e.size,
                            e.mode,
                            e.uid,
                            e.gid,
                            e.mtime_ns,
                            e.ctime_ns,
                        ):
                            missing.discard(p)
                            continue
                    if kind == stat.S_IFDIR:
                        shutil.rmtree(de.path)
                    else:
                        os.unlink(de.path)
                    fixed += 1
        for p in sorted(missing):  # parents sort before their children
            e = manifest[p]
            dst = self.workspace / p
            if e.kind == stat.S_IFDIR:
                dst.mkdir()
            elif e.kind == stat.S_IFLNK:
                os.symlink(e.link, dst)
            else:
                shutil.copyfile(src_root / p, dst, follow_symlinks=False)
            os.chown(dst, e.uid, e.gid, follow_symlinks=False)
            if e.kind != stat.S_IFLNK:
                os.chmod(dst, stat.S_IMODE(e.mode))
                os.utime(dst, ns=(e.mtime_ns, e.mtime_ns))
            st = os.lstat(dst)
            e.ino, e.ctime_ns, e.mode = st.st_ino, st.st_ctime_ns, st.st_mode
            e.racy = e.kind != stat.S_IFDIR  # just written: copy again next time (see RACY_NS)
            fixed += 1
        return fixed

    def drop(self, sid: str) -> None:
        """Forget a snapshot and delete its copy."""
        self._manifests.pop(sid, None)
        self._roots.pop(sid, None)
        shutil.rmtree(self.store / sid, ignore_errors=True)

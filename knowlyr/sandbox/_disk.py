"""A sandbox's disk quota: a sparse ext4 image of ``disk_mb``, loop-mounted on the host.

Both backends keep a sandbox's writable directories (the workspace and ``/tmp``; in a
container also ``/var/tmp``) on this file system, so whatever a command writes lands on a
file system of the quota's size: a write past it fails with ``ENOSPC`` (the command sees
"No space left on device") and the host disk receives at most the image's size (the image
is sparse: only written blocks take space). Mounting needs root, ``mkfs.ext4`` and loop
devices; :func:`disk_available` says when one is missing.

Standard library only: the owner-death guard (:mod:`knowlyr.sandbox._guard`) runs it as a
plain script.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["QuotaDisk", "disk_available", "quota_message", "unmount"]

IMAGE = "disk.img"
MOUNT = "disk"
_MNT_DETACH = 2

_libc = None


def disk_available() -> str | None:
    """``None`` when a disk quota can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "mounting a quota file system needs root"
    for tool in ("mkfs.ext4", "mount"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (apt-get install -y e2fsprogs mount)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control is missing)"
    return None


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def unmount(path: str | os.PathLike[str]) -> bool:
    """Detach the file system mounted at ``path`` (lazily: busy files keep it until closed;
    the loop device frees itself then). False when nothing was mounted there."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.umount2(os.fsencode(os.fspath(path)), _MNT_DETACH) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOENT):  # not a mount point, or gone
        return False
    raise OSError(err, f"umount {path}: {os.strerror(err)}")


class QuotaDisk:
    """An ext4 file system of ``size_mb`` at ``parent/disk``, backed by ``parent/disk.img``.

    Raises:
        OSError: the image could not be made or mounted (the message says which step).
    """

    def __init__(self, parent: Path, size_mb: int):
        self.size_mb = size_mb
        self.image = parent / IMAGE
        self.path = parent / MOUNT
        self.path.mkdir(mode=0o755)
        with open(self.image, "wb") as f:
            f.truncate(size_mb * 1024 * 1024)  # the host disk never holds more
        os.chmod(self.image, 0o600)
        # No journal (a scratch file system), no reserved blocks, lazily initialised tables:
        # ~20 ms and well under 1 MB of the host disk for a fresh 1 GB image.
        self._run(
            [_tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-i", "8192", "-O", "^has_journal",
             "-E", "nodiscard,lazy_itable_init=1", str(self.image)],
            "mkfs.ext4",
        )  # fmt: skip
        self._run(
            [_tool("mount"), "-o", "loop,nosuid,nodev,noatime", str(self.image), str(self.path)],
            "mount",
        )
        self.mounted = True
        lost = self.path / "lost+found"
        if lost.is_dir():
            lost.rmdir()

    @staticmethod
    def _run(argv: list[str], what: str) -> None:
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise OSError(f"{what} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")

    def full(self) -> bool:
        """Whether (almost) no space or no inodes are left."""
        try:
            st = os.statvfs(self.path)
        except OSError:
            return False
        free = st.f_bavail * st.f_frsize
        # a failed write leaves less than one write's worth (dd bs=1M: up to 1 MiB) behind
        return free < max(2 << 20, self.size_mb * 1024 * 1024 // 50) or st.f_favail == 0

    def close(self) -> None:
        """Unmount the file system and delete the image. Idempotent."""
        if self.mounted:
            self.mounted = False
            with contextlib.suppress(OSError):
                unmount(self.path)
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        with contextlib.suppress(OSError):
            self.path.rmdir()


def quota_message(size_mb: int, where: str) -> str:
    """What a command's result says when the quota is full."""
    return (
        f"[the sandbox's disk quota of {size_mb} MB ({where}) is full: delete files, or raise "
        f"SandboxConfig(disk_mb=...)]\n"
    )

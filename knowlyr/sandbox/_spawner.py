"""A small per-sandbox process that starts the sandbox's commands.

Why not ``subprocess.Popen`` from the caller: the spawner joins the sandbox's cgroup once
(a cgroup migration costs an RCU grace period, milliseconds on a busy machine, for every
process moved), is single-threaded (so setting rlimits and dropping to the sandbox uid
between ``fork`` and ``exec`` is safe, which it is not in a multi-threaded caller), and is
small (forking a training process that holds gigabytes costs more than forking this).

Protocol over a SOCK_SEQPACKET socket pair: the caller sends ``{"argv": [...]}`` with the
command's stdin, stdout and stderr as SCM_RIGHTS file descriptors; the spawner answers
``{"pid": N}`` (or ``{"error": ...}``), then ``{"status": S}`` (the raw wait status) when the
process exits. When the caller goes away (the socket closes) the spawner kills the running
command, if any, and exits.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from knowlyr.errors import SandboxError

__all__ = ["Spawner"]

_CODE = r"""
import json, os, resource, select, signal, socket, sys
cfg = json.loads(sys.argv[1])
sock = socket.socket(fileno=int(sys.argv[2]))
env = {"PATH": "/usr/bin:/bin"}
while True:
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
    except OSError:
        break
    if not msg:
        break
    argv = json.loads(msg)["argv"]
    try:
        pid = os.fork()
    except OSError as e:
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"error": "fork failed: %s" % e}).encode())
        continue
    if pid == 0:
        try:
            os.setsid()
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
            sock.close()
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            for i, path in enumerate(cfg["files"], 3):  # e.g. bubblewrap's --seccomp 3
                fd = os.open(path, os.O_RDONLY)
                if fd != i:
                    os.dup2(fd, i)
                    os.close(fd)
                else:
                    os.set_inheritable(fd, True)
            for res, value in cfg["limits"]:
                resource.setrlimit(res, (value, value))
            if cfg["uid"] is not None:
                os.setgroups([])
                os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
                os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
            os.execve(argv[0], argv, env)
        except BaseException as e:
            try:
                os.write(2, ("knowlyr sandbox spawner: %s\n" % e).encode())
            finally:
                os._exit(126)
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps({"pid": pid}).encode())
    pidfd = os.pidfd_open(pid)
    while True:  # wait for the command, or for the caller to go away (EOF on the socket)
        ready, _, _ = select.select([sock, pidfd], [], [])
        if pidfd in ready:
            break
        if not sock.recv(1, socket.MSG_PEEK):
            os.kill(pid, signal.SIGKILL)  # bubblewrap's --die-with-parent takes the sandbox down
            os.waitpid(pid, 0)
            os._exit(0)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    sock.send(json.dumps({"status": status}).encode())
"""


def _python() -> str:
    """The system Python (small and quick to start) or, failing that, this one."""
    for candidate in ("/usr/bin/python3", shutil.which("python3"), sys.executable):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


class Spawner:
    """Caller side of the spawner: :meth:`spawn` a command, then read its exit status.

    Args:
        uid, gid: the user commands run as (``None`` keeps the caller's).
        limits: ``[(resource.RLIMIT_*, value), ...]`` set (soft = hard) on every command.
        cgroup_procs: ``cgroup.procs`` files the spawner joins once, before any command.
        files: files every command gets open (read-only) as fds 3, 4, ..., opened before
            the uid drop.
    """

    def __init__(
        self,
        *,
        uid: int | None,
        gid: int | None,
        limits: list[tuple[int, int]],
        cgroup_procs: list[Path],
        files: Sequence[Path] = (),
    ):
        self._cfg = json.dumps(
            {"uid": uid, "gid": gid, "limits": limits, "files": [str(f) for f in files]}
        )
        self._cgroup_procs = cgroup_procs
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        try:
            self._proc = subprocess.Popen(
                [_python(), "-I", "-S", "-c", _CODE, self._cfg, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._sock = ours
        for procs in self._cgroup_procs:  # before any command exists: nothing can escape
            try:
                procs.write_text(str(self._proc.pid))
            except OSError as e:
                self.close()
                raise SandboxError(f"could not join the sandbox cgroup {procs.parent}: {e}") from e

    def spawn(self, argv: list[str], fds: tuple[int, int, int]) -> int:
        """Start ``argv`` with ``fds`` as its stdin/stdout/stderr; returns its pid."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        assert self._sock is not None
        try:
            socket.send_fds(self._sock, [json.dumps({"argv": argv}).encode()], list(fds))
            reply = json.loads(self._sock.recv(65536) or b'{"error": "the spawner exited"}')
        except (OSError, ValueError) as e:
            self.close()
            raise SandboxError(f"the sandbox spawner failed: {e}") from e
        if "pid" not in reply:
            raise SandboxError(f"could not start the sandbox command: {reply.get('error')}")
        return int(reply["pid"])

    def fileno(self) -> int:
        """The socket; readable when the running command's exit status has arrived."""
        assert self._sock is not None
        return self._sock.fileno()

    def read_status(self) -> int:
        """The raw wait status of the command started last (call when :meth:`fileno` is readable)."""
        assert self._sock is not None
        data = self._sock.recv(65536)
        if not data:
            self.close()
            raise SandboxError("the sandbox spawner exited while a command was running")
        return int(json.loads(data)["status"])

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None

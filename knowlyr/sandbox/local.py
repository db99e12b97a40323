"""The local backend: one bubblewrap namespace sandbox per command, as an unprivileged uid.

Each :meth:`LocalSandbox.exec` runs ``bash -lc CMD`` inside a fresh ``bwrap`` with every
namespace unshared (no network: not even the host's loopback), a read-only root and system
directories, the workspace and a private ``/tmp`` bound read-write, a minimal ``/etc`` and a
cleared environment. Commands are started by a small per-sandbox spawner process
(:mod:`knowlyr.sandbox._spawner`) that, when the host process is root, drops to a uid of the
sandbox's own first (bubblewrap run as root keeps its capabilities). Limits:

* rlimits on the whole tree (set by the spawner before the uid drop): CPU seconds, address
  space, processes, file size, no core dumps;
* a per-sandbox cgroup where the machine allows (v1: memory; v2: memory and pids), skipped
  with a logged reason otherwise; each sandbox has its own uid, so RLIMIT_NPROC caps the
  processes of that sandbox alone;
* a wall-clock timeout: the command runs as pid 1's child in its own PID namespace, so
  killing that pid 1 kills every process it started, ``setsid`` grandchildren included, and
  the output pipes close. Nothing a command starts outlives it;
* a seccomp filter built with libseccomp (:mod:`knowlyr.sandbox.seccomp`), comparable to a
  container engine's default profile: no nested user namespaces, mounts, keyring, ptrace,
  ``bpf``, ``perf_event_open``, ``kexec``... (``SandboxConfig(seccomp=False)`` turns it off).

A sandbox's directory holds a lock its owner keeps until :meth:`LocalSandbox.close`. When the
owner dies without closing it (``kill -9``), the sandbox's guard process
(:mod:`knowlyr.sandbox._guard`) removes the directory, its cgroups and its disk quota within
moments; should the guard be gone too, the next sandbox start or ``knowlyr sandbox gc`` finds
the lock free and does it (:func:`reap_local`).

The workspace and ``/tmp`` live on a disk quota of ``config.disk_mb`` (a loop-mounted ext4
image: :mod:`knowlyr.sandbox._disk`; where it cannot be mounted, e.g. not as root, on the host
disk, with a logged reason); a command that fills it fails with ``ENOSPC`` and its result
says so. ``read_file``/``write_file`` are plain file operations on the host that refuse paths
leaving the workspace, symlinks included; snapshots are incremental copies
(:mod:`knowlyr.sandbox.snapshot`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import resource
import selectors
import shutil
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

from knowlyr.errors import BackendUnavailableError, SandboxError, WorkspacePathError
from knowlyr.sandbox._disk import QuotaDisk, disk_available, quota_message
from knowlyr.sandbox._guard import (
    CGROUPS,
    LOCK,
    kill_cgroup,
    reap_dir,
    remove_cgroup,
    start_guard,
    stop_guard,
)
from knowlyr.sandbox._spawner import Spawner
from knowlyr.sandbox._util import MAX_COMMAND_BYTES, OutputCapture, too_long, workspace_relpath
from knowlyr.sandbox.base import ExecResult, Sandbox, SandboxConfig, past_deadline
from knowlyr.sandbox.snapshot import WorkspaceSnapshots

__all__ = ["LocalSandbox", "local_available", "reap_local"]

log = logging.getLogger("knowlyr.sandbox")

INSTALL_HINT = (
    "install bubblewrap: apt-get install -y bubblewrap util-linux (or run scripts/setup-system.sh)"
)
UID_BASE = int(os.environ.get("KNOWLYR_SANDBOX_UID_BASE", "200000"))
UID_RANGE = 100_000
_uid_counter = itertools.count()
_cgroup_note_logged = False
_PREFIX = "knowlyr-sb-"
_LOCK = LOCK  # flock'ed by the owning process until close(): see reap_local
_CGROUPS = CGROUPS  # the sandbox's cgroup directories, one a line
_disk_note_logged = False
_LEGACY_AGE_S = 3600  # a sandbox directory without a lock (older knowlyr) is reaped after this
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
# A minimal /etc, copied per sandbox and bound as one directory (one bind is cheaper than many).
_ETC_COPY = (
    "ld.so.cache",
    "ld.so.conf",
    "localtime",
    "nsswitch.conf",
    "inputrc",
    "gitconfig",
    "alternatives",
    "python3",
    "python3.11",
)
_PROFILE = f"""# knowlyr sandbox
export PATH={PATH}
umask 022
"""


def local_available(*, seccomp: bool = True) -> str | None:
    """``None`` when the local backend (with its seccomp filter, unless ``seccomp=False``)
    can run here, else the reason and the fix."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
    if seccomp:
        from knowlyr.sandbox.seccomp import seccomp_available

        return seccomp_available()
    return None


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 ``controller`` ('' key means the v2 hierarchy)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return path
    return None


class _Cgroup:
    """A per-sandbox cgroup (v1: memory; v2: memory + pids), or nothing with a logged reason."""

    def __init__(self, name: str, memory_bytes: int, max_pids: int):
        self.dirs: list[Path] = []
        self.procs: list[Path] = []
        reason = (
            self._setup_v1(name, memory_bytes, max_pids)
            if os.geteuid() == 0
            else "not running as root"
        )
        if reason:
            self.close()
            reason2 = self._setup_v2(name, memory_bytes, max_pids) if os.geteuid() == 0 else reason
            if reason2:
                self.close()
                global _cgroup_note_logged
                if not _cgroup_note_logged:
                    log.info(
                        "sandbox cgroup limits skipped (rlimits still apply): v1: %s; v2: %s",
                        reason,
                        reason2,
                    )
                    _cgroup_note_logged = True

    def _make(self, base: Path, name: str, files: dict[str, str]) -> str | None:
        d = base / name
        try:
            d.mkdir(exist_ok=True)
            self.dirs.append(d)
            for fname, value in files.items():
                (d / fname).write_text(value)
        except OSError as e:
            return f"{d}: {e.strerror or e}"
        self.procs.append(d / "cgroup.procs")
        return None

    def _setup_v1(self, name: str, memory_bytes: int, max_pids: int) -> str | None:
        # Memory only: every v1 hierarchy joined costs a cgroup migration (an RCU grace period,
        # milliseconds on a busy machine) per command, and the process count is already capped
        # per sandbox by RLIMIT_NPROC on the sandbox's own uid.
        own = _own_cgroup("memory")
        base = Path("/sys/fs/cgroup/memory") / (own or "/").lstrip("/")
        if own is None or not (base / "cgroup.procs").exists():
            return "no v1 memory controller mounted"
        return self._make(base, name, {"memory.limit_in_bytes": str(memory_bytes)})

    def _setup_v2(self, name: str, memory_bytes: int, max_pids: int) -> str | None:
        own = _own_cgroup("")
        root = Path("/sys/fs/cgroup")
        if own is None or not (root / "cgroup.controllers").exists():
            return "no v2 hierarchy at /sys/fs/cgroup"
        base = root / own.lstrip("/")
        enabled = (
            (base / "cgroup.subtree_control").read_text().split()
            if (base / "cgroup.subtree_control").exists()
            else []
        )
        if not {"memory", "pids"} <= set(enabled):
            return f"memory/pids controllers not delegated to {base} (subtree_control: {' '.join(enabled) or 'none'})"
        return self._make(base, name, {"memory.max": str(memory_bytes), "pids.max": str(max_pids)})

    def kill(self) -> None:
        for procs in self.procs:
            _kill_cgroup(procs.parent)

    def close(self) -> None:
        self.kill()
        for d in reversed(self.dirs):
            _remove_cgroup(d)
        self.dirs.clear()
        self.procs.clear()


_kill_cgroup = kill_cgroup
_remove_cgroup = remove_cgroup


def _cgroup_bases() -> list[Path]:
    """Where this process makes sandbox cgroups (v1 memory, v2): a dead sandbox's are there
    too when it was made from the same cgroup."""
    bases = []
    own = _own_cgroup("memory")
    if own is not None:
        bases.append(Path("/sys/fs/cgroup/memory") / own.lstrip("/"))
    own = _own_cgroup("")
    if own is not None:
        bases.append(Path("/sys/fs/cgroup") / own.lstrip("/"))
    return bases


def _sandbox_base(root: str | os.PathLike[str] | None) -> Path:
    return Path(root or os.environ.get("KNOWLYR_SANDBOX_ROOT") or tempfile.gettempdir())


def reap_local(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the local sandboxes under ``root`` whose owner process died without closing them.

    Every sandbox directory holds a lock (``flock``) that its owner keeps until
    :meth:`LocalSandbox.close`; the kernel releases it when the owner dies, however it dies.
    A directory whose lock can be taken is an orphan: its processes are killed and its
    cgroups and directory removed. Sandboxes of live owners (in any process) are left alone;
    a directory without a lock (made by an older knowlyr) is reaped once it is an hour old.
    :class:`LocalSandbox` calls this on every start; ``knowlyr sandbox gc`` calls it by hand.

    Args:
        root: where the sandboxes were made (default: ``$KNOWLYR_SANDBOX_ROOT`` or the
            system temp dir, as for :class:`LocalSandbox`).

    Returns:
        The directories removed.
    """
    base = _sandbox_base(root)
    reaped: list[Path] = []
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(_PREFIX)]
    except OSError:
        return reaped
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        d = Path(entry.path)
        try:
            fd = os.open(d / _LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:  # an older knowlyr's, or one being made right now
            try:
                old = time.time() - d.stat().st_mtime > _LEGACY_AGE_S
            except OSError:
                continue
            if old and _reap_dir(d):
                reaped.append(d)
            continue
        except OSError:  # not ours to judge (another user's)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: the owner is alive
                continue
            if _reap_dir(d):
                reaped.append(d)
        finally:
            os.close(fd)
    return reaped


def _reap_dir(d: Path) -> bool:
    """Remove an orphaned sandbox directory, its cgroups and its disk quota (called holding
    its lock)."""
    try:
        recorded = [Path(line) for line in (d / _CGROUPS).read_text().splitlines() if line]
    except OSError:
        recorded = []
    if reap_dir(d, [*{*recorded, *(b / d.name for b in _cgroup_bases())}]):
        log.info("reaped the sandbox %s (its owner died without closing it)", d)
        return True
    return False


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox with a host-side workspace. Use :func:`knowlyr.sandbox.create_sandbox`.

    Args:
        config: limits; ``config.workdir`` is where the workspace appears inside.
        files: initial workspace files ``{relative path: text or bytes}``.
        root: host directory to create the sandbox under (default: the system temp dir,
            or ``$KNOWLYR_SANDBOX_ROOT``).

    Example:
        >>> with LocalSandbox(files={"a.py": "print(6 * 7)"}) as sb:  # doctest: +SKIP
        ...     sb.exec("python3 a.py").stdout
        '42\\n'
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        files: dict[str, str | bytes] | None = None,
        root: str | None = None,
    ):
        self.config = config or SandboxConfig()
        reason = local_available(seccomp=self.config.seccomp)
        if reason:
            raise BackendUnavailableError(reason)
        self._closed = False
        self._lock = threading.Lock()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            self.uid = self.gid = UID_BASE + (os.getpid() * 131 + next(_uid_counter)) % UID_RANGE
        else:
            self.uid, self.gid = os.geteuid(), os.getegid()
        base = _sandbox_base(root)
        try:
            reap_local(base)  # sandboxes of owners that died without closing them
        except Exception as e:  # never let someone else's leftovers stop a start
            log.warning("reaping orphaned sandboxes under %s failed: %s", base, e)
        self._owner_fd = -1
        self._guard = None
        self.disk: QuotaDisk | None = None
        self.root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=base))
        try:
            # held until close(); the kernel drops it if this process dies (see reap_local).
            # Locked before it gets its name, so a reaper never finds it free in between.
            fresh = self.root / f".{_LOCK}"
            self._owner_fd = os.open(
                fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
            fcntl.flock(self._owner_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(self._owner_fd, f"{os.getpid()}\n".encode())
            os.rename(fresh, self.root / _LOCK)
            os.chmod(self.root, 0o711)  # the sandbox uid may traverse, not list
            self._guard = start_guard(self.root)  # removes it all if this process dies
            self.disk = self._make_disk()
            data = self.disk.path if self.disk is not None else self.root
            self.workspace = data / "workspace"
            self._tmp = data / "tmp"
            for d in (self.workspace, self._tmp):
                d.mkdir(mode=0o755)
                os.chown(d, self.uid, self.gid)
            os.chmod(self._tmp, 0o1777)
            self._etc = self.root / "etc"
            self._etc.mkdir(mode=0o755)
            for name in _ETC_COPY:
                src = Path("/etc") / name
                if src.is_dir():
                    shutil.copytree(src, self._etc / name, symlinks=True)
                elif src.is_file():
                    shutil.copyfile(src, self._etc / name)
            (self._etc / "profile").write_text(_PROFILE)
            (self._etc / "passwd").write_text(
                f"root:x:0:0:root:/root:/bin/bash\nagent:x:{self.uid}:{self.gid}:agent:{self.config.workdir}:/bin/bash\n"
                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            )
            (self._etc / "group").write_text(f"root:x:0:\nagent:x:{self.gid}:\nnogroup:x:65534:\n")
            (self._etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
            self._seccomp: Path | None = None
            if self.config.seccomp:
                from knowlyr.sandbox.seccomp import filter_bpf

                self._seccomp = self.root / "seccomp.bpf"
                self._seccomp.write_bytes(filter_bpf())
                os.chmod(self._seccomp, 0o600)  # the spawner opens it before the uid drop
            store = self.root / "snapshots"
            store.mkdir(mode=0o700)
            self._snapshots = WorkspaceSnapshots(self.workspace, store, owner=(self.uid, self.gid))
            self._cgroup = _Cgroup(
                self.root.name, self.config.memory_mb * 1024 * 1024, self.config.max_processes
            )
            (self.root / _CGROUPS).write_text("".join(f"{d}\n" for d in self._cgroup.dirs))
            self._prefix = self._build_prefix()
            limits = [
                (resource.RLIMIT_CPU, self.config.cpu_time_s),
                (resource.RLIMIT_AS, self.config.memory_mb * 1024 * 1024),
                (resource.RLIMIT_NPROC, self.config.max_processes),
                (resource.RLIMIT_FSIZE, self.config.max_file_mb * 1024 * 1024),
                (resource.RLIMIT_CORE, 0),
            ]
            drop = self._as_root
            self._spawner = Spawner(
                uid=self.uid if drop else None,
                gid=self.gid if drop else None,
                limits=limits,
                cgroup_procs=self._cgroup.procs,
                files=[self._seccomp] if self._seccomp else [],
            )
            for path, data in (files or {}).items():
                self.write_file(path, data)
        except BaseException:
            self.close()
            raise

    def _make_disk(self) -> QuotaDisk | None:
        """The disk quota holding the workspace and /tmp, or None (logged once) where none
        can be mounted."""
        global _disk_note_logged
        if self.config.disk_mb is None:
            return None
        reason = disk_available()
        if reason is None:
            try:
                return QuotaDisk(self.root, self.config.disk_mb)
            except OSError as e:
                reason = str(e)
        if not _disk_note_logged:
            log.warning(
                "sandbox disk quota skipped (the workspace is on the host disk): %s", reason
            )
            _disk_note_logged = True
        return None

    def _quota_note(self) -> str:
        """The quota message when the disk quota is full, else ''."""
        if self.disk is not None and self.disk.full():
            return quota_message(self.disk.size_mb, "workspace and /tmp")
        return ""

    # -- command line -------------------------------------------------------------------
    def _build_prefix(self) -> list[str]:
        c = self.config
        argv: list[str] = [shutil.which("bwrap") or "/usr/bin/bwrap"]
        # No --new-session: the spawner starts every command in a new session, so the sandbox
        # has no controlling terminal (no TIOCSTI injection), and the flag costs milliseconds.
        argv += ["--unshare-all", "--die-with-parent", "--clearenv"]
        if self._seccomp is not None:  # the spawner opens the filter as fd 3
            argv += ["--seccomp", "3"]
        argv += ["--ro-bind", "/usr", "/usr"]
        for d in ("bin", "lib", "lib64", "lib32", "libx32", "sbin"):
            host = Path("/") / d
            if host.is_symlink():
                argv += ["--symlink", os.readlink(host), f"/{d}"]
            elif host.is_dir():
                argv += ["--ro-bind", str(host), f"/{d}"]
        argv += ["--ro-bind", str(self._etc), "/etc"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--bind", str(self._tmp), "/tmp"]
        argv += ["--bind", str(self.workspace), c.workdir, "--remount-ro", "/"]
        # No bubblewrap init: its outer process exits without reaping it, which leaves a zombie
        # wherever the host's pid 1 does not reap. A dash is pid 1 instead (it reaps orphans;
        # the user's command runs in a child bash, so it never is pid 1 itself).
        argv += ["--as-pid-1", "--chdir", c.workdir, "--hostname", "sandbox"]
        env = {
            "PATH": PATH,
            "HOME": c.workdir,
            "USER": "agent",
            "LOGNAME": "agent",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_AUTHOR_NAME": "agent",
            "GIT_AUTHOR_EMAIL": "agent@sandbox",
            "GIT_COMMITTER_NAME": "agent",
            "GIT_COMMITTER_EMAIL": "agent@sandbox",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
        }
        for k, v in env.items():
            argv += ["--setenv", k, v]
        return [*argv, "/bin/sh", "-c", 'bash -lc "$1"; exit $?', "sh"]

    # -- Sandbox API --------------------------------------------------------------------
    def exec(
        self, cmd: str, *, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run ``cmd`` with ``bash -lc`` in the workspace (see :class:`Sandbox`).

        A timeout kills every process the command started and returns exit code 124 with
        ``timed_out=True``; output beyond ``config.max_output_chars`` is cut in the middle
        with a ``[... N characters truncated ...]`` marker.
        """
        self._check_open()
        self._limit(timeout)  # validates it
        if len(cmd) > MAX_COMMAND_BYTES // 4 and len(cmd.encode()) > MAX_COMMAND_BYTES:
            return too_long(cmd)
        with self._lock:
            limit = self._limit(timeout)  # the deadline may have come while waiting
            if limit <= 0:
                return past_deadline()
            return self._run([*self._prefix, cmd], limit, stdin)

    def _run(self, argv: list[str], limit: float, stdin: str | None) -> ExecResult:
        start = time.monotonic()
        deadline = start + limit
        n = self.config.max_output_chars
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if stdin else (os.open(os.devnull, os.O_RDONLY), -1)
        try:
            pid = self._spawner.spawn(argv, (in_r, out_w, err_w))
        except BaseException:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        outs = {out_r: OutputCapture(n), err_r: OutputCapture(n)}
        pending = stdin.encode() if stdin else b""
        status: int | None = None
        timed_out = False
        spawner_fd = self._spawner.fileno()
        with selectors.DefaultSelector() as sel:
            for fd in outs:
                sel.register(fd, selectors.EVENT_READ)
            sel.register(spawner_fd, selectors.EVENT_READ)
            if in_w >= 0:
                os.set_blocking(in_w, False)
                sel.register(in_w, selectors.EVENT_WRITE)
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if timed_out:  # something outside the namespace holds a pipe: give up on it
                        break
                    timed_out = True
                    self._kill(pid)
                    deadline = time.monotonic() + 5.0  # pipes close once the namespace is gone
                    continue
                for key, _ in sel.select(remaining):
                    fd = key.fd
                    if fd == spawner_fd:
                        status = self._spawner.read_status()
                        sel.unregister(fd)
                    elif fd == in_w:
                        try:
                            pending = pending[os.write(fd, pending[:65536]) :]
                        except OSError:  # the command exited without reading it all
                            pending = b""
                        if not pending:
                            sel.unregister(fd)
                            os.close(fd)
                            in_w = -1
                    else:
                        data = os.read(fd, 65536)
                        if data:
                            outs[fd].feed(data)
                        else:
                            sel.unregister(fd)
        for fd in (out_r, err_r, in_w):
            if fd >= 0:
                os.close(fd)
        if status is None:  # gave up waiting above: make sure it is dead, then collect it
            self._kill(pid)
            status = self._spawner.read_status()
        code = os.waitstatus_to_exitcode(status)
        out, t1 = outs[out_r].text(n)
        err, t2 = outs[err_r].text(n)
        if timed_out:
            code = 124
            sep = "" if not err or err.endswith("\n") else "\n"
            err = f"{err}{sep}[timed out after {round(limit, 2):g}s: every process of the command was killed]\n"
        elif code < 0:  # the sandbox itself was killed by a signal (e.g. the cgroup OOM killer)
            code = 128 - code
        if code != 0 and (note := self._quota_note()):
            err = f"{err}{'' if not err or err.endswith(chr(10)) else chr(10)}{note}"
        return ExecResult(code, out, err, time.monotonic() - start, timed_out, t1 or t2)

    def _kill(self, pid: int) -> None:
        """Kill the namespace's pid 1 (the kernel then kills every process in the namespace).

        Killing the pid 1 first lets the outer bubblewrap reap it and exit; killing the outer
        one first would leave the pid 1 a zombie under the host's pid 1.
        """
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        for child in children:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(child), signal.SIGKILL)
        for _ in range(200):  # the outer bubblewrap exits once its child is gone
            if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                return
            time.sleep(0.01)
        self._cgroup.kill()  # stuck: take everything down
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def _host_path(self, path: str, *, must_exist: bool) -> Path:
        rel = workspace_relpath(path, self.config.workdir)
        p = self.workspace / rel if rel else self.workspace
        real = Path(os.path.realpath(p))
        ws = Path(os.path.realpath(self.workspace))
        if real != ws and ws not in real.parents:
            raise WorkspacePathError(
                f"path {path!r} resolves outside the workspace (through a symlink)"
            )
        if must_exist and not real.exists():
            raise FileNotFoundError(f"no such file in the workspace: {path}")
        return real

    def read_file(self, path: str) -> bytes:
        """Bytes of a workspace file; refuses paths (and symlinks) leading outside."""
        self._check_open()
        p = self._host_path(path, must_exist=True)
        # O_NONBLOCK: a fifo the sandbox made must not hang the host process
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"{path} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise WorkspacePathError(f"{path} is not a regular file (a fifo, socket or device)")
            return f.read()

    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or overwrite a workspace file (owned by the sandbox user), making parents."""
        self._check_open()
        p = self._host_path(path, must_exist=False)
        if p == Path(os.path.realpath(self.workspace)):
            raise IsADirectoryError(f"{path} is the workspace directory")
        rel_parts = p.relative_to(os.path.realpath(self.workspace)).parts
        d = Path(os.path.realpath(self.workspace))
        for part in rel_parts[:-1]:
            d = d / part
            if not d.exists():
                d.mkdir(mode=0o755)
                os.chown(d, self.uid, self.gid)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:  # ENXIO: a fifo nobody reads
            raise WorkspacePathError(f"{path} is not a regular file ({e.strerror})") from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise WorkspacePathError(f"{path} is not a regular file (a fifo, socket or device)")
            os.ftruncate(fd, 0)
            os.fchown(fd, self.uid, self.gid)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT) and self.disk is not None:
                os.ftruncate(fd, 0)  # no half-written file
                note = quota_message(self.disk.size_mb, "workspace and /tmp")
                raise OSError(e.errno, note.strip("[]\n")) from e
            raise
        finally:
            os.close(fd)

    def snapshot(self) -> str:
        """Save the workspace (incremental on restore: see :mod:`knowlyr.sandbox.snapshot`)."""
        self._check_open()
        with self._lock:
            return self._snapshots.snapshot()

    def restore(self, snapshot_id: str) -> None:
        """Put the workspace back as it was at ``snapshot_id``."""
        self._check_open()
        if snapshot_id not in self._snapshots:
            raise SandboxError(f"unknown snapshot {snapshot_id!r}; take one with snapshot() first")
        with self._lock:
            self._snapshots.restore(snapshot_id)

    def close(self) -> None:
        """Kill anything left, remove the cgroup and delete the sandbox directory. Idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        stop_guard(getattr(self, "_guard", None))
        spawner = getattr(self, "_spawner", None)
        if spawner is not None:
            spawner.close()
        cg = getattr(self, "_cgroup", None)
        if cg is not None:
            cg.close()
        disk = getattr(self, "disk", None)
        if disk is not None:
            disk.close()
        root = getattr(self, "root", None)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        fd = getattr(self, "_owner_fd", -1)
        if fd >= 0:
            os.close(fd)
            self._owner_fd = -1

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox is closed; create a new one with create_sandbox()")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"<LocalSandbox {self.root} uid={self.uid}{' closed' if self._closed else ''}>"


def _is_zombie(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rsplit(")", 1)[-1].split()[0] == "Z"

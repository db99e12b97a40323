"""The container backend: one container per sandbox through any Docker-API engine.

Talks to ``DOCKER_HOST`` (Docker, or Podman's API service: ``podman system service``) with
the ``docker`` SDK. The container has no network (``network_mode="none"``), memory, CPU and
pids limits, every capability dropped, ``no-new-privileges``, explicit ``nofile``/``nproc``
ulimits (soft = hard; Podman needs both) plus ``cpu`` and ``fsize`` ones, and an init
process; commands run as an unprivileged user (uid 1000) in ``config.workdir``.

Each command runs as ``bash -lc CMD`` and, when it ends, everything it started is killed
(``kill -9 -1`` as the sandbox user: the container's own PID namespace, never pid 1), the same
semantics as the local backend. A wall-clock timeout kills them from outside the same way, or,
when a fork bomb leaves no pid for that ``kill`` to start, restarts the container (its files
stay).
Snapshots are ``commit`` images: :meth:`ContainerSandbox.restore` replaces the container by
a fresh one from the image, so everything is restored (installed packages, ``/tmp``...), not
only the workspace; a pristine container of the last snapshot is kept started in the
background, so a restore is usually a swap. Containers and snapshot images are always removed, also on errors.
Every container and snapshot image is labelled ``knowlyr.sandbox`` with its owner's pid, start
time and pid namespace. When the owner dies without closing them (``kill -9``), the
sandbox's guard process (:mod:`knowlyr.sandbox._guard`) removes them within seconds; should
the guard be gone too, the next sandbox start or ``knowlyr sandbox gc`` does
(:func:`reap_containers`).

Disk quota: with an engine on this machine (a ``unix://`` socket) and root, the workspace,
``/tmp`` and ``/var/tmp`` (the only places the sandbox user can write) are bind-mounted from
a loop-mounted ext4 image of ``config.disk_mb`` on the host (:mod:`knowlyr.sandbox._disk`),
and snapshots copy them on the host beside the ``commit``; elsewhere they stay in the
container's own layer, with a logged reason.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import itertools
import logging
import os
import posixpath
import select
import shutil
import socket
import struct
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from knowlyr.errors import BackendUnavailableError, SandboxError, WorkspacePathError
from knowlyr.sandbox._disk import QuotaDisk, disk_available, quota_message
from knowlyr.sandbox._guard import LOCK, reap_dir, start_guard, stop_guard
from knowlyr.sandbox._owner import LABEL, PIDNS, owner_dead, owner_labels, pid_namespace
from knowlyr.sandbox._util import MAX_COMMAND_BYTES, OutputCapture, too_long, workspace_relpath
from knowlyr.sandbox.base import ExecResult, Sandbox, SandboxConfig, past_deadline

__all__ = ["ContainerSandbox", "container_available", "reap_containers"]

UID = 1000  # the image's `agent` user (scripts/build_sandbox_image.py)
IMAGE_HINT = (
    "build it with: python3 scripts/build_sandbox_image.py (or run scripts/setup-system.sh)"
)
ENGINE_HINT = (
    "start a Docker-API engine and set DOCKER_HOST, e.g. `podman system service --time=0 "
    "unix:///tmp/podman.sock &` and `export DOCKER_HOST=unix:///tmp/podman.sock` "
    "(install: apt-get install -y podman runc crun fuse-overlayfs slirp4netns uidmap catatonit)"
)
# Runs the command, then kills whatever it left behind (setsid'd or backgrounded processes).
_WRAP = 'bash -lc "$1"; rc=$?; kill -9 -1 2>/dev/null; exit $rc'
_READ = (
    'p=$(realpath -e -- "$1" 2>/dev/null) || exit 2; '
    'case "$p" in "$2"|"$2"/*) ;; *) exit 3;; esac; [ -d "$p" ] && exit 4; '
    '[ -f "$p" ] || exit 5; exec cat -- "$p"'
)
_WRITE = (
    'p=$(realpath -m -- "$1") || exit 2; case "$p" in "$2"/*) ;; *) exit 3;; esac; '
    '[ -d "$p" ] && exit 4; [ -e "$p" ] && [ ! -f "$p" ] && exit 5; '
    'mkdir -p -- "$(dirname -- "$p")" || exit 6; cat > "$p" && exit 0; : > "$p"; exit 6'
)
DISK_LABEL = "knowlyr.disk"  # the host directory of a container sandbox's disk quota
_DISK_PREFIX = "knowlyr-sbc-"
_WRITABLE = {"workspace": None, "tmp": "/tmp", "vartmp": "/var/tmp"}  # dir -> mount point
_QUOTA_WHERE = "workspace, /tmp and /var/tmp"
log = logging.getLogger("knowlyr.sandbox")
_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()
_ids = itertools.count()
_disk_note_logged = False


def _docker_host() -> str | None:
    return os.environ.get("DOCKER_HOST")


def _engine_url() -> str:
    """``DOCKER_HOST``, else the default socket (raises BackendUnavailableError)."""
    host = _docker_host()
    if host:
        return host
    if os.path.exists("/var/run/docker.sock"):
        return "unix:///var/run/docker.sock"
    raise BackendUnavailableError(
        f"DOCKER_HOST is not set and /var/run/docker.sock does not exist; {ENGINE_HINT}"
    )


def _client() -> Any:
    """A shared DockerClient for ``DOCKER_HOST`` (raises BackendUnavailableError)."""
    try:
        import docker
    except ImportError as e:
        raise BackendUnavailableError(
            "the container backend needs the docker SDK: pip install 'knowlyr-gym[container]'"
        ) from e
    host = _engine_url()
    with _clients_lock:
        client = _clients.get(host)
        if client is None:
            try:
                client = docker.DockerClient(base_url=host, timeout=120)
                client.ping()
            except Exception as e:
                raise BackendUnavailableError(
                    f"no Docker-API engine answers at {host} ({e}); {ENGINE_HINT}"
                ) from e
            _clients[host] = client
    return client


def container_available(image: str | None = None) -> str | None:
    """``None`` when the container backend can run here, else the reason and the fix."""
    try:
        client = _client()
    except BackendUnavailableError as e:
        return str(e)
    if image:
        try:
            client.images.get(image)
        except Exception:
            return f"image {image!r} is not present at {_docker_host()}; {IMAGE_HINT}"
    return None


def reap_containers(client: Any = None) -> list[str]:
    """Remove the sandbox containers and snapshot images whose owner process died.

    Every container (and snapshot image) this backend makes carries the ``knowlyr.sandbox``
    label and its owner's pid, start time and pid namespace
    (:func:`knowlyr.sandbox._owner.owner_labels`). Those owned by a process of this pid
    namespace that no longer exists are removed; owners elsewhere (another machine, another
    container) cannot be judged from here and are left alone, as are live ones.
    :class:`ContainerSandbox` calls this on every start; ``knowlyr sandbox gc`` by hand.

    Args:
        client: a ``docker.DockerClient`` (default: the one for ``DOCKER_HOST``).

    Returns:
        The names of the containers and the tags of the images removed.
    """
    api = (client or _client()).api
    ours = f"{PIDNS}={pid_namespace()}"
    removed: list[str] = []
    # The listings' summaries carry the labels: the SDK's containers.list / images.list would
    # inspect each one, and fail when another sandbox removes its own in between.
    # One label filter: Podman 4.3 lists no image at all for two.
    disks: set[str] = set()
    for c in api.containers(all=True, filters={"label": ours}):
        labels = c.get("Labels") or {}
        if LABEL in labels and owner_dead(labels):
            with contextlib.suppress(Exception):
                api.remove_container(c["Id"], force=True)
                removed.append(((c.get("Names") or [c["Id"]])[0]).lstrip("/"))
            if labels.get(DISK_LABEL):
                disks.add(labels[DISK_LABEL])
    for d in sorted(disks):
        if _reap_disk_dir(Path(d)):
            removed.append(d)
    for image in api.images(filters={"label": ours}):
        labels = image.get("Labels") or {}
        tags = [t for t in image.get("RepoTags") or () if "knowlyr-snapshot/" in t]
        if tags and LABEL in labels and owner_dead(labels):  # (Podman prefixes docker.io/)
            for tag in tags:
                with contextlib.suppress(Exception):
                    api.remove_image(tag, force=True)
                    removed.append(tag)
    return removed


def _reap_disk_dir(d: Path) -> bool:
    """Remove a dead container sandbox's disk quota directory (unless its lock is held)."""
    if not d.name.startswith(_DISK_PREFIX) or not d.is_dir():
        return False
    try:
        fd = os.open(d / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its owner (or a process it forked) is alive
            return False
        return reap_dir(d)
    finally:
        os.close(fd)


def _buffered(sock: Any) -> bytes:
    """Stream bytes the HTTP client already read past the response headers.

    The docker SDK hands out the raw socket under http.client's buffered reader; when the
    engine sends the first output in the same packet as the headers (a fast command), those
    bytes sit in that buffer and reading the raw socket alone would lose them.
    """
    try:
        fp = sock._response.raw._fp.fp
        raw = sock._sock
    except AttributeError:
        return b""
    raw.setblocking(False)
    try:
        return fp.read1(1 << 20) or b""
    except (BlockingIOError, OSError, ValueError):
        return b""
    finally:
        raw.setblocking(True)


def _send_stdin(raw: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the command may exit without reading it all
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)


def _read_frames(
    sock: socket.socket,
    outs: tuple[OutputCapture, OutputCapture],
    deadline: float,
    buf: bytes = b"",
) -> bool:
    """Demultiplex the exec stream into stdout/stderr until EOF; False when the deadline hit."""
    while True:
        pos = 0
        while len(buf) - pos >= 8:
            stream, size = buf[pos], struct.unpack_from(">I", buf, pos + 4)[0]
            if len(buf) - pos < 8 + size:
                break
            outs[1 if stream == 2 else 0].feed(buf[pos + 8 : pos + 8 + size])
            pos += 8 + size
        buf = buf[pos:]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([sock], [], [], remaining)
        if not ready:
            return False
        try:
            data = sock.recv(262144)
        except ConnectionResetError:  # the engine dropped the stream as the command ended
            return True
        if not data:
            return True
        buf += data


class ContainerSandbox(Sandbox):
    """A sandbox in a container of ``config.image``. Use :func:`knowlyr.sandbox.create_sandbox`.

    Args:
        config: limits and image; ``config.backend`` is ignored here.
        files: initial workspace files ``{relative path: text or bytes}``.
        warm_restore: keep one pristine container of the last snapshot used started in the
            background, so :meth:`restore` is a swap (costs one idle container).

    Example:
        >>> cfg = SandboxConfig(backend="container", memory_mb=512)
        >>> with ContainerSandbox(cfg, files={"a.py": "print(1)"}) as sb:  # doctest: +SKIP
        ...     sb.exec("python3 a.py").stdout
        '1\\n'
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        files: dict[str, str | bytes] | None = None,
        warm_restore: bool = True,
    ):
        self.config = config or SandboxConfig(backend="container")
        self.warm_restore = warm_restore
        self._standby: dict[str, Any] | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._container: Any = None
        self._images: list[str] = []
        self._reapers: list[threading.Thread] = []
        self._guard = None
        self._owner_fd = -1
        self.disk: QuotaDisk | None = None
        self._disk_dir: Path | None = None
        self._files: Any = None  # host-side snapshots of the disk quota's directories
        self._file_snapshots: dict[str, str] = {}
        self.name = f"knowlyr-{os.getpid()}-{next(_ids)}-{uuid.uuid4().hex[:6]}"
        self._client = _client()
        try:
            reap_containers(self._client)  # sandboxes of owners that died without closing them
        except Exception as e:  # never let someone else's leftovers stop a start
            log.warning("reaping orphaned sandbox containers failed: %s", e)
        try:
            self._client.images.get(self.config.image)
        except Exception as e:
            raise BackendUnavailableError(
                f"image {self.config.image!r} is not present at {_docker_host()}; {IMAGE_HINT}"
            ) from e
        try:
            self._make_disk()
            # removes the containers, images and disk if this process dies without close()
            self._guard = start_guard(self._disk_dir, docker_host=_engine_url(), label=self.name)
            self._container = self._start(self.config.image)
            if files:
                self._put_initial(files)
        except BaseException:
            self.close()
            raise

    def _make_disk(self) -> None:
        """Mount the disk quota on the host for the workspace, /tmp and /var/tmp (bound into
        the container), or log once why not."""
        global _disk_note_logged
        if self.config.disk_mb is None:
            return
        reason = disk_available()
        url = _engine_url()
        if reason is None and not (
            url.startswith("unix://") and os.path.exists(url.removeprefix("unix://"))
        ):
            reason = f"the engine at {url} is not on this machine (its bind mounts would not be)"
        if reason is None:
            from knowlyr.sandbox.local import _sandbox_base
            from knowlyr.sandbox.snapshot import WorkspaceSnapshots

            d = Path(tempfile.mkdtemp(prefix=_DISK_PREFIX, dir=_sandbox_base(None)))
            self._disk_dir = d
            fresh = d / f".{LOCK}"
            self._owner_fd = os.open(
                fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
            fcntl.flock(self._owner_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(fresh, d / LOCK)
            os.chmod(d, 0o711)
            try:
                self.disk = QuotaDisk(d, self.config.disk_mb)
            except OSError as e:
                reason = str(e)
            else:
                for name, mount in _WRITABLE.items():
                    sub = self.disk.path / name
                    sub.mkdir()
                    os.chown(sub, UID, UID)
                    os.chmod(sub, 0o1777 if mount else 0o755)
                store = d / "snapshots"
                store.mkdir(mode=0o700)
                self._files = WorkspaceSnapshots(self.disk.path, store)
                return
        if not _disk_note_logged:
            log.warning(
                "container sandbox disk quota skipped (it writes to the engine's disk): %s", reason
            )
            _disk_note_logged = True

    def _start(self, image: str) -> Any:
        import docker

        c = self.config
        mb = c.memory_mb
        mounts = []
        if self.disk is not None:
            mounts = [
                docker.types.Mount(mount or c.workdir, str(self.disk.path / name), type="bind")
                for name, mount in _WRITABLE.items()
            ]
        ulimits = [
            docker.types.Ulimit(name="nofile", soft=4096, hard=4096),
            docker.types.Ulimit(
                name="nproc", soft=4096, hard=4096
            ),  # per host uid: pids_limit is the real cap
            docker.types.Ulimit(name="cpu", soft=c.cpu_time_s, hard=c.cpu_time_s),
            docker.types.Ulimit(
                name="fsize", soft=c.max_file_mb * 1024 * 1024, hard=c.max_file_mb * 1024 * 1024
            ),
            docker.types.Ulimit(name="core", soft=0, hard=0),
        ]
        try:
            return self._client.containers.run(
                image,
                ["sleep", "infinity"],
                detach=True,
                init=True,
                name=f"{self.name}-{next(_ids)}",
                network_mode="none",
                mem_limit=f"{mb}m",
                memswap_limit=f"{mb}m",
                nano_cpus=int(c.cpus * 1e9),
                pids_limit=c.max_processes,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                ulimits=ulimits,
                mounts=mounts,
                working_dir=c.workdir,
                hostname="sandbox",
                environment={"HOME": c.workdir, "LANG": "C.UTF-8", "TERM": "dumb", "GIT_PAGER": "cat", "PAGER": "cat",
                             "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@sandbox",
                             "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@sandbox",
                             "PYTHONDONTWRITEBYTECODE": "1"},
                labels={
                    LABEL: self.name,
                    **owner_labels(),
                    **({DISK_LABEL: str(self._disk_dir)} if self.disk is not None else {}),
                },
            )  # fmt: skip
        except Exception as e:
            raise SandboxError(f"could not start a container from {image!r}: {e}") from e

    def _put_initial(self, files: dict[str, str | bytes]) -> None:
        """Write the initial files with one archive upload (the fresh workspace has no links)."""
        buf = io.BytesIO()
        now = int(time.time())
        dirs: set[str] = set()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path, data in files.items():
                rel = workspace_relpath(path, self.config.workdir)
                if not rel:
                    raise IsADirectoryError(f"{path} is the workspace directory")
                parts = rel.split("/")
                for i in range(1, len(parts)):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        info = tarfile.TarInfo(d)
                        info.type, info.mode, info.uid, info.gid, info.mtime = (
                            tarfile.DIRTYPE,
                            0o755,
                            UID,
                            UID,
                            now,
                        )
                        tar.addfile(info)
                payload = data.encode() if isinstance(data, str) else bytes(data)
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.uid, info.gid, info.mtime = (
                    len(payload),
                    0o644,
                    UID,
                    UID,
                    now,
                )
                tar.addfile(info, io.BytesIO(payload))
        try:
            ok = self._container.put_archive(self.config.workdir, buf.getvalue())
        except Exception as e:
            raise SandboxError(
                f"could not upload the initial files to {self._container.name}: {e}"
            ) from e
        if not ok:
            raise SandboxError(f"the engine refused the initial files for {self._container.name}")

    # -- exec ----------------------------------------------------------------------------
    def _exec_raw(
        self, argv: list[str], limit: float, stdin: bytes | None, *, keep_all: bool = False
    ) -> tuple[int, OutputCapture, OutputCapture, bool]:
        api = self._client.api
        cid = self._container.id
        user = str(UID)
        n = 0 if keep_all else self.config.max_output_chars
        outs = (OutputCapture(n), OutputCapture(self.config.max_output_chars))
        deadline = time.monotonic() + limit
        try:
            eid = api.exec_create(
                cid, argv, stdin=stdin is not None, user=user, workdir=self.config.workdir
            )["Id"]
            sock = api.exec_start(eid, socket=True)
        except Exception as e:
            raise SandboxError(f"exec in container {self._container.name} failed: {e}") from e
        raw: socket.socket = getattr(sock, "_sock", sock)
        try:
            if (
                stdin is not None
            ):  # from a thread: a command that writes before it reads must not deadlock
                writer = threading.Thread(target=_send_stdin, args=(raw, stdin), daemon=True)
                writer.start()
            finished = _read_frames(raw, outs, deadline, _buffered(sock))
            if not finished:  # kill every process of the sandbox user, then drain
                self._kill_all()
                _read_frames(raw, outs, time.monotonic() + 5.0)
        finally:
            sock.close()
        if not finished:  # (a restarted container has forgotten the exec)
            return 124, outs[0], outs[1], True
        code = api.exec_inspect(eid).get("ExitCode")
        return (code if code is not None else -1), outs[0], outs[1], False

    def _kill_all(self) -> None:
        """Kill every process of the sandbox user (a command past its deadline).

        ``kill -9 -1`` runs in the container as that user. When no process can start there
        (a fork bomb holds every pid of the limit, and the engine's exec fails), the
        container is restarted instead: its pid 1 dies, taking every process with it, and
        the filesystem stays as it was.
        """
        api = self._client.api
        try:
            eid = api.exec_create(self._container.id, ["kill", "-9", "-1"], user=str(UID))["Id"]
            api.exec_start(eid)
            code = api.exec_inspect(eid).get("ExitCode")
        except Exception as e:
            code = f"{type(e).__name__}: {e}"
        if code in (0, 1):  # 1: nothing was left to kill
            return
        log.warning(
            "could not kill the processes in %s (exit %s): restarting it",
            self._container.name,
            code,
        )
        try:
            self._container.restart(timeout=0)
        except Exception as e:
            raise SandboxError(
                f"could not kill the processes of a timed-out command in {self._container.name}: "
                f"the kill failed (exit {code}) and so did a restart: {e}"
            ) from e

    def exec(
        self, cmd: str, *, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run ``cmd`` with ``bash -lc`` in the workspace (see :class:`Sandbox`)."""
        self._check_open()
        self._limit(timeout)  # validates it
        if len(cmd) > MAX_COMMAND_BYTES // 4 and len(cmd.encode()) > MAX_COMMAND_BYTES:
            return too_long(cmd)
        start = time.monotonic()
        with self._lock:
            limit = self._limit(timeout)  # the deadline may have come while waiting
            if limit <= 0:
                return past_deadline()
            code, out, err, timed_out = self._exec_raw(
                ["bash", "-c", _WRAP, "_", cmd],
                limit,
                stdin.encode() if stdin is not None else None,
            )
        n = self.config.max_output_chars
        stdout, t1 = out.text(n)
        stderr, t2 = err.text(n)
        if timed_out:
            sep = "" if not stderr or stderr.endswith("\n") else "\n"
            stderr = f"{stderr}{sep}[timed out after {round(limit, 2):g}s: every process of the command was killed]\n"
        if code != 0 and self.disk is not None and self.disk.full():
            sep = "" if not stderr or stderr.endswith("\n") else "\n"
            stderr = f"{stderr}{sep}{quota_message(self.disk.size_mb, _QUOTA_WHERE)}"
        return ExecResult(code, stdout, stderr, time.monotonic() - start, timed_out, t1 or t2)

    # -- files ---------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        rel = workspace_relpath(path, self.config.workdir)
        return posixpath.join(self.config.workdir, rel) if rel else self.config.workdir

    def read_file(self, path: str) -> bytes:
        """Bytes of a workspace file; refuses paths (and symlinks) leading outside."""
        self._check_open()
        p = self._abs(path)
        wd = posixpath.normpath(self.config.workdir)
        limit = max(self.config.timeout_s, 30.0)
        with self._lock:
            code, out, err, _ = self._exec_raw(
                ["sh", "-c", _READ, "_", p, wd], limit, None, keep_all=True
            )
        if code == 2:
            raise FileNotFoundError(f"no such file in the workspace: {path}")
        if code == 3:
            raise WorkspacePathError(
                f"path {path!r} resolves outside the workspace (through a symlink)"
            )
        if code == 4:
            raise IsADirectoryError(f"{path} is a directory")
        if code == 5:
            raise WorkspacePathError(f"{path} is not a regular file (a fifo, socket or device)")
        if code != 0:
            raise SandboxError(f"reading {path} failed (exit {code}): {err.text(500)[0]}")
        return out.data()

    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or overwrite a workspace file (owned by the sandbox user), making parents."""
        self._check_open()
        p = self._abs(path)
        wd = posixpath.normpath(self.config.workdir)
        if p == wd:
            raise IsADirectoryError(f"{path} is the workspace directory")
        payload = data.encode() if isinstance(data, str) else bytes(data)
        with self._lock:
            code, _out, err, _ = self._exec_raw(
                ["sh", "-c", _WRITE, "_", p, wd], max(self.config.timeout_s, 30.0), payload
            )
        if code == 3:
            raise WorkspacePathError(
                f"path {path!r} resolves outside the workspace (through a symlink)"
            )
        if code == 4:
            raise IsADirectoryError(f"{path} is a directory")
        if code == 5:
            raise WorkspacePathError(f"{path} is not a regular file (a fifo, socket or device)")
        if (
            code == 6
            and self.disk is not None
            and ("No space left" in err.text(500)[0] or _full(self.disk.path, len(payload)))
        ):  # under load the engine's attach stream can break first and hide the shell's error
            note = quota_message(self.disk.size_mb, _QUOTA_WHERE)
            raise OSError(errno.ENOSPC, note.strip("[]\n"))
        if code != 0:
            raise SandboxError(f"writing {path} failed (exit {code}): {err.text(500)[0]}")

    # -- snapshots -----------------------------------------------------------------------
    def snapshot(self) -> str:
        """Commit the container to an image; returns its id."""
        self._check_open()
        with self._lock:
            repo = f"knowlyr-snapshot/{self.name}"
            tag = f"s{len(self._images) + 1}"
            try:
                self._container.commit(repository=repo, tag=tag, pause=True)
            except Exception as e:
                raise SandboxError(f"commit of {self._container.name} failed: {e}") from e
            ref = f"{repo}:{tag}"
            self._images.append(ref)
            if self._files is not None:  # the bound directories are not in the image
                self._file_snapshots[ref] = self._files.snapshot()
            self._prepare_standby(ref)
            return ref

    def restore(self, snapshot_id: str) -> None:
        """Replace the container by a fresh one from snapshot ``snapshot_id``.

        With ``warm_restore`` a container of the last snapshot used is started in the
        background beforehand, so a restore usually only swaps containers.
        """
        self._check_open()
        if snapshot_id not in self._images:
            raise SandboxError(f"unknown snapshot {snapshot_id!r}; take one with snapshot() first")
        with self._lock:
            new = self._take_standby(snapshot_id)
            if new is None:
                new = self._start(snapshot_id)
            if self._files is not None:
                self._files.restore(self._file_snapshots[snapshot_id])
            old, self._container = self._container, new
            self._remove_later(old)
            self._prepare_standby(snapshot_id)

    def _prepare_standby(self, ref: str) -> None:
        """Start a pristine container of ``ref`` in the background for the next restore."""
        if not self.warm_restore:
            return
        self._drop_standby()
        holder: dict[str, Any] = {"ref": ref, "container": None}

        def run() -> None:
            with contextlib.suppress(Exception):
                holder["container"] = self._start(ref)

        holder["thread"] = t = threading.Thread(
            target=run, name=f"{self.name}-standby", daemon=True
        )
        self._standby = holder
        t.start()

    def _take_standby(self, ref: str) -> Any:
        holder, self._standby = self._standby, None
        if holder is None:
            return None
        holder["thread"].join()
        if holder["ref"] != ref:
            if holder["container"] is not None:
                self._remove_later(holder["container"])
            return None
        return holder["container"]

    def _drop_standby(self) -> None:
        holder, self._standby = self._standby, None
        if holder is not None:
            holder["thread"].join()
            if holder["container"] is not None:
                self._remove_later(holder["container"])

    def _remove_later(self, container: Any) -> None:
        t = threading.Thread(target=self._remove, args=(container,), daemon=True)
        t.start()
        self._reapers.append(t)

    @staticmethod
    def _remove(container: Any) -> None:
        """Remove ``container``; a busy engine (a request timing out under load) gets two
        more tries before the failure is logged (the owner's guard and gc still reap it)."""
        import docker.errors

        for attempt in range(3):
            try:
                container.remove(force=True)
                return
            except docker.errors.NotFound:
                return
            except Exception as e:
                if attempt == 2:
                    log.warning("removing sandbox container %s failed: %s", container.id, e)
                else:
                    time.sleep(0.5)

    def close(self) -> None:
        """Remove the containers and the snapshot images. Idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        stop_guard(self._guard)
        self._drop_standby()
        if self._container is not None:
            self._remove(self._container)
            self._container = None
        for t in self._reapers:
            t.join(timeout=60)
        for ref in self._images:
            with contextlib.suppress(Exception):
                self._client.images.remove(ref, force=True)
        self._images.clear()
        if self.disk is not None:
            self.disk.close()
        if self._disk_dir is not None:
            shutil.rmtree(self._disk_dir, ignore_errors=True)
        if self._owner_fd >= 0:
            os.close(self._owner_fd)
            self._owner_fd = -1

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox is closed; create a new one with create_sandbox()")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"<ContainerSandbox {self.name}{' closed' if self._closed else ''}>"


def _full(path: Path, wanted: int) -> bool:
    """Whether the quota disk mounted at ``path`` has less room than ``wanted`` bytes."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < max(wanted, 1)

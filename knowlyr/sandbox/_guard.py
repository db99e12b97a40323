"""A sandbox's guard: a small process that removes the sandbox when its owner dies.

A sandbox whose owner is killed (``kill -9``, the OOM killer) is never closed. Every sandbox
therefore starts a guard (:func:`start_guard`): this file run as a script, in a session of its
own, holding a pidfd of the owner. When the owner exits, the pidfd becomes readable and the
guard removes what the owner left:

* a container sandbox's containers and snapshot images (through the Docker API at the
  owner's ``DOCKER_HOST``, found by the sandbox's ``knowlyr.sandbox`` label);
* the sandbox directory: it waits for the directory's owner lock (the kernel dropped the
  owner's; a process that inherited it by ``fork`` keeps it until it exits too), kills and
  removes the sandbox's cgroups, unmounts its disk quota (:mod:`knowlyr.sandbox._disk`) and
  deletes the directory.

An owner that closes its sandbox kills the guard first (:func:`stop_guard`). The guard idles
in a ``select`` (a few MB of memory, no CPU); when it is killed too (its whole session, the
machine), the next sandbox start or ``knowlyr sandbox gc`` still reaps (:mod:`._owner`).

Standard library only (the Docker SDK is imported after the owner died, for containers).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run as a script with `python -I`: the package is not importable
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _disk import MOUNT, unmount  # type: ignore[import-not-found,no-redef]
else:
    from knowlyr.sandbox._disk import MOUNT, unmount

__all__ = ["kill_cgroup", "reap_dir", "remove_cgroup", "start_guard", "stop_guard"]

log = logging.getLogger("knowlyr.sandbox")
LOCK = "owner.lock"  # flock'ed by the owning process until close()
CGROUPS = "cgroups"  # the sandbox's cgroup directories, one a line
_note_logged = False


def kill_cgroup(d: Path) -> None:
    """SIGKILL every process in cgroup ``d``."""
    try:
        pids = (d / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def remove_cgroup(d: Path) -> bool:
    """Kill what is left in cgroup ``d`` and remove it; False if it would not go."""
    kill_cgroup(d)
    for _ in range(50):
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # dying processes still listed: give them a moment
            time.sleep(0.01)
    return False


def reap_dir(d: Path, cgroups: list[Path] | None = None) -> bool:
    """Remove a dead sandbox's directory: its cgroups (those recorded in it by default), its
    disk quota's mount, then the files. Call it holding the directory's lock."""
    if cgroups is None:
        try:
            cgroups = [Path(x) for x in (d / CGROUPS).read_text().splitlines() if x]
        except OSError:
            cgroups = []
    for cg in cgroups:
        if cg.name == d.name and cg.is_dir():
            remove_cgroup(cg)
    with contextlib.suppress(OSError):
        unmount(d / MOUNT)
    for _ in range(3):  # a dying process may still write into it
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            return True
        time.sleep(0.05)
    return False


def start_guard(
    directory: Path | None, *, docker_host: str | None = None, label: str | None = None
) -> subprocess.Popen[bytes] | None:
    """Start the guard of a sandbox of this process: it removes ``directory`` (a sandbox
    directory with an owner lock) and, with ``docker_host``, the containers and snapshot images
    labelled ``knowlyr.sandbox=label`` once this process has exited. None (logged once) where
    a pidfd cannot be had (Linux < 5.3)."""
    global _note_logged
    try:
        pidfd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError) as e:
        if not _note_logged:
            log.info("no sandbox guard (a dead owner's sandbox waits for `sandbox gc`): %s", e)
            _note_logged = True
        return None
    cfg = {
        "pidfd": pidfd,
        "dir": os.fspath(directory) if directory is not None else None,
        "docker_host": docker_host,
        "label": label,
    }
    python = sys.executable if sys.executable and os.access(sys.executable, os.X_OK) else None
    try:
        return subprocess.Popen(
            [python or "/usr/bin/python3", "-I", os.path.abspath(__file__), json.dumps(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(pidfd,),
            start_new_session=True,  # a Ctrl-C or hang-up of the owner's terminal is not for it
        )
    finally:
        os.close(pidfd)


def stop_guard(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a guard (its owner is closing the sandbox itself)."""
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        proc.wait()


def _remove_containers(host: str, label: str) -> None:
    import docker

    api = docker.DockerClient(base_url=host, timeout=60).api
    filters = {"label": f"knowlyr.sandbox={label}"}
    quiet = 0
    for _ in range(10):  # a container the owner was starting as it died may appear late
        found = 0
        for c in api.containers(all=True, filters=filters):
            found += 1
            with contextlib.suppress(Exception):
                api.remove_container(c["Id"], force=True)
        for image in api.images(filters=filters):
            for tag in image.get("RepoTags") or ():
                if "knowlyr-snapshot/" in tag:
                    found += 1
                    with contextlib.suppress(Exception):
                        api.remove_image(tag, force=True)
        quiet = quiet + 1 if not found else 0
        if quiet >= 2:
            return
        time.sleep(0.5)


def _reap_locked(d: Path) -> None:
    try:
        fd = os.open(d / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # closed and removed already
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # free once every holder is gone
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(d / LOCK))
        except OSError:
            same = False
        if same:  # not reaped by a sandbox start or `sandbox gc` meanwhile
            reap_dir(d)
    finally:
        os.close(fd)


def _main() -> None:
    cfg = json.loads(sys.argv[1])
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    select.select([cfg["pidfd"]], [], [])  # readable once the owner has exited
    if cfg.get("docker_host") and cfg.get("label"):
        with contextlib.suppress(Exception):
            _remove_containers(cfg["docker_host"], cfg["label"])
    if cfg.get("dir"):
        _reap_locked(Path(cfg["dir"]))


if __name__ == "__main__":
    _main()

"""Who owns a sandbox, and whether that owner is still alive.

A sandbox whose owner died (``kill -9``, OOM killer, power loss of a remote client) is never
closed. The local backend detects that with a lock (``flock`` on a file in the sandbox
directory, held by the owner until ``close``: the kernel drops it when the owner dies); the
container backend labels every container and snapshot image with its owner's identity
(:func:`owner_labels`), which :func:`owner_dead` checks.

An owner is identified by its pid, the pid's start time (so a reused pid is not mistaken for
it) and the pid namespace on this boot (``boot_id:pidns inode``): only an owner seen from the
same namespace can be judged; anything else is left alone.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping

__all__ = ["LABEL", "owner_dead", "owner_labels", "pid_namespace"]

LABEL = "knowlyr.sandbox"  # every container and snapshot image the container backend makes
PID = "knowlyr.owner.pid"
START = "knowlyr.owner.start"
PIDNS = "knowlyr.owner.pidns"
HOST = "knowlyr.owner.host"


def start_time(pid: int) -> str | None:
    """``pid``'s start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        stat = open(f"/proc/{pid}/stat", "rb").read()  # noqa: SIM115 - one read
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    if len(fields) < 20 or fields[0] == b"Z":  # a zombie is dead
        return None
    return fields[19].decode()


@functools.cache
def pid_namespace() -> str:
    """This boot's id and this process's pid namespace: where pids mean the same thing."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()  # noqa: SIM115
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}:{ns}"


def owner_labels() -> dict[str, str]:
    """Labels naming this process as a sandbox's owner."""
    pid = os.getpid()
    return {
        PID: str(pid),
        START: start_time(pid) or "",
        PIDNS: pid_namespace(),
        HOST: socket.gethostname(),
    }


def owner_dead(labels: Mapping[str, str] | None) -> bool:
    """Whether the owner named by ``labels`` is known to be dead (False when it cannot be told:
    no owner labels, or an owner in another pid namespace or on another boot)."""
    labels = labels or {}
    ns = labels.get(PIDNS)
    if not ns or ns != pid_namespace():
        return False
    try:
        pid = int(labels.get(PID, ""))
    except ValueError:
        return False
    started = start_time(pid)
    return started is None or started != (labels.get(START) or started)

"""Bounded sandboxes (issue #38): a disk quota per sandbox, and sandboxes that go when their
owner is killed, without waiting for the next sandbox start or ``knowlyr sandbox gc``."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from knowlyr.sandbox import Sandbox
from knowlyr.sandbox.tools import write_file

REPO = Path(__file__).parents[2]
MB = 1024 * 1024


def _host_dir(sb: Sandbox) -> Path:
    """Where the sandbox keeps its files on the host (the quota's image included)."""
    d = getattr(sb, "root", None) or sb._disk_dir
    assert d is not None, "the sandbox has no disk quota"
    return Path(d)


def _host_bytes(d: Path) -> int:
    """Bytes allocated on the host disk under ``d`` (not crossing into mounted file systems)."""
    dev = d.stat().st_dev
    total = 0
    for top, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if os.lstat(os.path.join(top, x)).st_dev == dev]
        for f in files:
            total += os.lstat(os.path.join(top, f)).st_blocks * 512
    return total


def test_a_full_disk_quota_fails_the_write_and_says_so(make_sandbox, backend):
    sb = make_sandbox(disk_mb=16)
    assert sb.disk is not None and sb.disk.size_mb == 16
    before = _host_bytes(_host_dir(sb))

    r = sb.exec("dd if=/dev/zero of=big bs=1M count=40")
    assert r.exit_code != 0
    assert "No space left on device" in r.stderr
    assert "disk quota of 16 MB" in r.stderr and "SandboxConfig(disk_mb=...)" in r.stderr
    # /tmp shares the quota: it is full too
    r = sb.exec("echo more > /tmp/more && head -c 4M /dev/zero > /tmp/more")
    assert r.exit_code != 0 and "disk quota of 16 MB" in r.stderr
    # the host disk received no more than the quota
    assert _host_bytes(_host_dir(sb)) - before <= 16 * MB
    if backend == "container":  # and nothing went to the container's own layer either
        api = sb._client.api
        url = api._url("/containers/{0}/json", sb._container.id)
        info = api._result(api._get(url, params={"size": 1}), True)
        assert "SizeRw" in info and info["SizeRw"] < 4 * MB

    # a host-side write hits the same quota, with the same message (and leaves no half file)
    with pytest.raises(OSError, match=r"disk quota of 16 MB .*disk_mb") as e:
        sb.write_file("host.bin", b"x" * (20 * MB))
    assert e.value.errno == errno.ENOSPC
    result = write_file("host.bin", "x" * (20 * MB), sandbox=sb)
    assert not result.ok and "disk_mb" in result.output

    # freeing space makes it usable again: a quota, not a broken sandbox
    r = sb.exec("rm -f big /tmp/more host.bin && head -c 1M /dev/zero > small && echo ok")
    assert r.ok and r.stdout == "ok\n", r.stderr
    assert "disk quota" not in sb.exec("false").stderr  # no note on a failure with room left


def test_the_quota_comes_with_close(make_sandbox):
    sb = make_sandbox(disk_mb=16)
    mount = sb.disk.path
    assert os.path.ismount(mount)
    sb.close()
    assert not mount.exists()
    assert str(mount) not in Path("/proc/mounts").read_text()


def test_no_quota_when_disk_mb_is_none(make_sandbox):
    sb = make_sandbox(disk_mb=None)
    assert sb.disk is None
    assert sb.exec("head -c 20M /dev/zero > big && echo ok").stdout == "ok\n"


# Makes a sandbox of backend argv[1], says where its things are, then runs a long command.
_OWNER = r"""
import sys
from knowlyr.sandbox import SandboxConfig, create_sandbox
sb = create_sandbox(SandboxConfig(backend=sys.argv[1], disk_mb=16))
sb.exec("echo x > /tmp/x")
if sys.argv[1] == "container":
    sb.snapshot()
    sb._standby["thread"].join()  # the warm standby container exists too
    print(sb.name, sb._disk_dir, flush=True)
else:
    print(sb.root, *sb._cgroup.dirs, flush=True)
sb.exec(f"sleep 600 # {sys.argv[2]}", timeout=900)
"""


def _leftovers(backend: str, things: list[str], marker: str) -> list[str]:
    if backend == "container":
        from knowlyr.sandbox.container import _client

        api = _client().api
        name, disk = things
        found = api.containers(all=True, filters={"label": f"knowlyr.sandbox={name}"})
        left = [(c.get("Names") or [c["Id"]])[0] for c in found]
        tags = [t for i in api.images() for t in i.get("RepoTags") or ()]
        left += [t for t in tags if f"knowlyr-snapshot/{name}:" in t]
        paths = [disk]
    else:
        paths = things
        left = []
        for p in Path("/proc").iterdir():  # the sandbox's processes
            try:
                if p.name.isdigit() and marker.encode() in (p / "cmdline").read_bytes():
                    left.append(f"process {p.name}")
            except OSError:
                pass
    left += [p for p in paths if Path(p).exists()]
    left += [line for line in Path("/proc/mounts").read_text().splitlines() if paths[0] in line]
    return left


def test_a_killed_owners_sandbox_is_removed_within_seconds(backend):
    marker = f"knowlyr-owner-{uuid.uuid4().hex}"
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, backend, marker],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    things = owner.stdout.readline().split()
    assert things, f"the owner process failed (exit {owner.poll()})"
    time.sleep(0.3)  # the long command is running
    assert _leftovers(backend, things, marker)  # there while the owner lives
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    end = time.monotonic() + 10  # nobody closes it, no sandbox starts, no gc
    while (left := _leftovers(backend, things, marker)) and time.monotonic() < end:
        time.sleep(0.1)
    assert left == []

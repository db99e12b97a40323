"""Sandboxes whose owner died are reaped (issue #17): by ``knowlyr sandbox gc`` and by the
next sandbox start when the sandbox's guard died with its owner (the guard's own reaping is
tested in test_owner_death.py); sandboxes of live owners are never touched."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.sandbox import SandboxConfig
from knowlyr.sandbox.local import LocalSandbox, local_available, reap_local

REPO = Path(__file__).parents[2]
runner = CliRunner()

# Makes a local sandbox under argv[1], says its guard's pid and where it is, then runs a long
# command in it.
_LOCAL_OWNER = r"""
import sys
from knowlyr.sandbox.local import LocalSandbox
sb = LocalSandbox(root=sys.argv[1])
sb.exec("true")  # the spawner and the cgroup exist from here on
print(sb._guard.pid, sb.root, *sb._cgroup.dirs, flush=True)
sb.exec(f"python3 -c 'import time; time.sleep(600)' {sys.argv[2]}", timeout=900)
"""

# Makes a container sandbox with a snapshot, says its name, then runs a long command in it.
_CONTAINER_OWNER = r"""
import sys
from knowlyr.sandbox import SandboxConfig
from knowlyr.sandbox.container import ContainerSandbox
sb = ContainerSandbox(SandboxConfig(backend="container"))
sb.snapshot()
sb._standby["thread"].join()  # the warm standby container exists too
print(sb._guard.pid, sb.name, flush=True)
sb.exec("sleep 600", timeout=900)
"""


def _owner(code: str, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    line = proc.stdout.readline().split()
    assert line, f"the owner process failed (exit {proc.poll()})"
    return proc, line


def _kill(proc: subprocess.Popen[str], guard: str | None = None) -> None:
    """``kill -9`` the owner (and first its guard, which would otherwise reap at once)."""
    if guard is not None:
        os.kill(int(guard), signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _processes_with(marker: str) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    found.append(int(p.name))
            except OSError:
                pass
    return found


def _gone_soon(paths: list[Path], marker: str, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and (_processes_with(marker) or any(p.exists() for p in paths)):
        time.sleep(0.05)
    assert not [p for p in paths if p.exists()], "left behind"
    assert not _processes_with(marker), "sandbox processes left behind"


@pytest.fixture
def sbroot(local_ok) -> Path:
    """A private directory for local sandboxes (pytest's tmp_path is 0700: the sandbox uid
    could not reach its workspace there)."""
    d = Path(tempfile.mkdtemp(prefix="knowlyr-test-reap-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def local_ok() -> None:
    reason = local_available()
    if reason:
        pytest.fail(f"the local backend cannot run: {reason}")


@pytest.mark.parametrize("how", ["gc", "next start"])
def test_a_killed_owners_local_sandbox_is_reaped(sbroot, how):
    marker = f"knowlyr-reap-{uuid.uuid4().hex}"
    owner, (guard, root, *cgroups) = _owner(_LOCAL_OWNER, str(sbroot), marker)
    time.sleep(0.2)  # the long command is running
    assert Path(root).is_dir() and all(Path(c).is_dir() for c in cgroups)
    _kill(owner, guard)
    assert Path(root).is_dir()  # nobody closed it
    if how == "gc":
        r = runner.invoke(app, ["sandbox", "gc", "--backend", "local", "--root", str(sbroot)])
        assert r.exit_code == 0, r.output
        assert "removed 1" in r.output and root in r.output
    else:
        LocalSandbox(root=str(sbroot)).close()
    _gone_soon([Path(root), *map(Path, cgroups)], marker)
    assert list(sbroot.iterdir()) == []


def test_local_sandboxes_of_live_owners_are_left_alone(sbroot):
    marker = f"knowlyr-reap-{uuid.uuid4().hex}"
    owner, (guard, root, *cgroups) = _owner(_LOCAL_OWNER, str(sbroot), marker)
    try:
        with LocalSandbox(root=str(sbroot)) as mine:  # a start reaps nothing alive
            assert reap_local(sbroot) == []
            r = runner.invoke(app, ["sandbox", "gc", "--backend", "local", "--root", str(sbroot)])
            assert r.exit_code == 0 and "removed 0" in r.output
            assert mine.exec("echo still here").stdout == "still here\n"
            assert Path(root).is_dir() and all(Path(c).is_dir() for c in cgroups)
            assert _processes_with(marker)
    finally:
        _kill(owner, guard)
    assert [p.name for p in reap_local(sbroot)] == [Path(root).name]


def _containers(client, name: str) -> list[str]:
    # the listing's summaries: the SDK's containers.list inspects each one, and fails when a
    # guard or a sandbox start removes it in between
    found = client.api.containers(all=True, filters={"label": f"knowlyr.sandbox={name}"})
    return [(c.get("Names") or [c["Id"]])[0] for c in found]


def _snapshots(client, name: str) -> list[str]:
    tags = [t for i in client.api.images() for t in i.get("RepoTags") or ()]
    return [t for t in tags if f"knowlyr-snapshot/{name}:" in t]


# Every container sandbox start on the engine reaps dead owners too, and the suite runs other
# container tests beside these ones: a dead owner's sandbox may go to one of those first.
_ATTEMPTS = 5


def _reported(output: str, name: str) -> list[str]:
    """The lines of ``knowlyr sandbox gc``'s output naming the sandbox ``name``'s things."""
    return [line.strip() for line in output.splitlines() if name in line]


@pytest.mark.parametrize("how", ["gc", "next start"])
def test_a_killed_owners_containers_are_reaped(docker_host, how):
    from knowlyr.sandbox.container import ContainerSandbox, _client

    client = _client()
    for _ in range(_ATTEMPTS):
        owner, (guard, name) = _owner(_CONTAINER_OWNER)
        # sandbox, warm standby, snapshot; nothing reaps them while the owner lives
        assert len(_containers(client, name)) == 2 and len(_snapshots(client, name)) == 1
        _kill(owner, guard)
        if how == "gc":
            r = runner.invoke(app, ["sandbox", "gc", "--backend", "container"])
            assert r.exit_code == 0, r.output
        else:
            ContainerSandbox(SandboxConfig(backend="container")).close()
        assert _containers(client, name) == [] and _snapshots(client, name) == []
        if how != "gc" or len(_reported(r.output, name)) == 3:
            return  # gc itself removed all three
    pytest.fail(f"another sandbox start reaped the killed owner before gc, {_ATTEMPTS} times")


def test_containers_of_live_owners_are_left_alone(docker_host):
    from knowlyr.sandbox.container import ContainerSandbox, _client, reap_containers

    client = _client()
    owner, (guard, name) = _owner(_CONTAINER_OWNER)
    try:
        with ContainerSandbox(SandboxConfig(backend="container")) as mine:
            # (what other tests' dead owners left may be reaped here: not these two's)
            assert not [x for x in reap_containers() if name in x or mine.name in x]
            assert mine.exec("echo still here").stdout == "still here\n"
            assert len(_containers(client, name)) == 2 and len(_snapshots(client, name)) == 1
            assert len(_containers(client, mine.name)) == 1
    finally:
        _kill(owner, guard)
    # dead now: reaped (here, or by another test's sandbox start just before)
    reap_containers()
    assert _containers(client, name) == [] and _snapshots(client, name) == []

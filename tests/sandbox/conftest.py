"""Sandbox fixtures: a Docker-API engine for the session and a sandbox factory per backend.

When ``DOCKER_HOST`` is unset and Podman is installed, the session starts
``podman system service`` on a private socket and points ``DOCKER_HOST`` at it. Container
tests fail loudly when Podman is installed but its API service will not answer, and are
skipped (with the reason) only where Podman is not installed at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from knowlyr.sandbox import Sandbox, SandboxConfig, backend_available, create_sandbox

BACKENDS = ["local", "container"]
IMAGE = SandboxConfig().image


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """DOCKER_HOST of a running Docker-API engine (a Podman service started for the session)."""
    existing = os.environ.get("DOCKER_HOST")
    proc = None
    tmp = None
    if existing:
        host = existing
    else:
        if shutil.which("podman") is None:
            pytest.skip(
                "podman is not installed: run scripts/setup-system.sh (as root) to install it"
            )
        tmp = tempfile.mkdtemp(prefix="knowlyr-podman-")
        sock = Path(tmp) / "podman.sock"
        host = f"unix://{sock}"
        log = open(Path(tmp) / "service.log", "wb")  # noqa: SIM115 - kept open for the session
        proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", host],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.environ["DOCKER_HOST"] = host
    reason = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reason = backend_available("container")
        if reason is None:
            break
        time.sleep(0.2)
    if reason is not None:
        detail = ""
        if tmp:
            detail = (Path(tmp) / "service.log").read_text(errors="replace")[-2000:]
        _stop(proc)
        pytest.fail(f"the Docker-API engine at {host} does not answer: {reason}\n{detail}")
    from knowlyr.sandbox.container import container_available

    missing = container_available(IMAGE)
    if missing:
        _stop(proc)
        pytest.fail(missing)
    try:
        yield host
    finally:
        _stop(proc)
        if not existing:
            os.environ.pop("DOCKER_HOST", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn; the container one starts the session's engine."""
    if request.param == "container":
        request.getfixturevalue("docker_host")
    else:
        reason = backend_available("local")
        if reason:
            pytest.fail(f"the local backend cannot run: {reason}")
    return request.param


@pytest.fixture
def make_sandbox(backend: str) -> Iterator[Callable[..., Sandbox]]:
    """``make_sandbox(files=..., **config)``: sandboxes of the current backend, closed afterwards."""
    made: list[Sandbox] = []

    def make(files: dict[str, str | bytes] | None = None, **config: object) -> Sandbox:
        sb = create_sandbox(SandboxConfig(backend=backend, **config), files=files)  # type: ignore[arg-type]
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()

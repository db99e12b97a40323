"""Sandbox fixtures: a Docker-API engine for the session and a sandbox factory per backend.

When ``DOCKER_HOST`` is unset and Podman is installed, the session starts
``podman system service`` on a private socket and points ``DOCKER_HOST`` at it. Container
tests fail loudly when Podman is installed but its API service will not answer, and are
skipped (with the reason) only where Podman is not installed at all.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import pytest

from knowlyr.errors import BackendUnavailableError
from knowlyr.sandbox import Sandbox, SandboxConfig, backend_available, create_sandbox
from knowlyr.sandbox.engine import podman_service

BACKENDS = ["local", "container"]
IMAGE = SandboxConfig().image


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """DOCKER_HOST of a running Docker-API engine (a Podman service started for the session)."""
    existing = os.environ.get("DOCKER_HOST")
    if existing:
        reason = backend_available("container")
        if reason:
            pytest.fail(f"DOCKER_HOST={existing} is set but unusable: {reason}")
        _check_image()
        yield existing
        return
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: run scripts/setup-system.sh (as root) to install it")
    service = podman_service()
    try:
        host = service.__enter__()
    except BackendUnavailableError as e:  # installed but broken: that is a failure, not a skip
        pytest.fail(str(e))
    os.environ["DOCKER_HOST"] = host
    try:
        _check_image()
        yield host
    finally:
        os.environ.pop("DOCKER_HOST", None)
        service.__exit__(None, None, None)


def _check_image() -> None:
    from knowlyr.sandbox.container import container_available

    missing = container_available(IMAGE)
    if missing:
        pytest.fail(missing)


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

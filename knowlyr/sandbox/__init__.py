"""Sandboxes where agents' commands run, and the coding tools that act on them.

Two backends implement :class:`Sandbox`: ``local`` (default; bubblewrap namespaces as an
unprivileged uid) and ``container`` (the ``docker`` SDK against any Docker-API engine at
``DOCKER_HOST``: Docker, or Podman's API service). :func:`create_sandbox` picks one from
:class:`SandboxConfig`.

Example:
    >>> from knowlyr.sandbox import SandboxConfig, coding_toolbox, create_sandbox
    >>> with create_sandbox(SandboxConfig(timeout_s=10), files={"hello.py": "print('hi')"}) as sb:  # doctest: +SKIP
    ...     sb.exec("python3 hello.py").stdout
    ...     coding_toolbox().call("read_file", {"path": "hello.py"}, sandbox=sb).output
    'hi\\n'
    "     1\\tprint('hi')\\n"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from knowlyr.sandbox.base import ExecResult, Sandbox, SandboxConfig
from knowlyr.sandbox.tools import coding_toolbox

if TYPE_CHECKING:
    from knowlyr.sandbox.container import ContainerSandbox
    from knowlyr.sandbox.local import LocalSandbox

__all__ = [
    "ContainerSandbox",
    "ExecResult",
    "LocalSandbox",
    "Sandbox",
    "SandboxConfig",
    "backend_available",
    "coding_toolbox",
    "create_sandbox",
    "podman_service",
]


def create_sandbox(
    config: SandboxConfig | None = None, *, files: dict[str, str | bytes] | None = None
) -> Sandbox:
    """A new sandbox of ``config.backend`` with ``files`` written into its workspace.

    Args:
        config: backend and limits (default: local backend, default limits).
        files: initial workspace files ``{relative path: text or bytes}``.

    Raises:
        BackendUnavailableError: the backend is not installed or not reachable; the message
            gives the command that fixes it.
    """
    config = config or SandboxConfig()
    if config.backend == "container":
        from knowlyr.sandbox.container import ContainerSandbox

        return ContainerSandbox(config, files=files)
    from knowlyr.sandbox.local import LocalSandbox

    return LocalSandbox(config, files=files)


def backend_available(backend: str = "local") -> str | None:
    """``None`` when ``backend`` can run here, else the reason and the fix (never raises)."""
    if backend == "container":
        from knowlyr.sandbox.container import container_available

        return container_available()
    if backend == "local":
        from knowlyr.sandbox.local import local_available

        return local_available()
    return f"unknown sandbox backend {backend!r}; use 'local' or 'container'"


def __getattr__(name: str):  # the backends load lazily (the container one imports docker)
    if name == "LocalSandbox":
        from knowlyr.sandbox.local import LocalSandbox

        return LocalSandbox
    if name == "podman_service":
        from knowlyr.sandbox.engine import podman_service

        return podman_service
    if name == "ContainerSandbox":
        from knowlyr.sandbox.container import ContainerSandbox

        return ContainerSandbox
    raise AttributeError(f"module 'knowlyr.sandbox' has no attribute {name!r}")

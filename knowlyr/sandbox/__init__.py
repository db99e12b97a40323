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

import os
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
    "reap_orphans",
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


def reap_orphans(
    backend: str = "all", *, root: str | os.PathLike[str] | None = None
) -> dict[str, list[str]]:
    """Remove the sandboxes whose owner process died without closing them (``kill -9``...).

    Local sandboxes are found by the lock their owner holds (directories and cgroups under
    ``root``), containers and snapshot images by their ``knowlyr.sandbox`` and owner labels.
    Sandboxes of live owners are never touched. Both backends also do this on every start.

    Args:
        backend: ``"local"``, ``"container"`` or ``"all"`` (a container engine that is not
            reachable is then skipped).
        root: the local backend's sandbox directory (default: ``$KNOWLYR_SANDBOX_ROOT`` or
            the system temp dir).

    Returns:
        ``{backend: [what was removed]}``.

    Raises:
        BackendUnavailableError: ``backend="container"`` and no engine answers.
    """
    if backend not in ("local", "container", "all"):
        raise ValueError(f"backend must be 'local', 'container' or 'all', got {backend!r}")
    out: dict[str, list[str]] = {}
    if backend in ("local", "all"):
        from knowlyr.sandbox.local import reap_local

        out["local"] = [str(p) for p in reap_local(root)]
    if backend in ("container", "all"):
        from knowlyr.sandbox.container import container_available, reap_containers

        if backend == "container" or container_available() is None:
            out["container"] = reap_containers()
    return out


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

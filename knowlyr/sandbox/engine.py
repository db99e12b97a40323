"""Start a Docker-API engine for the container backend: Podman's API service on a private socket.

Example:
    >>> from knowlyr.sandbox import SandboxConfig, create_sandbox
    >>> with podman_service() as host:  # doctest: +SKIP
    ...     os.environ["DOCKER_HOST"] = host
    ...     with create_sandbox(SandboxConfig(backend="container")) as sb:
    ...         sb.exec("python3 --version").stdout
    'Python 3.11.2\\n'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from knowlyr.errors import BackendUnavailableError

__all__ = ["podman_service"]

INSTALL = "apt-get install -y podman runc crun fuse-overlayfs slirp4netns uidmap catatonit (or run scripts/setup-system.sh)"


@contextlib.contextmanager
def podman_service(*, timeout: float = 30.0) -> Iterator[str]:
    """Run ``podman system service`` on a fresh socket; yields its ``DOCKER_HOST`` URL.

    The service stops when the block ends. It does not change ``os.environ``.

    Args:
        timeout: seconds to wait for the API to answer.

    Raises:
        BackendUnavailableError: Podman is not installed, or its service does not answer
            within ``timeout`` (the message carries the end of its log).
    """
    if shutil.which("podman") is None:
        raise BackendUnavailableError(f"podman is not installed: {INSTALL}")
    tmp = Path(tempfile.mkdtemp(prefix="knowlyr-podman-"))
    sock = tmp / "podman.sock"
    host = f"unix://{sock}"
    log_path = tmp / "service.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", host],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=tmp,  # conmon drops an `oom` marker in its working directory when a container OOMs
        )
    try:
        _wait_until_ready(host, sock, proc, timeout, log_path)
        yield host
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_until_ready(
    host: str, sock: Path, proc: subprocess.Popen[bytes], timeout: float, log: Path
) -> None:
    import http.client
    import socket as _socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if sock.exists():
            try:
                s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                s.settimeout(2)
                s.connect(os.fspath(sock))
                conn = http.client.HTTPConnection("localhost")
                conn.sock = s
                conn.request("GET", "/_ping")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    raise BackendUnavailableError(
        f"podman system service at {host} did not answer within {timeout:g}s "
        f"(exit code {proc.poll()}); its log ends with:\n{tail}"
    )

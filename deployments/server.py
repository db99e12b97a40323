"""Start a real Prefect server on loopback for CI, screenshots and benchmarks.

``make server`` is the way to run one by hand; this helper starts a throwaway one on a free
port with its own ``PREFECT_HOME`` (database, results), waits until ``/api/health`` answers,
and stops it (and its children) on exit.

Example:
    >>> with local_server(tmp_path / "prefect") as server:  # doctest: +SKIP
    ...     subprocess.run(["prefect", "work-pool", "ls"], env=server.env, check=True)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REPO_ROOT", "LocalServer", "free_port", "local_server", "prefect_bin"]

REPO_ROOT = Path(__file__).resolve().parents[1]

# Settings from the calling process that must not leak into a fresh server's environment.
_DROP = ("PREFECT_API_URL", "PREFECT_HOME", "PREFECT_PROFILES_PATH", "PREFECT_SERVER_DATABASE")


def prefect_bin() -> str:
    """The ``prefect`` executable beside the running interpreter."""
    candidate = Path(sys.executable).with_name("prefect")
    return str(candidate) if candidate.exists() else "prefect"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalServer:
    """A running server: its API URL, UI URL and the environment that points a CLI at it."""

    api_url: str
    ui_url: str
    home: Path
    env: dict[str, str]
    log: Path

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        """Run ``prefect ARGS`` against this server from the repository root; returns stdout."""
        proc = subprocess.run(
            [prefect_bin(), *args],
            env=self.env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"`prefect {' '.join(args)}` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout + proc.stderr


def server_env(home: Path, api_url: str) -> dict[str, str]:
    """The calling environment with a fresh ``PREFECT_HOME`` and ``PREFECT_API_URL``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP)}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api_url,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_UI_ENABLED="true",
        KNOWLYR_CHECKOUT=str(REPO_ROOT),
    )
    return env


@contextmanager
def local_server(
    home: Path, *, port: int | None = None, timeout: float = 90
) -> Iterator[LocalServer]:
    """Start ``prefect server start`` on 127.0.0.1 with ``PREFECT_HOME=home``; stop it on exit."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = server_env(home, api_url)
    log = home / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [prefect_bin(), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"prefect server exited {proc.returncode}: {log.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prefect server not healthy after {timeout:.0f} s; see {log}")
            time.sleep(0.5)
        yield LocalServer(
            api_url=api_url, ui_url=f"http://127.0.0.1:{port}", home=home, env=env, log=log
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

"""Start ``knowlyr env serve`` as a real process on a loopback port, and stop it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EnvServer:
    """A running ``knowlyr env serve`` process."""

    env_id: str
    port: int
    proc: subprocess.Popen
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/{self.env_id}"

    def token(self) -> str | None:
        """The token the server printed at start (None if it printed none)."""
        m = re.search(r"^token: (\S+)", self.log.read_text(), re.MULTILINE)
        return m[1] if m else None

    def health(self) -> dict:
        return httpx.get(f"{self.base}/health", timeout=10).json()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye to clients."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(
    env_id: str,
    log_dir: Path,
    *args: str,
    port: int | None = None,
    wait: bool = True,
    own_token: bool = False,
) -> EnvServer:
    """``knowlyr env serve ENV_ID ARGS`` on ``port`` (a free one by default), healthy.

    Without ``--token`` in ``args`` it runs with ``--no-token``; ``own_token=True`` starts it
    as a user would, with the token it generates and prints (:meth:`EnvServer.token`).
    """
    port = port or free_port()
    log = log_dir / f"env-server-{port}-{time.monotonic_ns()}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KNOWLYR_ENV_TOKEN", None)  # the server's token is what args say, never the caller's
    if "--token" not in args and not own_token:
        args = (*args, "--no-token")
    cmd = [sys.executable, "-m", "knowlyr.cli", "env", "serve", env_id, "--port", str(port), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    server = EnvServer(env_id, port, proc, log)
    if wait:
        wait_healthy(server)
    return server


def wait_healthy(server: EnvServer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"env server exited with {server.proc.returncode}:\n{server.log.read_text()[-3000:]}"
            )
        try:
            if httpx.get(f"{server.base}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"env server not healthy in {timeout} s:\n{server.log.read_text()[-3000:]}")

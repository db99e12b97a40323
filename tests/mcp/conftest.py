"""One MCP server per transport for tests/mcp, driven through the SDK's own client.

- ``stdio``: ``knowlyr mcp serve`` as a subprocess of the SDK's stdio client;
- ``http``: ``knowlyr mcp serve --transport http`` as a real process on a free loopback port,
  reached with the SDK's streamable HTTP client.

Both serve a fresh root holding copies of the real agent logs in tests/data/fixtures, and both
use one temporary Prefect API (``prefect_test_harness``) for run_pipeline / pipeline_status.
Each session runs its client in a blocking portal (an event loop on a thread), so the tests
are plain functions that call ``session.ok(tool, args)`` / ``session.error(tool, args)``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'knowlyr-gym[mcp]'")

from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from knowlyr.sandbox import backend_available

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """A temporary Prefect API for the session (the servers' PREFECT_API_URL)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield PREFECT_API_URL.value()


@pytest.fixture(scope="package")
def root(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    """The servers' only allowed root: copies of the fixture logs, and a symlink leading out."""
    reason = backend_available("local")
    if reason:
        pytest.fail(f"the local sandbox backend cannot run: {reason}")
    base = tmp_path_factory.mktemp("mcp")
    r = base / "root"
    for name in ("swe_agent", "openhands", "knowlyr"):
        shutil.copytree(fixtures_dir / name, r / "logs" / name)
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text('{"not": "yours"}\n')
    (r / "escape").symlink_to(outside)  # inside the root by name, outside by target
    return r


def sandbox_root() -> Path:
    """A directory for the servers' sandboxes that the sandbox user can traverse (pytest's
    own temp folders are private to their owner)."""
    d = Path(tempfile.mkdtemp(prefix="knowlyr-mcp-test-"))
    d.chmod(0o711)
    return d


def server_env(prefect_api: str, tmp: Path, sandboxes: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PREFECT_API_URL": prefect_api,
        "PREFECT_HOME": str(tmp / "prefect-home"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "KNOWLYR_SANDBOX_ROOT": str(sandboxes),
    }


def serve_args(root: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "knowlyr.cli",
        "mcp",
        "serve",
        "--root",
        str(root),
        "--max-argument-mb",
        "5",
        "--max-sandboxes",
        "64",
        *extra,
    ]  # fmt: skip  (a later --max-sandboxes wins)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"the http server exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"the http server did not listen on {port} within 60 s:\n{log.read_text()[-3000:]}")


class Session:
    """One client session, used synchronously from the tests."""

    def __init__(self, portal: BlockingPortal, client: Client, transport: str, url: str | None):
        self.portal, self.client, self.transport, self.url = portal, client, transport, url

    def call(
        self, name: str, args: dict[str, Any] | None = None, *, progress: list | None = None
    ) -> CallToolResult:
        async def record(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))  # type: ignore[union-attr]

        cb = record if progress is not None else None
        return self.portal.call(
            lambda: self.client.call_tool(name, args or {}, progress_callback=cb)
        )

    def ok(self, name: str, args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        r = self.call(name, args, **kw)
        text = r.content[0].text if r.content else ""  # type: ignore[union-attr]
        assert not r.is_error, f"{name} failed: {text}"
        return json.loads(text)

    def error(self, name: str, args: dict[str, Any] | None = None) -> str:
        r = self.call(name, args)
        assert r.is_error, f"{name} did not fail: {r.content}"
        return r.content[0].text  # type: ignore[union-attr]


@pytest.fixture(scope="package", params=["stdio", "http"])
def session(request: pytest.FixtureRequest, root: Path, prefect_api: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:  # fmt: skip
    """A client session with a server over each transport in turn (one server each for the package)."""
    tmp = tmp_path_factory.mktemp(f"server-{request.param}")
    sandboxes = sandbox_root()
    env = server_env(prefect_api, tmp, sandboxes)
    proc = None
    url = None
    if request.param == "stdio":
        target: Any = StdioServerParameters(
            command=sys.executable, args=serve_args(root), env=env, cwd=str(REPO)
        )
    else:
        port = free_port()
        log = tmp / "server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *serve_args(root, "--transport", "http", "--port", str(port))],
                env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_listening(proc, port, log)
        url = target = f"http://127.0.0.1:{port}/mcp"
    with start_blocking_portal() as portal:
        client = Client(target, read_timeout_seconds=120)
        with portal.wrap_async_context_manager(client):
            yield Session(portal, client, request.param, url)
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the http server did not stop within 30 s of SIGTERM")
    leftovers = [p.name for p in sandboxes.glob("knowlyr-sb-*")]
    shutil.rmtree(sandboxes, ignore_errors=True)
    assert not leftovers, f"sandboxes left after the server stopped: {leftovers}"

"""The viewer's tests: the demo store (real logs + scored attempts) and the app on loopback."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.view.demo_store import DemoStore, build_demo_store


def tree(root: str) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: relative path -> (size, mtime in ns)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="session")
def demo(tmp_path_factory, fixtures_dir: Path) -> DemoStore:
    return build_demo_store(tmp_path_factory.mktemp("view") / "store", fixtures_dir)


@pytest.fixture(scope="session")
def demo_files(demo: DemoStore) -> dict[str, tuple[int, int]]:
    """The store's files before any page was served."""
    return tree(demo.store.root)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A uvicorn server in a thread on a free loopback port."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the viewer did not start")
            time.sleep(0.02)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        return self.client

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def http(demo: DemoStore, demo_files) -> httpx.Client:
    """An HTTP client of the viewer serving the demo store (after its files were listed)."""
    from knowlyr.view import create_app

    with Served(create_app(demo.store.url)) as client:
        yield client

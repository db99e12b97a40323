"""`make server PORT=...` serves the API and a UI that knows where its API is, on that port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

from deployments.server import REPO_ROOT, free_port


def _make(*args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["make", "-n", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout


def test_every_orchestration_target_takes_the_port():
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    server = _make("server", "PORT=4311", env=env)
    assert "--host 127.0.0.1 --port 4311" in server
    assert "PREFECT_UI_API_URL=http://127.0.0.1:4311/api" in server
    assert "--port 4200" in _make("server", env=env)  # the default


def test_the_ui_on_another_port_is_told_its_api_url(tmp_path):
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(tmp_path),
        # what a shell holding the default server's URL would pass on: the UI must not use it
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
    }
    proc = subprocess.Popen(
        ["make", "server", f"PORT={port}"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, "make server exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui-settings", timeout=2) as r:
                    settings = json.loads(r.read())
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer within 180 s"
                time.sleep(1)
        assert settings["api_url"] == f"http://127.0.0.1:{port}/api", settings
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)

"""``knowlyr view`` answers only requests naming its own address: a DNS-rebinding page
(``Host: evil.example``) gets 421 before the store is read. Real HTTP on loopback."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest

from tests.view.conftest import Served


@pytest.mark.parametrize("path", ["/", "/t/0", "/blob/00", "/no-such-page"])
def test_a_dns_rebinding_host_gets_421_on_every_page(http, demo, path):
    r = http.get(path, headers={"host": "evil.example"})
    assert r.status_code == 421
    assert "evil.example" in r.text and "is not this server" in r.text
    assert demo.fixed.id not in r.text  # nothing of the store


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_loopback_names_are_answered(http, demo, host):
    port = http.base_url.port
    r = http.get("/", params={"task": "calc-add"}, headers={"host": f"{host}:{port}"})
    assert r.status_code == 200 and demo.fixed.id in r.text


def test_a_wildcard_bind_answers_addresses_and_allowed_names(demo):
    from knowlyr.view import create_app

    app = create_app(demo.store.url, host="0.0.0.0", allowed_hosts=["viewer.internal"])
    with Served(app) as client:
        for host in ("viewer.internal", "VIEWER.internal:8321", "10.1.2.3:8321", "localhost"):
            assert client.get("/", headers={"host": host}).status_code == 200, host
        for host in ("evil.example", "10.1.2.3.evil.example", "viewer.internal.evil.example"):
            assert client.get("/", headers={"host": host}).status_code == 421, host


def test_the_cli_passes_its_bind_address_and_allowed_hosts(demo):
    cmd = ["view", "--store", demo.store.url, "--port", "0", "--allowed-host", "viewer.internal"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "knowlyr.cli", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"knowlyr view: http://127\.0\.0\.1:(\d+)/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        base = f"http://127.0.0.1:{m[1]}"
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"{base}/", headers={"host": "evil.example"}, timeout=5)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, "no server"
                time.sleep(0.1)
        assert r.status_code == 421
        assert httpx.get(f"{base}/", headers={"host": "viewer.internal"}).status_code == 200
        assert httpx.get(f"{base}/").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)

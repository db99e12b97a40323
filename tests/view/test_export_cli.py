"""``knowlyr view export`` (pages as files with working relative links) and ``knowlyr view``
(a real server process on loopback)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.view.render import StaticLinks

_REF = re.compile(r'(?:href|src)="([^"]*)"')


def run_cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_export_writes_pages_that_link_to_each_other(demo, tmp_path):
    out = tmp_path / "pages"
    ids = [demo.fixed.id[:10], demo.rewrite.id, demo.gave_up.id, demo.browser.id]
    res = run_cli("view", "--store", demo.store.url, "export", *ids, "-o", str(out))
    assert res.exit_code == 0, res.output
    assert "wrote 4 trajectory pages and 3 pair pages" in res.output
    calc = [demo.fixed, demo.rewrite, demo.gave_up]
    pages = {StaticLinks.trajectory_file(t.id) for t in [*calc, demo.browser]}
    pairs = {p.name for p in out.glob("pair-*.html")}
    assert pages <= {p.name for p in out.glob("*.html")} and len(pairs) == 3
    assert (out / "blobs" / f"{demo.screenshot}.png").read_bytes() == demo.store.get_blob(
        demo.screenshot
    )
    # every link of every page is relative and names a file of the export (or is text), or
    # an anchor of the page itself (the step outline)
    for page in out.glob("*.html"):
        body = page.read_text()
        for ref in _REF.findall(body):
            if ref.startswith("#"):
                assert f'id="{ref[1:]}"' in body, (page.name, ref)
                continue
            assert not ref.startswith(("/", "http")), (page.name, ref)
            assert (out / ref).is_file(), (page.name, ref)
    fixed = (out / StaticLinks.trajectory_file(demo.fixed.id)).read_text()
    assert '<div class="add">+    return a + b</div>' in fixed
    assert "Replaces the wrong operator in add()" in fixed
    # its stored pairs link to the exported pair pages, and so do the side-by-side links
    assert fixed.count('href="pair-') >= 4
    browser = (out / StaticLinks.trajectory_file(demo.browser.id)).read_text()
    assert f'src="blobs/{demo.screenshot}.png"' in browser
    index = (out / "index.html").read_text()
    assert all(f'href="{p}"' in index for p in pages)


def test_export_of_a_pair_argument(demo, tmp_path):
    out = tmp_path / "pair"
    res = run_cli(
        "view", "export", f"{demo.rewrite.id}:{demo.fixed.id}", "-o", str(out), "-s", demo.store.url
    )
    assert res.exit_code == 0, res.output
    pair = out / StaticLinks.pair_file(demo.fixed.id, demo.rewrite.id)  # chosen first
    assert pair.is_file() and "chosen succeeded, rejected failed" in pair.read_text()
    assert sorted(p.name for p in out.glob("t-*.html")) == sorted(
        StaticLinks.trajectory_file(t.id) for t in (demo.fixed, demo.rewrite)
    )


def test_export_errors_name_the_problem(demo, tmp_path):
    res = run_cli("view", "export", "0" * 64, "-o", str(tmp_path / "x"), "-s", demo.store.url)
    assert res.exit_code == 1 and "no trajectory 0000000000000000" in res.output
    res = run_cli("view", "export", "abc", "-o", str(tmp_path / "x"), "-s", demo.store.url)
    assert res.exit_code == 1 and "too short" in res.output
    res = run_cli("view", "export", "a:b:c", "-o", str(tmp_path / "x"), "-s", demo.store.url)
    assert res.exit_code == 1 and "expected ID or ID:ID" in res.output
    res = run_cli("view", "export", "a" * 64, "-o", str(tmp_path / "x"), "-s", str(tmp_path / "no"))
    assert res.exit_code == 1 and f"no store at {tmp_path / 'no'}" in res.output
    assert not (tmp_path / "no").exists()


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} write them) listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, _, p = local.rpartition(":")
            if int(p, 16) == port and state == "0A":
                found.append(addr)
    return found


def test_knowlyr_view_serves_on_loopback_by_default(demo):
    proc = subprocess.Popen(
        [sys.executable, "-m", "knowlyr.cli", "view", "--store", demo.store.url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"knowlyr view: http://127\.0\.0\.1:(\d+)/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        port = int(m[1])
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/?task=calc-add", timeout=5)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, "no server"
                time.sleep(0.1)
        if r.status_code != 200:  # the server's own log says why
            proc.terminate()
            pytest.fail(
                f"{r.status_code}: {r.text[:500]}\n{proc.communicate(timeout=10)[1][-4000:]}"
            )
        assert demo.fixed.id in r.text
        assert _listening(port) == ["0100007F"]  # 127.0.0.1 only
    finally:
        proc.terminate()
        proc.wait(timeout=10)

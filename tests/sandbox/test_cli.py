"""``knowlyr sandbox`` commands."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from knowlyr.cli import app

runner = CliRunner()


def test_sandbox_run_passes_output_and_exit_code():
    r = runner.invoke(app, ["sandbox", "run", "echo hi; exit 3"])
    assert r.exit_code == 3 and "hi" in r.output


def test_sandbox_check_local():
    r = runner.invoke(app, ["sandbox", "check", "--backend", "local"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("local") and "ok" in r.output and "Python 3" in r.output


def test_sandbox_check_reports_an_unreachable_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    r = runner.invoke(app, ["sandbox", "check", "--backend", "container"])
    assert r.exit_code == 1 and "FAIL" in r.output and "podman system service" in r.output


def test_sandbox_tools_prints_schemas():
    r = runner.invoke(app, ["sandbox", "tools"])
    names = [t["function"]["name"] for t in json.loads(r.output)]
    assert names == ["read_file", "write_file", "edit_file", "bash", "grep", "git", "submit"]

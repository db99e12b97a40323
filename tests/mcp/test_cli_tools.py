"""``knowlyr mcp tools``: every tool with its whole description, wrapped, never cut."""

from __future__ import annotations

import inspect

from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.mcp import TOOLS


def test_mcp_tools_prints_every_description_whole():
    res = CliRunner().invoke(app, ["mcp", "tools", "--width", "80"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    for name, spec in TOOLS.items():
        doc = " ".join((inspect.getdoc(spec.impl) or "").split())
        assert doc.endswith((".", ")")), f"{name}: its docstring does not end a sentence"
        assert f"{name} {doc}" in flat, f"{name}'s description is cut or missing"
    lines = res.output.splitlines()
    assert max(map(len, lines)) <= 80
    assert len(lines) > len(TOOLS)  # the long ones wrap onto more lines

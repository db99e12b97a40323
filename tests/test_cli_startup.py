"""``knowlyr --help`` starts fast: it imports no command module and nothing heavy, and lists
exactly what the fully built command tree lists; every ``knowlyr CMD --help`` still works."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

import knowlyr.cli
from knowlyr.cli import COMMANDS, app

HEAVY = (
    "polars",
    "pyarrow",
    "pydantic",
    "numpy",
    "torch",
    "transformers",
    "trl",
    "datasets",
    "deltalake",
    "prefect",
)
ENV = {"COLUMNS": "100", "TERMINAL_WIDTH": "100", "NO_COLOR": "1"}
runner = CliRunner()


def _modules_after(argv: list[str]) -> tuple[str, set[str]]:
    code = (
        "import sys\n"
        f"sys.argv = {['knowlyr', *argv]!r}\n"
        "from knowlyr.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\n' + ' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **ENV},
    )
    return out.stdout, set(out.stderr.rsplit("\n", 1)[-1].split())


def _cli_modules() -> list[str]:
    """Every knowlyr.cli module that installs commands."""
    names = [
        f"knowlyr.cli.{m.name}"
        for m in pkgutil.iter_modules(knowlyr.cli.__path__)
        if m.name != "__main__"
    ]
    return sorted(n for n in names if hasattr(importlib.import_module(n), "install"))


def test_help_imports_no_heavy_module_and_no_command_module():
    stdout, modules = _modules_after(["--help"])
    assert "Usage: knowlyr" in stdout and "train" in stdout
    assert [m for m in HEAVY if m in modules] == []
    assert sorted(m for m in modules if m.startswith("knowlyr.cli.")) == []
    assert "knowlyr.core" not in modules and "knowlyr.trajectory" not in modules


def test_a_command_imports_only_its_own_module():
    _, modules = _modules_after(["envs"])
    assert sorted(m for m in modules if m.startswith("knowlyr.cli.")) == ["knowlyr.cli.core"]


def test_help_lists_what_the_fully_built_command_tree_lists():
    eager = typer.Typer(
        name="knowlyr", help=app.info.help, no_args_is_help=True, pretty_exceptions_enable=False
    )
    for module in _cli_modules():
        importlib.import_module(module).install(eager)
    assert sorted({m for m, _ in COMMANDS.values()}) == _cli_modules()
    assert list(COMMANDS) == list(typer.main.get_group(eager).commands)
    lazy_help = runner.invoke(app, ["--help"], env=ENV)
    eager_help = runner.invoke(eager, ["--help"], env=ENV)
    assert lazy_help.exit_code == eager_help.exit_code == 0
    assert lazy_help.output == eager_help.output


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_every_command_has_its_help(cmd):
    r = runner.invoke(app, [cmd, "--help"], env=ENV)
    assert r.exit_code == 0, r.output
    assert f"Usage: knowlyr {cmd}" in r.output


def test_a_mistyped_command_still_gets_a_suggestion():
    r = runner.invoke(app, ["reawrd"], env=ENV)
    assert r.exit_code == 2
    assert "Did you mean 'reward'" in r.output


def test_python_dash_m_knowlyr_is_the_knowlyr_command():
    out = subprocess.run(
        [sys.executable, "-m", "knowlyr", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **ENV},
    )
    assert out.stdout == _modules_after(["--help"])[0]

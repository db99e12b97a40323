"""The ``knowlyr`` command. Each area adds its sub-app here; heavy imports stay inside commands.

Subcommands load lazily: ``knowlyr --help`` lists them from :data:`COMMANDS` without importing
their modules, and ``knowlyr CMD ...`` imports only the module that installs ``CMD``. A new
command goes into :data:`COMMANDS` with its module and the first paragraph of its help
(``tests/test_cli_startup.py`` checks the listing against the commands themselves).

Errors have one shape: a line ``error: WHAT; FIX`` on stderr and an exit status of
:data:`EXIT_USAGE` (2) when the command was asked for something it cannot do (a bad option or
argument, an unknown name, a missing input file: nothing ran, nothing was written) or
:data:`EXIT_FAILURE` (1) when the work itself failed. Commands raise :func:`fail`; click's
own usage errors and a :class:`~knowlyr.errors.KnowlyrError` that reaches the group are
printed the same way (a ``ConfigError`` is a usage error). Names that are looked up suggest
the close ones (:func:`did_you_mean`).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["COMMANDS", "EXIT_FAILURE", "EXIT_USAGE", "app", "did_you_mean", "fail", "main"]

EXIT_FAILURE = 1  # the work failed (a store, sandbox, model or judge error; nothing to export)
EXIT_USAGE = 2  # bad option or argument, unknown name, missing input file


def fail(error: BaseException | str, *, usage: bool | None = None) -> typer.Exit:
    """Print ``error: ...`` on stderr and return the ``typer.Exit`` to raise.

    The status is :data:`EXIT_USAGE` when ``usage`` is true, or, with ``usage=None``, when
    ``error`` is a ``ConfigError`` (bad parameter, unknown name, unreadable config file);
    :data:`EXIT_FAILURE` otherwise.

    Example:
        >>> raise fail(f"--split must be train or heldout, got {split!r}", usage=True)  # doctest: +SKIP
    """
    if usage is None:
        from knowlyr.errors import ConfigError

        usage = isinstance(error, ConfigError)
    message = str(error)
    typer.echo(message if message.startswith("error: ") else f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE if usage else EXIT_FAILURE)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the choices close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


# click's exception base (typer >= 0.20 vendors its own click; older typer uses click's)
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _reported(e: Exception) -> typer.Exit:
    """Print click's error ``e`` in our shape: the ``error:`` line, then usage and help hint."""
    message = e.format_message()  # type: ignore[attr-defined]
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        message += f"\n{ctx.get_usage()}\nTry '{ctx.command_path} --help' for help."
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(getattr(e, "exit_code", EXIT_USAGE))


def _shows_help(e: Exception) -> bool:
    """A group called without a command: click shows its help (and exits 2)."""
    return type(e).__name__ == "NoArgsIsHelpError"


# name -> (module whose ``install(app)`` adds it, the help line ``knowlyr --help`` shows), in
# the order of ``knowlyr --help``: plain commands first, then command groups
COMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("knowlyr.cli.core", "List the registered environments."),
    "profiles": ("knowlyr.cli.core", "List the built-in domain profiles, or print one."),
    "schema": ("knowlyr.cli.core", "Print the JSON Schema of the Trajectory model."),
    "tasks": ("knowlyr.cli.rollout", "List the suites, or sample tasks of one."),
    "task": ("knowlyr.cli.rollout", "Print one task as JSON."),
    "rollout": (
        "knowlyr.cli.rollout",
        "Run an agent in an env and report (and optionally save) the trajectories.",
    ),
    "serve": (
        "knowlyr.cli.serve",
        "Serve CHECKPOINT over an OpenAI-compatible API and print the policy spec to collect with.",
    ),
    "ingest": (
        "knowlyr.cli.store",
        "Record the logs under PATH into the store: new, duplicate and rejected counts.",
    ),
    "env": ("knowlyr.cli.env", "Serve environments over HTTP for rollout workers elsewhere."),
    "mcp": (
        "knowlyr.cli.mcp",
        "Serve knowlyr's pipeline (sandboxes, recorder, reward, export, Prefect runs) as Model "
        "Context Protocol tools.",
    ),
    "record": (
        "knowlyr.cli.record",
        "Convert other agents' logs (OpenHands, SWE-agent, chat, ATIF, AgentGym...) into "
        "trajectories.",
    ),
    "reward": (
        "knowlyr.cli.reward",
        "Process reward: rule and LLM-judge scores, calibration, preference pairs, leaderboards.",
    ),
    "sandbox": (
        "knowlyr.cli.sandbox",
        "Sandbox backends (bubblewrap, Docker-API containers) and the coding tools.",
    ),
    "store": (
        "knowlyr.cli.store",
        "Inspect the versioned store: tables, history, trajectories, lineage, labels, blob GC.",
    ),
    "export": ("knowlyr.cli.train", "Export trajectories as training datasets."),
    "train": ("knowlyr.cli.train", "Train a policy with TRL on an exported dataset."),
    "view": (
        "knowlyr.cli.view",
        "See what agents did: a read-only web app over a store (list, trajectory and pair "
        "pages), or its pages exported as files.",
    ),
}


class LazyGroup(TyperGroup):
    """A command group whose subcommands (:data:`COMMANDS`) are built on first use.

    While the group's own help is formatted, a subcommand not built yet is a stand-in that
    carries only its name and help line. An unknown name builds them all, so typer's
    "Did you mean ...?" sees every command.
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(n for n in self.commands if n not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name in COMMANDS and self._listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        for module in {COMMANDS[cmd_name][0]} if cmd_name in COMMANDS else _modules():
            self._load(module)
        return self.commands.get(cmd_name)

    def make_context(self, info_name: Any, args: Any, parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _ClickException as e:
            if _shows_help(e):
                raise
            raise _reported(e) from e

    def invoke(self, ctx: Any) -> Any:
        """Runs the command; its usage errors and unhandled KnowlyrErrors print one shape."""
        from knowlyr.errors import KnowlyrError

        try:
            return super().invoke(ctx)
        except _ClickException as e:
            if _shows_help(e):
                raise
            raise _reported(e) from e
        except KnowlyrError as e:
            raise fail(e) from e

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def _load(self, module: str) -> None:
        """Install ``module``'s commands into a Typer like ``app`` and take them as built."""
        sub = typer.Typer(
            pretty_exceptions_enable=False,
            rich_markup_mode=app.rich_markup_mode,
            suggest_commands=app.suggest_commands,
        )
        importlib.import_module(module).install(sub)
        for name, cmd in typer.main.get_group(sub).commands.items():
            self.commands.setdefault(name, cmd)


def _modules() -> list[str]:
    return list(dict.fromkeys(module for module, _ in COMMANDS.values()))


def _group_callback() -> None:
    pass


app = typer.Typer(
    name="knowlyr",
    help="Train LLM tool-use agents: environments, recorder, store, reward, export, training."
    "\n\nExit status: 0 done, 1 the work failed, 2 a usage error (bad option or argument, "
    "unknown name, missing input file). Errors are one line on stderr: error: WHAT; FIX.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)
app.callback()(_group_callback)  # the subcommands come from LazyGroup, not from app


def main() -> None:
    app()


if __name__ == "__main__":
    main()

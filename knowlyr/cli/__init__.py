"""The ``knowlyr`` command. Each area adds its sub-app here; heavy imports stay inside commands.

Subcommands load lazily: ``knowlyr --help`` lists them from :data:`COMMANDS` without importing
their modules, and ``knowlyr CMD ...`` imports only the module that installs ``CMD``. A new
command goes into :data:`COMMANDS` with its module and the first paragraph of its help
(``tests/test_cli_startup.py`` checks the listing against the commands themselves).
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

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
    help="Train LLM tool-use agents: environments, recorder, store, reward, export, training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)
app.callback()(_group_callback)  # the subcommands come from LazyGroup, not from app


def main() -> None:
    app()


if __name__ == "__main__":
    main()

"""The ``knowlyr`` command. Each area adds its sub-app here; heavy imports stay inside commands."""

from __future__ import annotations

import typer

from knowlyr.cli import core as _core
from knowlyr.cli import env as _env
from knowlyr.cli import mcp as _mcp
from knowlyr.cli import record as _record
from knowlyr.cli import reward as _reward
from knowlyr.cli import rollout as _rollout
from knowlyr.cli import sandbox as _sandbox
from knowlyr.cli import serve as _serve
from knowlyr.cli import store as _store
from knowlyr.cli import train as _train
from knowlyr.cli import view as _view

app = typer.Typer(
    name="knowlyr",
    help="Train LLM tool-use agents: environments, recorder, store, reward, export, training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
_core.install(app)
_env.install(app)
_mcp.install(app)
_record.install(app)
_reward.install(app)
_rollout.install(app)
_sandbox.install(app)
_serve.install(app)
_store.install(app)
_train.install(app)
_view.install(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

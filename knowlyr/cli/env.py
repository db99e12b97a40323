"""``knowlyr env serve ENV_ID``: a registered environment over HTTP (see knowlyr.envs.server).

Examples::

    knowlyr env serve knowlyr/conversation                 # http://127.0.0.1:8400/knowlyr/conversation
    knowlyr env serve knowlyr/sandbox --port 0 --max-episodes 32
    KNOWLYR_ENV_TOKEN=s3cret knowlyr env serve knowlyr/sandbox --host 0.0.0.0
    knowlyr env serve my-project/my-env --import my_project.envs   # an env your module registers
"""

from __future__ import annotations

import importlib
import json
import os
import socket

import typer

__all__ = ["install"]

env_app = typer.Typer(help="Serve environments over HTTP for rollout workers elsewhere.")


def install(app: typer.Typer) -> None:
    app.add_typer(env_app, name="env")


@env_app.command("serve")
def serve(
    env_id: str = typer.Argument(..., help="A registered env id, e.g. knowlyr/conversation."),
    host: str = typer.Option(
        "127.0.0.1", help="Address to listen on; a non-loopback one needs --token."
    ),
    port: int = typer.Option(8400, help="Port to listen on; 0 picks a free one."),
    max_episodes: int = typer.Option(64, help="Episode slots (env instances) open at once."),
    idle_timeout: float = typer.Option(
        300.0, help="Seconds a slot may stay unused before it and its sandbox are closed."
    ),
    token: str = typer.Option(
        None,
        envvar="KNOWLYR_ENV_TOKEN",
        help="Bearer token clients must send [default: $KNOWLYR_ENV_TOKEN].",
        show_default=False,
    ),
    env_kwargs: str = typer.Option(
        None, help='JSON object of env arguments for every slot, e.g. \'{"family": "refund"}\'.'
    ),
    imports: list[str] = typer.Option(
        [], "--import", help="Import this module first (one that registers your env); repeatable."
    ),
) -> None:
    """Serve ENV_ID until Ctrl-C: clients use knowlyr.make("http://HOST:PORT/ENV_ID")."""
    from knowlyr.envs.server import check_bind
    from knowlyr.envs.server import serve as run_server
    from knowlyr.errors import KnowlyrError

    def fail(message: str) -> None:
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2)

    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as e:
            fail(f"--import {module}: {e}")
    kwargs = {}
    if env_kwargs:
        try:
            kwargs = json.loads(env_kwargs)
        except json.JSONDecodeError as e:
            fail(
                f'--env-kwargs is not JSON ({e}): pass an object such as \'{{"family": "refund"}}\''
            )
        if not isinstance(kwargs, dict):
            fail(f"--env-kwargs must be a JSON object, got {env_kwargs!r}")
    if not 0 <= port <= 65535:
        fail(f"--port must be 0..65535, got {port}")
    if port == 0:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    try:
        check_bind(host, token)
    except KnowlyrError as e:
        fail(str(e))
    shown = f"[{host}]" if ":" in host else host
    typer.echo(
        f"knowlyr env serve: http://{shown}:{port}/{env_id}  (pid {os.getpid()}; Ctrl-C stops)",
    )
    try:
        run_server(
            env_id,
            host=host,
            port=port,
            max_episodes=max_episodes,
            idle_timeout_s=idle_timeout,
            token=token or None,
            env_kwargs=kwargs,
        )
    except KnowlyrError as e:
        fail(str(e))
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)

"""``knowlyr env serve ENV_ID``: a registered environment over HTTP (see knowlyr.envs.server).

Examples::

    knowlyr env serve knowlyr/conversation                 # http://127.0.0.1:8400/knowlyr/conversation
    knowlyr env serve knowlyr/sandbox --port 0 --max-episodes 32
    KNOWLYR_ENV_TOKEN=s3cret knowlyr env serve knowlyr/sandbox --host 0.0.0.0
    knowlyr env serve knowlyr/sandbox --host 10.0.0.5 --allowed-host envs.internal
    knowlyr env serve knowlyr/conversation --no-token      # loopback only: any local process may call it
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
        "127.0.0.1",
        help="Address to listen on; requests must name it in their Host header (a loopback "
        "one: any loopback name).",
    ),
    port: int = typer.Option(8400, help="Port to listen on; 0 picks a free one."),
    max_episodes: int = typer.Option(64, help="Episode slots (env instances) open at once."),
    idle_timeout: float = typer.Option(
        300.0, help="Seconds a slot may stay unused before it and its sandbox are closed."
    ),
    token: str = typer.Option(
        None,
        envvar="KNOWLYR_ENV_TOKEN",
        help="Bearer token clients must send [default: $KNOWLYR_ENV_TOKEN, else a new one, "
        "printed at start].",
        show_default=False,
    ),
    no_token: bool = typer.Option(
        False,
        "--no-token",
        help="Serve without a token (loopback only): any process on this machine may open "
        "episodes.",
    ),
    allowed_hosts: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Another name clients reach the server by (a DNS name, a proxy's); repeatable. "
        "Other Host headers get 421.",
    ),
    env_kwargs: str = typer.Option(
        None, help='JSON object of env arguments for every slot, e.g. \'{"family": "refund"}\'.'
    ),
    imports: list[str] = typer.Option(
        [], "--import", help="Import this module first (one that registers your env); repeatable."
    ),
) -> None:
    """Serve ENV_ID until Ctrl-C: clients use knowlyr.make("http://HOST:PORT/ENV_ID").

    A bearer token is generated and printed unless --token / $KNOWLYR_ENV_TOKEN gives one or
    --no-token turns it off; clients pass it as $KNOWLYR_ENV_TOKEN or make(URL, token=...).
    """
    from knowlyr._http_guard import HostGuard
    from knowlyr.envs.server import check_bind, new_token
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
    if no_token and token:
        fail("--no-token and a token (--token or $KNOWLYR_ENV_TOKEN) were both given: pick one")
    try:
        HostGuard.for_bind(host, allowed_hosts)
    except ValueError as e:
        fail(f"--allowed-host: {e}")
    generated = not token and not no_token
    if generated:
        token = new_token()
    try:
        check_bind(host, None if no_token else token)
    except KnowlyrError as e:
        fail(str(e))
    shown = f"[{host}]" if ":" in host else host
    typer.echo(
        f"knowlyr env serve: http://{shown}:{port}/{env_id}  (pid {os.getpid()}; Ctrl-C stops)",
    )
    if generated:
        typer.echo(
            f"token: {token}  (clients: KNOWLYR_ENV_TOKEN={token}, or make(URL, token=...); "
            "--no-token serves without one)"
        )
    elif no_token:
        typer.echo("no token (--no-token): any process on this machine may open episodes")
    try:
        run_server(
            env_id,
            host=host,
            port=port,
            max_episodes=max_episodes,
            idle_timeout_s=idle_timeout,
            token=None if no_token else token,
            env_kwargs=kwargs,
            allowed_hosts=allowed_hosts,
        )
    except KnowlyrError as e:
        fail(str(e))
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)

"""Commands about the protocol itself: ``knowlyr envs``, ``knowlyr profiles``, ``knowlyr schema``."""

from __future__ import annotations

import json

import typer


def install(app: typer.Typer) -> None:
    app.command("envs")(envs)
    app.command("profiles")(profiles)
    app.command("schema")(schema)


def envs() -> None:
    """List the registered environments."""
    from knowlyr.core import list_envs, spec

    for env_id in list_envs():
        typer.echo(f"{env_id:32} {spec(env_id).description}")


def profiles(name: str = typer.Argument(None, help="Show one profile as JSON.")) -> None:
    """List the built-in domain profiles, or print one."""
    from knowlyr.cli import fail
    from knowlyr.core import BUILTIN_PROFILES, get_profile
    from knowlyr.errors import KnowlyrError

    if name:
        try:
            typer.echo(get_profile(name).to_json())
        except KnowlyrError as e:
            raise fail(e) from e  # unknown name or bad file: a usage error
        return
    for key, p in sorted(BUILTIN_PROFILES.items()):
        typer.echo(f"{key:14} {', '.join(p.tool_names) or '(heuristic)'}")


def schema() -> None:
    """Print the JSON Schema of the Trajectory model."""
    from knowlyr.trajectory import Trajectory

    typer.echo(json.dumps(Trajectory.model_json_schema(), indent=2))

"""``knowlyr view``: the trajectory viewer over a store, and ``knowlyr view export``.

Examples::

    knowlyr view                                   # .knowlyr/store on http://127.0.0.1:8321/
    knowlyr view --store s3://bucket/store --port 9000
    knowlyr view export 3f2a9c1e 77b0d2aa 3f2a9c1e:77b0d2aa -o review/   # pages as files
"""

from __future__ import annotations

import socket
from pathlib import Path

import typer

__all__ = ["install"]

view_app = typer.Typer(
    help="See what agents did: a read-only web app over a store (list, trajectory and pair "
    "pages), or its pages exported as files.",
    invoke_without_command=True,
)

STORE_OPT = typer.Option(
    None,
    "--store",
    "-s",
    help="Store path or fsspec URL [default: $KNOWLYR_STORE or .knowlyr/store]",
)
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def install(app: typer.Typer) -> None:
    app.add_typer(view_app, name="view")


@view_app.callback()
def view(
    ctx: typer.Context,
    store: str | None = STORE_OPT,
    host: str = typer.Option(
        "127.0.0.1", help="Address to listen on (loopback; 0.0.0.0 exposes the store)."
    ),
    port: int = typer.Option(8321, help="Port to listen on; 0 picks a free one."),
    allowed_hosts: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Another name browsers reach the viewer by (a DNS name, a proxy's); repeatable. "
        "Other Host headers get 421.",
    ),
) -> None:
    """Serve the viewer until Ctrl-C (with no subcommand). It only reads the store."""
    ctx.obj = store
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from knowlyr.errors import KnowlyrError
    from knowlyr.store import default_url
    from knowlyr.view import create_app
    from knowlyr.view.reader import StoreReader

    url = store or default_url()
    if not 0 <= port <= 65535:
        typer.echo(f"error: --port must be 0..65535, got {port}", err=True)
        raise typer.Exit(2)
    try:
        target: str | StoreReader = StoreReader(url)
        typer.echo(f"store {target.url}: trajectories@{target.version('trajectories')}", err=True)
    except KnowlyrError as e:
        target = url
        typer.echo(f"warning: {e}\n(pages answer 404 until it exists)", err=True)
    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    if host not in _LOOPBACK:
        typer.echo(
            f"warning: listening on {host}: anyone who can reach it reads the store", err=True
        )
    try:
        app = create_app(target, host=host, allowed_hosts=allowed_hosts)
    except KnowlyrError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"knowlyr view: http://{host}:{port}/  (read-only; Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning")


@view_app.command("export")
def export(
    ctx: typer.Context,
    ids: list[str] = typer.Argument(
        ..., help="Trajectory ids (unique prefixes of 8+ characters), or A:B for a pair page."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the pages into."),
    store: str | None = STORE_OPT,
    version: int = typer.Option(None, help="trajectories version to read (default: latest)."),
) -> None:
    """Write the pages of IDS (and their pairs) as HTML files that open without a server."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.store import default_url
    from knowlyr.view import export_pages

    try:
        res = export_pages(store or ctx.obj or default_url(), ids, out, version=version)
    except KnowlyrError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"wrote {len(res.trajectories)} trajectory pages and {len(res.pairs)} pair pages "
        f"({len(res.files)} files); open {res.index}"
    )

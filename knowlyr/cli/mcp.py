"""``knowlyr mcp serve``: the pipeline as MCP tools for Claude Desktop, Claude Code or any client.

Examples::

    knowlyr mcp serve --root ~/agent-logs                          # stdio (what clients launch)
    knowlyr mcp serve --root . --transport http --port 8765       # streamable HTTP on /mcp
    knowlyr mcp tools                                              # the tools and their inputs
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["install"]

mcp_app = typer.Typer(
    help="Serve knowlyr's pipeline (sandboxes, recorder, reward, export, Prefect runs) as Model "
    "Context Protocol tools.",
    no_args_is_help=True,
)
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def install(app: typer.Typer) -> None:
    app.add_typer(mcp_app, name="mcp")


@mcp_app.command("serve")
def serve(
    root: list[Path] = typer.Option(
        ...,
        "--root",
        "-r",
        help="A directory the tools may read and write (repeatable; the first is where relative "
        "paths start and the default store lives). Nothing outside the roots is reachable.",
    ),
    transport: str = typer.Option("stdio", help="stdio (default) or http (streamable HTTP)."),
    host: str = typer.Option("127.0.0.1", help="http: address to listen on."),
    port: int = typer.Option(8765, help="http: port to listen on."),
    path: str = typer.Option("/mcp", help="http: the endpoint path."),
    max_argument_mb: float = typer.Option(
        5.0, help="Largest arguments of one tool call (MB of JSON); larger calls get a tool error."
    ),
    max_sandboxes: int = typer.Option(
        16, help="Most sandboxes open at once, all clients together."
    ),
    idle_timeout: float = typer.Option(
        1800.0, help="Seconds a sandbox may sit unused before it is closed (0: never)."
    ),
    backend: str = typer.Option("local", help="Sandbox backend: local or container."),
    sandbox_timeout: float = typer.Option(
        30.0, help="Default wall-clock limit of one command (s)."
    ),
) -> None:
    """Serve the 19 tools until the client disconnects (stdio) or Ctrl-C / SIGTERM (http)."""
    from knowlyr.errors import KnowlyrError

    if transport not in ("stdio", "http"):
        typer.echo(f"error: --transport must be stdio or http, got {transport!r}", err=True)
        raise typer.Exit(2)
    if backend not in ("local", "container"):
        typer.echo(f"error: --backend must be local or container, got {backend!r}", err=True)
        raise typer.Exit(2)
    if max_argument_mb <= 0:
        typer.echo(f"error: --max-argument-mb must be positive, got {max_argument_mb}", err=True)
        raise typer.Exit(2)
    try:
        from knowlyr.mcp import ServerSettings
        from knowlyr.mcp import serve as run
    except ImportError as e:
        typer.echo(f"error: {e}; install the MCP SDK: pip install 'knowlyr-gym[mcp]'", err=True)
        raise typer.Exit(1) from None
    from knowlyr.sandbox import SandboxConfig

    try:
        settings = ServerSettings(
            roots=[str(r) for r in root],
            max_argument_bytes=int(max_argument_mb * 1024 * 1024),
            max_sandboxes=max_sandboxes,
            idle_timeout_s=idle_timeout,
            sandbox=SandboxConfig(backend=backend, timeout_s=sandbox_timeout),  # type: ignore[arg-type]
        )
        if transport == "http":
            if host not in _LOOPBACK:
                typer.echo(
                    f"warning: listening on {host}: anyone who reaches it can run commands in "
                    "sandboxes and read the roots",
                    err=True,
                )
            typer.echo(f"knowlyr mcp: http://{host}:{port}{path} (Ctrl-C stops)", err=True)
        run(settings, transport=transport, host=host, port=port, path=path)  # type: ignore[arg-type]
    except KnowlyrError as e:  # a bad setting (ConfigError) exits 2, a failure to serve 1
        from knowlyr.cli import fail

        raise fail(e) from None


@mcp_app.command("tools")
def tools(
    as_json: bool = typer.Option(False, "--json", help="Print the input JSON Schemas."),
    width: int = typer.Option(100, help="Wrap the descriptions at this many columns."),
) -> None:
    """List the tools the server offers and what each does (with --json: each input's JSON
    Schema)."""
    import inspect
    import textwrap

    from knowlyr.mcp import TOOLS

    if as_json:
        typer.echo(
            json.dumps({n: spec.input.model_json_schema() for n, spec in TOOLS.items()}, indent=2)
        )
        return
    column = max(map(len, TOOLS)) + 2
    for name, spec in TOOLS.items():
        doc = inspect.getdoc(spec.impl) or ""
        paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
        lines: list[str] = []
        for i, text in enumerate(paragraphs):
            first = name.ljust(column) if i == 0 else " " * column
            lines += textwrap.wrap(text, max(width, column + 20), initial_indent=first,
                                   subsequent_indent=" " * column, break_on_hyphens=False,
                                   break_long_words=False)  # fmt: skip
        typer.echo("\n".join(lines or [name]))

"""``knowlyr sandbox``: check the backends, run a command in a throwaway sandbox, print tool
schemas, remove the sandboxes of dead owners."""

from __future__ import annotations

import json

import typer

sandbox_app = typer.Typer(
    help="Sandbox backends (bubblewrap, Docker-API containers) and the coding tools.",
    no_args_is_help=True,
)


def install(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("check")
def check(
    backend: str = typer.Option("all", help="local, container or all."),
) -> None:
    """Say whether each backend works here (and how to fix it), with a smoke command."""
    from knowlyr.sandbox import SandboxConfig, backend_available, create_sandbox

    names = ["local", "container"] if backend == "all" else [backend]
    failed = False
    for name in names:
        reason = backend_available(name)
        if reason is None:
            try:
                with create_sandbox(SandboxConfig(backend=name)) as sb:  # type: ignore[arg-type]
                    r = sb.exec("python3 --version && git --version && id -un")
                if not r.ok:
                    reason = f"smoke command failed (exit {r.exit_code}): {r.output.strip()}"
                else:
                    typer.echo(
                        f"{name:10} ok   ({' | '.join(r.stdout.split(chr(10))[:3])}, {r.duration_s * 1000:.0f} ms)"
                    )
                    continue
            except Exception as e:  # report, don't crash: this is a diagnostic
                reason = f"{type(e).__name__}: {e}"
        failed = True
        typer.echo(f"{name:10} FAIL {reason}")
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("run")
def run(
    command: str = typer.Argument(..., help="Shell command (run with bash -lc in the workspace)."),
    backend: str = typer.Option("local", help="local or container."),
    timeout: float = typer.Option(30.0, help="Wall-clock limit in seconds."),
) -> None:
    """Run COMMAND in a fresh sandbox and exit with its exit code."""
    from knowlyr.sandbox import SandboxConfig, create_sandbox

    with create_sandbox(SandboxConfig(backend=backend, timeout_s=timeout)) as sb:  # type: ignore[arg-type]
        r = sb.exec(command)
    if r.stdout:
        typer.echo(r.stdout, nl=False)
    if r.stderr:
        typer.echo(r.stderr, nl=False, err=True)
    raise typer.Exit(r.exit_code)


@sandbox_app.command("tools")
def tools() -> None:
    """Print the coding tools' JSON schemas (OpenAI function-calling shape)."""
    from knowlyr.sandbox import coding_toolbox

    typer.echo(json.dumps(coding_toolbox().schemas(), indent=2))


@sandbox_app.command("gc")
def gc(
    backend: str = typer.Option("all", help="local, container or all."),
    root: str = typer.Option(
        None, help="The local sandboxes' directory (default: $KNOWLYR_SANDBOX_ROOT or /tmp)."
    ),
) -> None:
    """Remove sandboxes whose owner process died without closing them (never a live one's)."""
    from knowlyr.errors import BackendUnavailableError
    from knowlyr.sandbox import reap_orphans

    if backend not in ("local", "container", "all"):
        typer.echo(f"--backend must be local, container or all, got {backend!r}", err=True)
        raise typer.Exit(2)
    try:
        removed = reap_orphans(backend, root=root)
    except BackendUnavailableError as e:
        typer.echo(f"container  FAIL {e}", err=True)
        raise typer.Exit(1) from None
    for name in ("local", "container"):
        if name in removed:
            items = removed[name]
            typer.echo(f"{name:10} removed {len(items)}" + "".join(f"\n  {x}" for x in items))
        elif backend == "all":
            typer.echo(f"{name:10} skipped (no engine answers)")

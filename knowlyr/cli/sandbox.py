"""``knowlyr sandbox``: check the backends, run a command in a throwaway sandbox, keep sandboxes
open by id (create, exec, reset, snapshot, replay, ls, rm), print tool
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


def _check_backend(backend: str, allowed: tuple[str, ...]) -> None:
    """An unknown ``--backend`` is a usage error naming the allowed ones (and a close one)."""
    from knowlyr.cli import did_you_mean, fail

    if backend not in allowed:
        raise fail(
            f"--backend must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {backend!r}."
            + did_you_mean(backend, allowed),
            usage=True,
        )


@sandbox_app.command("check")
def check(
    backend: str = typer.Option("all", help="local, container or all."),
) -> None:
    """Say whether each backend works here (and how to fix it), with a smoke command."""
    from knowlyr.sandbox import SandboxConfig, backend_available, create_sandbox

    _check_backend(backend, ("local", "container", "all"))
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

    _check_backend(backend, ("local", "container"))
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

    _check_backend(backend, ("local", "container", "all"))
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


# -- persistent sandboxes: one keeper process each (knowlyr.sandbox.keeper) ----------------
_ROOT = typer.Option(
    None, "--root", help="The sandboxes' directory (default: $KNOWLYR_SANDBOX_ROOT or /tmp)."
)
_ID = typer.Argument(..., help="Sandbox id (from `knowlyr sandbox create` or `ls`).")


def _keeper_call(sandbox_id: str, op: str, root: str | None, **args: object) -> object:
    from knowlyr.cli import did_you_mean, fail
    from knowlyr.errors import SandboxError
    from knowlyr.sandbox.keeper import call, list_keepers
    from knowlyr.sandbox.persistent import UnknownSandboxError

    try:
        return call(sandbox_id, op, root=root, **args)
    except UnknownSandboxError as e:  # a name nobody opened: a usage error
        hint = did_you_mean(sandbox_id, [r["id"] for r in list_keepers(root)])
        raise fail(f"{e}.{hint}" if hint else e, usage=True) from None
    except SandboxError as e:
        raise fail(e) from None


@sandbox_app.command("create")
def create(
    file: list[str] = typer.Option(
        [], "--file", "-f", help="Copy a host text file into the workspace: PATH or DEST=PATH."
    ),
    backend: str = typer.Option("local", help="local or container."),
    timeout: float = typer.Option(30.0, help="Default wall-clock limit of one command (s)."),
    idle_timeout: float = typer.Option(
        3600.0, help="Close the sandbox after this many seconds unused (0: never)."
    ),
    max_sandboxes: int = typer.Option(8, help="Refuse when this many are open already."),
    root: str = _ROOT,
) -> None:
    """Open a sandbox that stays until `knowlyr sandbox rm` (or its idle timeout); print its id."""
    from pathlib import Path

    from knowlyr.errors import KnowlyrError
    from knowlyr.sandbox import SandboxConfig
    from knowlyr.sandbox.keeper import start_keeper

    _check_backend(backend, ("local", "container"))
    files: dict[str, str] = {}
    for spec in file:
        dest, _, src = spec.rpartition("=")
        path = Path(src)
        try:
            files[dest or path.name] = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            typer.echo(f"error: --file {spec}: cannot read it as text ({e})", err=True)
            raise typer.Exit(2) from None
    try:
        state = start_keeper(
            SandboxConfig(backend=backend, timeout_s=timeout),  # type: ignore[arg-type]
            files=files,
            idle_timeout_s=idle_timeout,
            max_sandboxes=max_sandboxes,
            root=root,
        )
    except KnowlyrError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(state["id"])


@sandbox_app.command("exec")
def exec_(
    sandbox_id: str = _ID,
    command: str = typer.Argument(None, help="Shell command (bash -lc in the workspace)."),
    tool: str = typer.Option("bash", help="A coding tool (see `knowlyr sandbox tools`)."),
    params: str = typer.Option(None, help="The tool's arguments as a JSON object."),
    root: str = _ROOT,
) -> None:
    """Run COMMAND (or --tool with --params) in an open sandbox; exit with its exit code."""
    from knowlyr.cli import did_you_mean, fail
    from knowlyr.sandbox import coding_toolbox

    names = coding_toolbox().names
    if tool not in names:
        raise fail(
            f"--tool: no coding tool {tool!r}.{did_you_mean(tool, names)} Tools: {', '.join(names)}",
            usage=True,
        )
    if params is not None:
        try:
            args = json.loads(params)
        except ValueError as e:
            typer.echo(f"error: --params is not JSON: {e}", err=True)
            raise typer.Exit(2) from None
        if not isinstance(args, dict):
            typer.echo("error: --params must be a JSON object", err=True)
            raise typer.Exit(2)
    elif command is not None:
        args = {"command": command}
    else:
        typer.echo("error: give COMMAND, or --tool NAME --params JSON", err=True)
        raise typer.Exit(2)
    res = _keeper_call(sandbox_id, "exec", root, tool=tool, params=args)
    assert isinstance(res, dict)
    if res["output"]:
        typer.echo(res["output"], nl=not res["output"].endswith("\n"))
    raise typer.Exit(res["exit_code"])


@sandbox_app.command("reset")
def reset(
    sandbox_id: str = _ID,
    snapshot: str = typer.Option(None, help="A snapshot id (default: the creation snapshot)."),
    root: str = _ROOT,
) -> None:
    """Put the workspace back as it was when the sandbox was made (or at --snapshot)."""
    typer.echo(f"restored {_keeper_call(sandbox_id, 'reset', root, snapshot=snapshot)}")


@sandbox_app.command("snapshot")
def snapshot(sandbox_id: str = _ID, root: str = _ROOT) -> None:
    """Save the workspace as it is now; print the snapshot id `reset --snapshot` takes."""
    typer.echo(_keeper_call(sandbox_id, "snapshot", root))


@sandbox_app.command("replay")
def replay(
    sandbox_id: str = _ID,
    trajectory: str = typer.Argument(
        ..., help="A trajectory or agent log file (any recorder format)."
    ),
    index: int = typer.Option(0, help="Which record of the file (0 = the first)."),
    no_reset: bool = typer.Option(False, "--no-reset", help="Replay on the workspace as it is."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    root: str = _ROOT,
) -> None:
    """Re-run a trajectory's actions in the sandbox; show step by step where observations differ."""
    from knowlyr.recorder import convert

    rep = convert([trajectory])
    if index >= len(rep.trajectories):
        why = "; ".join(str(r) for r in rep.rejected_records[:3]) or "no records"
        typer.echo(f"error: {trajectory} has no readable record {index} ({why})", err=True)
        raise typer.Exit(2)
    traj = rep.trajectories[index].model_dump(mode="json")
    res = _keeper_call(sandbox_id, "replay", root, trajectory=traj, reset=not no_reset)
    assert isinstance(res, dict)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    for s in res["steps"]:
        mark = "same" if s["matches"] else "DIFF"
        typer.echo(
            f"{mark} step {s['index']:>3} {s['tool']} exit {s['recorded_exit_code']} -> {s['exit_code']}"
        )
        if s["error"]:
            typer.echo(f"       {s['error']}")
        for line in s["diff"].splitlines()[:20]:
            typer.echo(f"       {line}")
    first = res["first_divergence"]
    typer.echo(
        f"{res['replayed']} steps replayed, {res['differing']} differ"
        + (f" (first at step {first})" if first is not None else "")
    )


@sandbox_app.command("ls")
def ls(root: str = _ROOT) -> None:
    """List the open sandboxes: id, backend, idle time, snapshots."""
    from knowlyr.sandbox.keeper import list_keepers

    rows = list_keepers(root)
    if not rows:
        typer.echo("no open sandboxes")
    for r in rows:
        snaps = ",".join([r["initial_snapshot"], *r["snapshots"]])
        typer.echo(
            f"{r['id']}  {r['backend']:9} idle {r['idle_s']:>8.1f}s  pid {r['pid']:<7} "
            f"{'busy ' if r['busy'] else ''}snapshots {snaps}"
        )


@sandbox_app.command("rm")
def rm(
    sandbox_ids: list[str] = typer.Argument(None, help="Sandbox ids to close."),
    all_: bool = typer.Option(False, "--all", help="Close every open sandbox."),
    root: str = _ROOT,
) -> None:
    """Close sandboxes (their keepers exit and delete everything in them)."""
    from knowlyr.sandbox.keeper import list_keepers

    ids = list(sandbox_ids or [])
    if all_:
        ids += [r["id"] for r in list_keepers(root)]
    if not ids:
        typer.echo("error: give sandbox ids, or --all", err=True)
        raise typer.Exit(2)
    for sid in ids:
        _keeper_call(sid, "close", root)
        typer.echo(f"removed {sid}")

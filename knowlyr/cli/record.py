"""``knowlyr record``: convert, validate and compare agent logs; list the formats."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

record_app = typer.Typer(
    name="record",
    help="Convert other agents' logs (OpenHands, SWE-agent, chat, ATIF, AgentGym...) into trajectories.",
    no_args_is_help=True,
)


def install(app: typer.Typer) -> None:
    app.add_typer(record_app, name="record")


def _side_file(out: Path, what: str = "rejected") -> Path:
    name = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{name}.{what}.jsonl")


PII_HELP = (
    "Also redact personal data, comma-separated classes: email, phone, ip (IPv4 and IPv6). "
    "Off by default."
)


def _records(
    paths: list[Path],
    fmt: str | None,
    redact,
    workers: int,
    *,
    output: Path | None = None,
    skipped: list[Path] | None = None,
):
    """iter_records (write_jsonl into ``output`` when given) with a rich progress bar over
    files when a directory is given and stderr is a terminal; files a walk skips for their
    suffix are added to ``skipped``."""
    from functools import partial

    from knowlyr.errors import UnknownFormatError
    from knowlyr.recorder import iter_files, iter_records, write_jsonl

    each = iter_records if output is None else partial(write_jsonl, output=output)

    try:
        if fmt is not None:
            from knowlyr.recorder import get_adapter

            get_adapter(fmt)
    except UnknownFormatError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    on_skip = skipped.append if skipped is not None else None
    if not any(p.is_dir() for p in paths):
        yield from each(paths, format=fmt, redact=redact, workers=workers)
        return
    if not sys.stderr.isatty():  # no one to show a bar to (and rich costs ~0.2 s to import)
        yield from each(paths, format=fmt, redact=redact, workers=workers, on_skip=on_skip)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    files = list(iter_files(paths, on_skip=on_skip))
    from rich.console import Console

    # refreshed from here, not by rich's own thread: the recorder's pool forks its workers,
    # and a process should not fork while another thread may hold a lock
    with Progress(
        TextColumn("converting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
        auto_refresh=False,
        console=Console(stderr=True),  # stdout keeps only the counts
    ) as bar:
        tid = bar.add_task("files", total=len(files))
        shown = [0.0]

        def advance(_p: Path) -> None:
            bar.advance(tid)
            now = time.monotonic()
            if now - shown[0] >= 0.1:
                shown[0] = now
                bar.refresh()

        yield from each(files, format=fmt, redact=redact, workers=workers, progress=advance)


@record_app.command("convert")
def convert_cmd(
    paths: list[Path] = typer.Argument(..., help="Log files or directories (walked recursively)."),
    output: Path = typer.Option(..., "-o", "--output", help="Trajectory JSONL to write."),
    fmt: str = typer.Option(
        None,
        "-f",
        "--format",
        help="Format name (see `knowlyr record formats`); detected per file when omitted.",
    ),
    redact: bool = typer.Option(
        True, "--redact/--no-redact", help="Redact API keys, tokens and passwords."
    ),
    workers: int = typer.Option(
        0,
        "-w",
        "--workers",
        help="Processes to convert with (0 = one per CPU; small inputs stay in this process).",
    ),
    redact_pii: str | None = typer.Option(None, "--redact-pii", help=PII_HELP),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when any record is rejected."),
) -> None:
    """Convert logs to trajectory JSONL; rejected records go to OUT.rejected.jsonl with the reason,
    the redaction audit (kind, step, field, fingerprint: never the secret) to OUT.redactions.jsonl."""
    from collections import Counter

    import orjson

    from knowlyr.recorder import Written, shown_path
    from knowlyr.recorder.redact import redaction_policy

    try:
        policy = redaction_policy(redact, redact_pii)
    except ValueError as e:
        typer.echo(f"error: --redact-pii: {e}", err=True)
        raise typer.Exit(2) from None
    missing = [p for p in paths if not p.exists() and not p.is_symlink()]
    if missing:  # before any output file exists: a failed read leaves nothing behind
        from knowlyr.cli import fail

        names = ", ".join(str(p) for p in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise fail(f"no such file or directory: {names} (nothing was written)", usage=True)
    skipped: list[Path] = []
    output.parent.mkdir(parents=True, exist_ok=True)
    side = _side_file(output)
    audit = _side_file(output, "redactions")
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    nulled: Counter[str] = Counter()  # per file: NaN / Infinity values written as null
    reasons: list[str] = []
    with open(side, "wb") as rej, open(audit, "wb") as aud:
        for r in _records(paths, fmt, policy, workers, output=output, skipped=skipped):
            counts["read"] += 1
            if isinstance(r, Written):
                counts["converted"] += 1
                counts[f"format:{r.format}"] += 1
                if r.nulled:
                    nulled[r.path or ""] += r.nulled
                for x in r.redactions:
                    kinds[x.kind] += 1
                    row = {"path": r.path, "line": r.line, "trajectory": r.id, **x.to_dict()}
                    aud.write(orjson.dumps(row) + b"\n")
            else:
                counts["rejected"] += 1
                rej.write(orjson.dumps(r.to_dict()) + b"\n")
                if len(reasons) < 10:
                    reasons.append(str(r))
    if not counts["rejected"]:
        side.unlink()
    if not kinds:
        audit.unlink()
    formats = ", ".join(
        f"{k[7:]}={v}" for k, v in sorted(counts.items()) if k.startswith("format:")
    )
    typer.echo(
        f"read {counts['read']}  converted {counts['converted']}  rejected {counts['rejected']}"
        + (f"  ({formats})" if formats else "")
    )
    if skipped:
        names = [shown_path(p, policy) for p in skipped[:5]]
        typer.echo(
            f"skipped {len(skipped)} file(s) of no log format (a walk reads .json, .jsonl, "
            ".ndjson, .traj and their .gz, in any case; name a file to read it anyway): "
            + ", ".join(names)
            + (", ..." if len(skipped) > 5 else "")
        )
    if nulled:
        files = ", ".join(f"{p} ({n})" for p, n in list(nulled.items())[:5])
        typer.echo(
            f"{nulled.total()} NaN/Infinity values written as null (JSON has no such numbers): "
            + files
            + (", ..." if len(nulled) > 5 else "")
        )
    typer.echo(f"wrote {output}")
    if counts["rejected"]:
        typer.echo(f"quarantined {counts['rejected']} record(s) with reasons in {side}:")
        for line in reasons:
            typer.echo(f"  {line}")
    if kinds:
        typer.echo(
            "redacted: "
            + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
            + f" (audit: {audit})"
        )
    if (strict and counts["rejected"]) or (counts["read"] and not counts["converted"]):
        raise typer.Exit(1)


@record_app.command("validate")
def validate_cmd(
    paths: list[Path] = typer.Argument(..., help="Log or trajectory files / directories."),
    fmt: str = typer.Option(
        None, "-f", "--format", help="Format name; detected per file when omitted."
    ),
) -> None:
    """Convert and check every record; print each problem; exit 1 when there is any."""
    from knowlyr.recorder import Converted
    from knowlyr.recorder.inspect import validate_trajectory

    n = bad = 0
    for r in _records(paths, fmt, True, 1):
        n += 1
        if not isinstance(r, Converted):
            bad += 1
            typer.echo(f"REJECTED {r}")
            continue
        problems = validate_trajectory(r.trajectory)
        if problems:
            bad += 1
            src = r.trajectory.source
            where = src.path if src.line is None else f"{src.path}:{src.line}"
            for p in problems:
                typer.echo(f"PROBLEM  {where}: {p}")
    typer.echo(f"{n} record(s), {n - bad} ok, {bad} with problems")
    if bad or not n:
        raise typer.Exit(1)


def _load_one(path: Path, fmt: str | None):
    from knowlyr.recorder import convert

    rep = convert([path], format=fmt)
    if not rep.trajectories:
        reason = rep.rejected_records[0].reason if rep.rejected_records else "no records"
        typer.echo(f"error: {path}: {reason}", err=True)
        raise typer.Exit(2)
    return rep.trajectories


@record_app.command("diff")
def diff_cmd(
    a: Path = typer.Argument(..., help="First log or trajectory file."),
    b: Path = typer.Argument(..., help="Second log or trajectory file."),
    fmt: str = typer.Option(
        None, "-f", "--format", help="Format of both files; detected when omitted."
    ),
) -> None:
    """Compare two trajectories side by side: steps, tools used, outcome."""
    from rich.console import Console
    from rich.table import Table

    from knowlyr.recorder.inspect import diff_trajectories

    ta, tb = _load_one(a, fmt)[0], _load_one(b, fmt)[0]
    d = diff_trajectories(ta, tb)
    console = Console(width=140)
    summary = Table(title="record diff", show_lines=False)
    summary.add_column("")
    summary.add_column(str(a))
    summary.add_column(str(b))
    summary.add_row("task", ta.task.task_id, tb.task.task_id)
    summary.add_row("format", ta.source.format, tb.source.format)
    summary.add_row("steps", str(d.steps[0]), str(d.steps[1]))
    summary.add_row(
        "tools used",
        ", ".join(f"{k}×{v}" for k, v in d.tools[0].items()),
        ", ".join(f"{k}×{v}" for k, v in d.tools[1].items()),
    )
    for k in d.outcome[0]:
        summary.add_row(f"outcome.{k}", str(d.outcome[0][k]), str(d.outcome[1][k]))
    summary.add_row("content hash", ta.id[:16], tb.id[:16])
    console.print(summary)
    if d.same_content:
        console.print("same content (identical content hash)")
    else:
        console.print(f"first divergence at step {d.first_divergence}")
    steps = Table(title="steps")
    steps.add_column("#", justify="right")
    steps.add_column(str(a))
    steps.add_column(str(b))
    for i, left, right in d.rows:
        mark = "" if left == right else "≠ "
        steps.add_row(f"{mark}{i}", left, right)
    console.print(steps)


@record_app.command("formats")
def formats_cmd() -> None:
    """List the log formats the recorder reads, in detection order."""
    from knowlyr.recorder.base import adapters

    for a in adapters():
        kind = "session" if a.session else "record"
        typer.echo(f"{a.name:18} {kind:8} {a.description}")

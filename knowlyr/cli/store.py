"""``knowlyr ingest`` and ``knowlyr store ls | log | show | lineage | label | gc``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from knowlyr.store import Store

store_app = typer.Typer(
    help="Inspect the versioned store: tables, history, trajectories, lineage, labels, blob GC.",
    no_args_is_help=True,
)

STORE_OPT = typer.Option(
    None,
    "--store",
    "-s",
    help="Store path or fsspec URL [default: $KNOWLYR_STORE or .knowlyr/store]",
)


def install(app: typer.Typer) -> None:
    app.command("ingest")(ingest)
    app.add_typer(store_app, name="store")


def _open(url: str | None) -> Store:
    """The store at ``url``; one that cannot be opened (a protocol whose package is missing,
    a path that cannot be a directory) is an error line and exit 1."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.store import Store

    try:
        return Store.open(url)
    except KnowlyrError as e:
        raise _fail(e) from e


def _fail(e: Exception) -> typer.Exit:
    from knowlyr.recorder.redact import redact_text

    # an OS error names its file, and a file name can hold a key
    typer.echo(f"error: {redact_text(str(e))[0]}", err=True)
    return typer.Exit(1)


RESULTS_HELP = (
    "Evaluation results that label outcomes (repeatable): a SWE-bench report.json or a "
    "logs/run_evaluation/<run_id> tree of them, the harness's run summary "
    "(resolved_ids / unresolved_ids / error_ids / empty_patch_ids), {instance_id: resolved}, "
    '{"resolved": {instance_id: resolved}} or JSONL {"instance_id", "resolved"} lines. A label '
    "applies to every trajectory whose task id is the instance id."
)
PII_HELP = (
    "Also redact personal data, comma-separated classes: email, phone, ip (IPv4 and IPv6). "
    "Off by default."
)
OVERRIDE_HELP = (
    "Apply labels that contradict what a trajectory already says (the log's success or an "
    "earlier label); without it they are reported and kept in the 'rejected' table."
)


def _echo_labels(rep) -> None:
    typer.echo(rep.summary())
    for line in rep.problems():
        typer.echo(f"  {line}")
    if rep.contradicting > rep.overridden:
        typer.echo(
            f"  {rep.contradicting - rep.overridden} contradicting labels not applied "
            "(kept in the 'rejected' table): pass --override to apply them"
        )


def ingest(
    paths: list[Path] = typer.Argument(..., help="Log files or directories to record."),
    store: str | None = STORE_OPT,
    format: str | None = typer.Option(None, "--format", "-f", help="Force a recorder format."),
    workers: int = typer.Option(
        0,
        "-w",
        "--workers",
        help="Recorder processes (0 = one per CPU; small inputs stay in this process).",
    ),
    redact: bool = typer.Option(True, "--redact/--no-redact", help="Redact secrets first."),
    redact_pii: str | None = typer.Option(None, "--redact-pii", help=PII_HELP),
    batch_size: int | None = typer.Option(
        None,
        "--batch-size",
        min=1,
        help="Commit every N new trajectories (default: one commit for the whole ingest, which "
        "holds every converted trajectory's JSON in memory until then).",
    ),
    results: list[Path] = typer.Option([], "--results", "-r", help=RESULTS_HELP),
    override: bool = typer.Option(False, "--override", help=OVERRIDE_HELP),
) -> None:
    """Record the logs under PATH into the store: new, duplicate and rejected counts.

    With --results, outcomes are labelled from an evaluation (e.g. the SWE-bench harness's
    resolved verdicts) as they are stored; trajectories of those instances stored earlier
    are labelled too. Labels that arrive later: `knowlyr store label RESULTS`.
    """
    from datetime import UTC, datetime

    from knowlyr.errors import KnowlyrError
    from knowlyr.recorder import shown_path
    from knowlyr.recorder.redact import redaction_policy
    from knowlyr.store.ingest import ingest as run_ingest

    started = datetime.now(UTC)
    try:
        policy = redaction_policy(redact, redact_pii)
        s = _open(store)
        res = run_ingest(
            s,
            paths,
            format=format,
            redact=policy,
            workers=workers,
            batch_size=batch_size,
            results=results or None,
            override=override,
        )
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    typer.echo(
        f"read {res.read}: {res.new} new, {res.duplicates} duplicate, {res.n_rejected} rejected"
        f" ({res.converted} converted + {res.n_rejected} rejected, from {res.files} files)"
    )
    if res.n_skipped:
        names = ", ".join(res.skipped[:5]) + (", ..." if res.n_skipped > 5 else "")
        typer.echo(
            f"skipped {res.n_skipped} files of no log format (a walk reads .json, .jsonl, "
            f".ndjson, .traj and their .gz, in any case; name a file to read it anyway): {names}"
        )
    if res.n_nulled:
        files = ", ".join(f"{p} ({n})" for p, n in list(res.nulled.items())[:5])
        more = ", ..." if len(res.nulled) > 5 else ""
        typer.echo(
            f"{res.n_nulled} NaN/Infinity values stored as null (JSON has no such numbers; "
            f"the raw logs keep them): {files}{more}"
        )
    v = res.trajectories.version
    state = "new version" if res.trajectories.committed else "unchanged"
    typer.echo(f"trajectories@{v} ({state}, {res.trajectories.rows} rows) in {s.url}")
    if res.rejected is not None and res.n_rejected:
        import polars as pl

        typer.echo(f"rejected@{res.rejected.version}: reasons kept in the 'rejected' table")
        # this ingest's rejections: rows written now, and rows an earlier ingest already kept
        # for these inputs (the same rejection is not added twice); newest first
        prefixes = [shown_path(Path(p).absolute(), policy) for p in paths]
        prefixes += [shown_path(p, policy) for p in paths]
        rows = (
            s.read("rejected", version=res.rejected.version)
            .filter(
                ~pl.col("format").fill_null("").str.starts_with("labels:"),
                (pl.col("created_at") >= started)
                | pl.any_horizontal(pl.col("path").str.starts_with(x) for x in prefixes),
            )
            .sort("created_at", descending=True)
            .unique(subset=["path", "line"], keep="first", maintain_order=True)
        )
        for r in rows.head(min(res.n_rejected, 10)).iter_rows(named=True):
            where = r["path"] if r["line"] is None else f"{r['path']}:{r['line']}"
            typer.echo(f"  rejected {where}: {r['reason']}")
    if res.labels is not None:
        _echo_labels(res.labels)
    typer.echo(f"run {res.run_id} ({res.seconds:.2f}s)")
    if res.new + res.duplicates == 0:
        typer.echo(
            f"error: nothing was recorded from {', '.join(shown_path(p, policy) for p in paths)}: "
            + (
                "every input was rejected (reasons above)"
                if res.read
                else "no log files found"
                + (f" ({res.n_skipped} files of no log format skipped)" if res.n_skipped else "")
            ),
            err=True,
        )
        raise typer.Exit(1)


@store_app.command("label")
def label(
    results: list[Path] = typer.Argument(..., help=RESULTS_HELP),
    store: str | None = STORE_OPT,
    override: bool = typer.Option(False, "--override", help=OVERRIDE_HELP),
) -> None:
    """Label stored trajectories from evaluation results that arrived after the ingest.

    Every trajectory whose task id is a labelled instance id (all runs of that instance)
    gets outcome.resolved, success where its log did not know, test counts and
    label_source, as ONE new version of the trajectories table (earlier versions keep the
    old outcomes: `knowlyr store show ID --version N`). Prints applied / unchanged /
    contradicting / unknown counts; running it again with the same files changes nothing.
    """
    from knowlyr.errors import KnowlyrError

    try:
        s = _open(store)
        rep = s.attach_labels(results, override=override)
    except (KnowlyrError, OSError) as e:
        raise _fail(e) from e
    _echo_labels(rep)
    if rep.trajectories is not None:
        typer.echo(
            f"trajectories@{rep.trajectories.version} (new version, "
            f"{rep.trajectories.duplicates} rows updated) in {s.url}"
        )
    else:
        v = s.version("trajectories")
        typer.echo(f"trajectories@{-1 if v is None else v} (unchanged) in {s.url}")
    if rep.run_id:
        typer.echo(f"run {rep.run_id}")


@store_app.command("ls")
def ls(store: str | None = STORE_OPT) -> None:
    """List tables with their latest version and row count, and the blob count."""
    s = _open(store)
    tables = s.tables()
    if not tables:
        typer.echo(f"{s.url}: empty store")
    for name, v in tables.items():
        typer.echo(f"{name:14} v{v:<5} {s.count(name, version=v):>10} rows")
    n = sum(1 for _ in s.blobs.iter_hashes())
    typer.echo(f"{'blobs':14} {'':6} {n:>10} blobs")


@store_app.command("log")
def log(
    table: str = typer.Argument(..., help="Table name, e.g. trajectories."),
    store: str | None = STORE_OPT,
    limit: int = typer.Option(20, help="Most recent commits to show."),
) -> None:
    """Show a table's versions, newest first."""
    from knowlyr.errors import KnowlyrError

    s = _open(store)
    try:
        hist = s.history(table, limit=limit)
    except KnowlyrError as e:
        raise _fail(e) from e
    for h in hist:
        ts = datetime.fromtimestamp(h["timestamp"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        m = h.get("operationMetrics") or {}
        added = m.get("num_added_rows", m.get("num_target_rows_inserted", ""))
        extra = ""
        if "knowlyr.new" in h:
            extra = f"new={h['knowlyr.new']} duplicates={h.get('knowlyr.duplicates', 0)}"
        typer.echo(
            f"v{h['version']:<5} {ts}  {h.get('operation', ''):<18} rows+={added!s:<8} {extra}"
        )


@store_app.command("show")
def show(
    id: str = typer.Argument(..., help="Trajectory id (or unique prefix >= 8 chars) or run id."),
    store: str | None = STORE_OPT,
    version: int | None = typer.Option(None, help="Table version to read (time travel)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full trajectory JSON."),
) -> None:
    """Show one trajectory (or run)."""
    from knowlyr.errors import KnowlyrError, NotFoundError

    s = _open(store)
    try:
        t = s.get_trajectory(id, version=version)
    except NotFoundError as e:
        runs = [r for r in s.runs() if r.run_id == id] if "runs" in s.tables() else []
        if not runs:
            raise _fail(e) from e
        typer.echo(runs[0].model_dump_json(indent=2))
        return
    except KnowlyrError as e:
        raise _fail(e) from e
    if as_json:
        typer.echo(t.model_dump_json(indent=2, exclude_none=True))
        return
    o = t.outcome
    typer.echo(f"id       {t.id}")
    typer.echo(
        f"task     {t.task.task_id} ({t.task.domain}{'/' + t.task.suite if t.task.suite else ''})"
    )
    typer.echo(f"agent    {t.agent.name} {t.agent.model or ''}".rstrip())
    typer.echo(f"outcome  success={o.success} score={o.score} reason={o.reason}")
    if o.resolved is not None or o.label_source:
        tests = (
            f" tests passed={o.tests_passed} failed={o.tests_failed}"
            if o.tests_passed is not None
            else ""
        )
        typer.echo(f"label    resolved={o.resolved}{tests} source={o.label_source}")
    typer.echo(f"source   {t.source.format} {t.source.path or ''} blob={t.source.blob}")
    seen = s.sightings(t.id)
    if seen.height:
        typer.echo(f"seen     {seen.height}x (agent, run, source):")
        for r in seen.head(20).iter_rows(named=True):
            model = f" {r['model']}" if r["model"] else ""
            typer.echo(
                f"  {r['agent']}{model}  run {r['run_id'][:12]}  {r['source_path'] or ''}".rstrip()
            )
    typer.echo(f"steps    {len(t.steps)}")
    for st in t.steps[:50]:
        what = (
            f"{st.action.tool} {json.dumps(st.action.params)[:80]}"
            if st.action
            else (st.message or "")[:80]
        )
        code = st.observation.exit_code if st.observation else None
        typer.echo(f"  [{st.index:>3}] {what}  -> exit={code}")


@store_app.command("lineage")
def lineage(
    ref: str = typer.Argument(
        ...,
        help="TABLE@VERSION, table, checkpoint folder or blob hash, trajectory or run id.",
    ),
    store: str | None = STORE_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the lineage as JSON."),
) -> None:
    """Walk back from a dataset version, checkpoint or trajectory to what made it.

    A checkpoint folder (the path a training run or `python -m flows.iterate` prints, e.g.
    .knowlyr/store/checkpoints/NAME/final) stands for its archive in the store.
    """
    from knowlyr.errors import KnowlyrError, NotFoundError

    s = _open(store)
    try:
        try:
            lin = s.lineage(ref)
        except NotFoundError:
            if not Path(ref).is_dir():
                raise
            lin = s.lineage(_checkpoint_blob(s, ref))
    except KnowlyrError as e:
        raise _fail(e) from e
    if as_json:
        typer.echo(lin.model_dump_json(indent=2))
        return
    typer.echo(f"lineage of {lin.ref}")
    for r in lin.runs:
        ins = ", ".join(
            f"{k}@{v}" if isinstance(v, int) else f"{k}={v[:12]}" for k, v in r.inputs.items()
        )
        outs = ", ".join(
            f"{k}@{v}" if isinstance(v, int) else f"{k}={v[:12]}" for k, v in r.outputs.items()
        )
        when = r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else ""
        typer.echo(
            f"  run {r.run_id[:12]} {r.stage:<10} {r.status:<9} {when}  [{ins}] -> [{outs}]  {r.code_version}"
        )
    if lin.tables:
        typer.echo("  tables: " + ", ".join(f"{k}@{v}" for k, v in sorted(lin.tables.items())))
    for b in lin.blobs:
        typer.echo(f"  blob {b}")
    typer.echo(f"  trajectories: {len(lin.trajectory_ids)}")
    for t in lin.trajectory_ids[:10]:
        typer.echo(f"    {t}")
    typer.echo(f"  raw logs: {len(lin.raw_blobs)}")
    for b in lin.raw_blobs[:10]:
        typer.echo(f"    blob {b}")


class _Digest:
    """A stand-in store for :func:`~knowlyr.train.checkpoints.archive_checkpoint` that only
    hashes the archive: the folder's blob address, nothing written."""

    def put_blob(self, data: bytes) -> str:
        from knowlyr.store.blobs import sha256_hex

        return sha256_hex(data)


def _checkpoint_blob(s: Store, folder: str) -> str:
    """The blob of ``s`` that archives the checkpoint ``folder`` (same files, same address)."""
    from knowlyr.errors import NotFoundError
    from knowlyr.train.checkpoints import archive_checkpoint

    blob = archive_checkpoint(_Digest(), folder)  # type: ignore[arg-type]
    if not s.has_blob(blob):
        raise NotFoundError(
            f"lineage: folder {folder} is not a checkpoint archived in {s.url} (its archive "
            f"would be blob {blob[:16]}...): pass the --store it was trained with, or a "
            "TABLE@VERSION, blob hash, trajectory or run id"
        )
    return blob


@store_app.command("gc")
def gc(
    store: str | None = STORE_OPT,
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be deleted."),
    min_age: float = typer.Option(
        3600.0,
        help="Keep unreferenced blobs younger than this many seconds, unless the run that "
        "wrote them is known to be gone (an ingest that was killed or failed: those go at once).",
    ),
) -> None:
    """Delete blobs no table row or run references, and table files no Delta version names
    (see Store.gc); --dry-run lists them.

    The blobs and table files of an ingest that died before its commit are reclaimed at once
    (and its run marked killed); those of a run still in flight are kept."""
    s = _open(store)
    rep = s.gc(dry_run=dry_run, min_age_s=min_age)
    verb = "would delete" if dry_run else "deleted"
    n = len(rep.unreferenced) if dry_run else rep.deleted
    typer.echo(f"{rep.scanned} blobs, {rep.referenced} referenced; {verb} {n} ({rep.bytes} bytes)")
    if rep.aborted_runs:
        typer.echo(f"  including the blobs of {rep.aborted_runs} run(s) that died before commit")
    if rep.in_flight:
        typer.echo(f"  kept {rep.in_flight} blob(s) and table file(s) of runs still in flight")
    if rep.table_files:
        typer.echo(
            f"uncommitted table files (no Delta version names them): {verb} "
            f"{len(rep.table_files)} ({rep.table_bytes} bytes)"
        )
        for name in rep.table_files[:20]:
            typer.echo(f"  {name}")
    if rep.killed_runs:
        typer.echo(f"runs marked killed (their process is gone): {', '.join(rep.killed_runs)}")
    for h in rep.unreferenced[:20]:
        typer.echo(f"  {h}")

"""The sandbox and pipeline tools of the MCP server: each one calls the library (or, for
``run_pipeline`` / ``pipeline_status``, Prefect through :mod:`flows.runs`).

Prefect stays out of ``knowlyr/``: the two Prefect-facing tools import :mod:`flows.runs`
(part of the installed package, beside ``flows.ingest``...) when they are called.
"""

from __future__ import annotations

import importlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowlyr.errors import ConfigError
from knowlyr.mcp import models as m
from knowlyr.mcp.data_tools import Progress, load_trajectory

if TYPE_CHECKING:
    from knowlyr.mcp.server import ServerState
    from knowlyr.store import Store

__all__ = [
    "create_sandbox",
    "execute_tool",
    "pipeline_status",
    "process_log",
    "process_logs_batch",
    "replay_trajectory",
    "reset_sandbox",
    "run_pipeline",
    "sandbox_snapshot",
]


# -- sandbox ----------------------------------------------------------------------------
def create_sandbox(
    state: ServerState, inp: m.CreateSandboxInput, progress: Progress
) -> dict[str, Any]:
    """Open a persistent sandbox (no network, limits, its own workspace) and return its id."""
    config = state.sandboxes.default_config
    if inp.timeout_s is not None:
        config = config.model_copy(update={"timeout_s": inp.timeout_s})
    info = state.sandboxes.create(config, files=inp.files)
    return {
        **info.to_dict(),
        "workdir": config.workdir,
        "idle_timeout_s": state.sandboxes.idle_timeout_s,
    }


def execute_tool(state: ServerState, inp: m.ExecuteToolInput, progress: Progress) -> dict[str, Any]:
    """Run a coding tool (bash, read_file, write_file, edit_file, grep, git, submit) in a sandbox.

    A failing command or tool is a result (exit_code, error), not a tool error."""
    return state.sandboxes.execute(inp.sandbox_id, inp.tool, inp.params).to_dict()


def reset_sandbox(
    state: ServerState, inp: m.ResetSandboxInput, progress: Progress
) -> dict[str, Any]:
    """Restore a sandbox's workspace to its creation snapshot (or to a snapshot_id)."""
    restored = state.sandboxes.reset(inp.sandbox_id, inp.snapshot_id)
    return {"sandbox_id": inp.sandbox_id, "restored": restored}


def sandbox_snapshot(
    state: ServerState, inp: m.SandboxSnapshotInput, progress: Progress
) -> dict[str, Any]:
    """Save a sandbox's workspace as it is now; reset_sandbox(snapshot_id=...) restores it."""
    sid = state.sandboxes.snapshot(inp.sandbox_id)
    return {"sandbox_id": inp.sandbox_id, "snapshot_id": sid}


def replay_trajectory(
    state: ServerState, inp: m.ReplayTrajectoryInput, progress: Progress
) -> dict[str, Any]:
    """Re-run a stored trajectory's actions in a sandbox; report step by step where the
    observations differ (exit code, output diff)."""
    traj = load_trajectory(state, inp.trajectory, inp.path, inp.index)
    report = state.sandboxes.replay(
        inp.sandbox_id,
        traj,
        reset=inp.reset,
        progress=lambda done, total: progress(done, total, f"replayed step {done}/{total}"),
    )
    return report.to_dict()


# -- pipeline ---------------------------------------------------------------------------
def _record(state: ServerState, paths: list[str], store: str | None, fmt: str | None,
            redact: bool, score: bool, progress: Progress) -> dict[str, Any]:  # fmt: skip
    from knowlyr.recorder import iter_files
    from knowlyr.store.ingest import ingest

    files = list(iter_files(state.roots.paths(paths)))
    if not files:
        raise ConfigError(
            f"no log files under {', '.join(paths)} (a walk reads .json, .jsonl, .ndjson, .traj)"
        )
    s = state.open_store(store)
    total = len(files) + (1 if score else 0)
    counts = {"read": 0, "new": 0, "duplicates": 0, "rejected": 0}
    rejections: list[str] = []
    for i, f in enumerate(files, 1):  # one commit per file: progress a client can see
        res = ingest(s, [f], format=fmt, redact=redact)
        counts["read"] += res.read
        counts["new"] += res.new
        counts["duplicates"] += res.duplicates
        counts["rejected"] += res.n_rejected
        if res.n_rejected and len(rejections) < 10:
            rejections.append(
                f"{f}: {res.n_rejected} record(s) rejected (see the store's 'rejected' table)"
            )
        progress(i, total, f"recorded {f.name} ({res.new} new, {res.duplicates} duplicate)")
    out: dict[str, Any] = {"store": s.url, "files": len(files), **counts, "rejections": rejections}
    if score:
        from knowlyr.reward.store_io import score_unscored

        scored = score_unscored(s)
        progress(total, total, f"scored {len(scored.rewards)} trajectories")
        out["rewards"] = [
            {"trajectory_id": r.trajectory_id, "total": r.total} for r in scored.rewards
        ]
        out["reward_config_hashes"] = scored.config_hashes
    out["trajectories_version"] = s.version("trajectories")
    return out


def process_log(state: ServerState, inp: m.ProcessLogInput, progress: Progress) -> dict[str, Any]:
    """Record one agent log into the store (redact, convert, dedup) and score what is new."""
    return _record(state, [inp.path], inp.store, inp.format, inp.redact, inp.score, progress)


def process_logs_batch(
    state: ServerState, inp: m.ProcessLogsBatchInput, progress: Progress
) -> dict[str, Any]:
    """Record many agent logs into the store, file by file with progress, and score what is new."""
    return _record(state, inp.paths, inp.store, inp.format, inp.redact, inp.score, progress)


def _runs() -> Any:
    try:
        return importlib.import_module("flows.runs")
    except ImportError as e:
        raise ConfigError(
            f"run_pipeline / pipeline_status need the orchestration layer ({e}): "
            "pip install 'knowlyr-gym[prefect]'"
        ) from e


def run_pipeline(state: ServerState, inp: m.RunPipelineInput, progress: Progress) -> dict[str, Any]:
    """Start a Prefect flow run of a pipeline (ingest, reward or export) and return its id at
    once: from its deployment when a Prefect server has one, in this server's process otherwise.
    Follow it with pipeline_status."""
    params = dict(inp.parameters)
    for key in ("store_url", "logs"):
        if key in params:
            raise ConfigError(
                f"give `{key.removesuffix('_url')}` as its own argument, not in `parameters`"
            )
    params["store_url"] = state.roots.store(inp.store)
    if inp.pipeline == "ingest":
        if not inp.logs:
            raise ConfigError(
                "the ingest pipeline needs `logs` (files or directories inside the roots)"
            )
        params["logs"] = [str(p) for p in state.roots.paths(inp.logs)]
        if params.get("results"):
            params["results"] = [str(p) for p in state.roots.paths(params["results"])]
    elif inp.logs:
        raise ConfigError(f"`logs` is for the ingest pipeline, not {inp.pipeline}")
    reward = params.get("reward")
    if isinstance(reward, dict):  # a judge model folder or a profile file must lie in the roots
        if reward.get("judge"):
            reward["judge"] = state.judge_spec(reward["judge"])
        if reward.get("profile"):
            reward["profile"] = state.domain(reward["profile"])
    progress(0, 2, f"creating a {inp.pipeline} flow run")
    run = _runs().start_flow_run(inp.pipeline, params)
    progress(2, 2, f"flow run {run['flow_run_id']} started ({run['how']})")
    return {"pipeline": inp.pipeline, **run, "store": params["store_url"]}


_FAILED = ("FAILED", "CRASHED")
_SLACK = timedelta(seconds=2)  # clocks of the flow's process and Prefect's server


def pipeline_status(
    state: ServerState, inp: m.PipelineStatusInput, progress: Progress
) -> dict[str, Any]:
    """What the pipeline did: a flow run's Prefect state and task runs (with `flow_run_id`),
    and the store's recent runs, each with its stage, status, the table versions it wrote and
    their row counts, its times and its error."""
    flow_run = None
    if inp.flow_run_id is not None:
        flow_run = _runs().flow_run_status(inp.flow_run_id)
        flow_run["error"] = flow_run["message"] if flow_run["state"] in _FAILED else None
    url = state.roots.store(inp.store)
    runs = _store_runs(url, inp.limit, flow_run)
    return {"store": url, "flow_run": flow_run, "runs": runs}


def _store_runs(url: str, limit: int, flow_run: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The newest ``limit`` runs of the store at ``url`` (those made during ``flow_run`` when
    given), with row counts of the table versions they wrote; none when there is no store."""
    if not Path(url).is_dir():
        return []
    from knowlyr.store import Store

    store = Store.open(url)
    if "runs" not in store.tables():
        return []
    records = store.runs()
    if flow_run is not None:
        start, end = flow_run["start_time"], flow_run["end_time"]
        if start is None:
            return []  # not started: it has made nothing yet
        lo = datetime.fromisoformat(start) - _SLACK
        hi = datetime.fromisoformat(end) + _SLACK if end else None
        records = [
            r for r in records
            if r.started_at is not None and r.started_at >= lo and (hi is None or r.started_at <= hi)
        ]  # fmt: skip
    out = []
    for r in reversed(records[-limit:]):
        tables, blobs = {}, {}
        for name, ref in r.outputs.items():
            if isinstance(ref, str):
                blobs[name] = ref
            else:
                tables[name] = _table_count(store, name, ref)
        seconds = None
        if r.started_at is not None and r.ended_at is not None:
            seconds = round((r.ended_at - r.started_at).total_seconds(), 3)
        out.append({"run_id": r.run_id, "stage": r.stage, "status": r.status,
                    "started_at": r.started_at, "ended_at": r.ended_at, "seconds": seconds,
                    "tables": tables, "blobs": blobs, "params": _short(r.params),
                    "error": r.error})  # fmt: skip
    return out


def _table_count(store: Store, table: str, version: int) -> dict[str, Any]:
    """Rows of ``table`` at ``version`` and how many that version added (None: unreadable,
    e.g. vacuumed)."""
    if version < 0:
        return {"version": version, "rows": 0, "added": 0}
    try:
        rows = store.count(table, version=version)
        before = store.count(table, version=version - 1) if version > 0 else 0
    except Exception:  # an old version may be gone (vacuum); the run is still worth showing
        return {"version": version, "rows": None, "added": None}
    return {"version": version, "rows": rows, "added": max(rows - before, 0)}


def _short(value: Any, limit: int = 200) -> Any:
    """``value`` with every string longer than ``limit`` cut, saying how long it was."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}... ({len(value):,} characters)"
    if isinstance(value, dict):
        return {k: _short(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v, limit) for v in value]
    return value

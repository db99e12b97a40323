"""``ingest``: a directory of agent logs -> record -> dedup (store) -> reward."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows._common import resolve_store, run_namer, task_runner
from flows.reward import run_reward
from knowlyr.store.ingest import IngestResult
from tasks.record import fingerprint_logs, record_logs
from tasks.reward import RewardParams, RewardSummary

__all__ = ["IngestParams", "IngestReport", "ingest"]


class IngestParams(BaseModel):
    """Parameters of :func:`ingest`."""

    model_config = ConfigDict(extra="forbid")

    logs: list[str] = Field(..., min_length=1, description="log files or directories")
    store_url: str | None = Field(
        None, description="store root (default $KNOWLYR_STORE or .knowlyr/store)"
    )
    format: str | None = Field(
        None, description="force a recorder format (default: detect per file)"
    )
    redact: bool = Field(True, description="redact secrets before anything is parsed or stored")
    results: list[str] = Field(
        default_factory=list,
        description="evaluation results labelling outcomes by task id (SWE-bench report.json "
        "files or trees, run summaries, {instance_id: resolved} maps); every trajectory of a "
        "labelled instance gets the label",
    )
    override: bool = Field(
        False, description="apply labels that contradict what a log or an earlier label says"
    )
    reward: RewardParams = Field(default_factory=RewardParams, description="how to score them")


class IngestReport(BaseModel):
    """What an ingest did: the recorder/store result and the rewards written."""

    store_url: str
    record: IngestResult
    rewards: list[RewardSummary]


def _describe(p) -> str:
    logs = p["logs"] if isinstance(p, dict) else p.logs
    return "+".join(Path(x).name for x in logs)[:60]


@flow(name="ingest", flow_run_name=run_namer("ingest", _describe), task_runner=task_runner())
def ingest(params: IngestParams) -> IngestReport:
    """Convert a directory of agent logs into the store (labelled from evaluation results), dedup and reward them."""
    store_url = resolve_store(params.store_url)
    logs = fingerprint_logs(params.logs)
    results = fingerprint_logs(params.results, what="results") if params.results else None
    rec = record_logs(
        store_url,
        logs,
        format=params.format,
        redact=params.redact,
        results=results,
        override=params.override,
    )
    log = get_run_logger()
    log.info(
        f"recorded {rec.read} records from {logs.files} files: {rec.new} new, "
        f"{rec.duplicates} duplicates, {rec.n_rejected} rejected -> trajectories@{rec.version}"
    )
    if rec.labels is not None:
        log.info("; ".join([f"labels: {rec.labels.summary()}", *rec.labels.problems()]))
    rewards = run_reward(rec.trajectories.ref, params.reward)
    return IngestReport(store_url=store_url, record=rec, rewards=rewards)

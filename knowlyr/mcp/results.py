"""Typed results of the MCP tools: each model is the ``outputSchema`` a client sees for one
tool, and every result is validated against it before it is sent.

Results go out as compact JSON (no indentation) and as the same data in
``structuredContent``. Timestamps are ISO 8601 strings in UTC (``2026-05-01T12:00:00.123Z``);
a statistic that is undefined (NaN) is ``null``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "BuildPreferencesResult",
    "CalibrateRewardResult",
    "ConvertLogsResult",
    "ExportDatasetResult",
    "GetSchemaResult",
    "ListRubricsResult",
    "PipelineStatusResult",
    "ProcessLogResult",
    "RecorderDiffResult",
    "ReplayTrajectoryResult",
    "ResetSandboxResult",
    "RewardLeaderboardResult",
    "RunPipelineResult",
    "SandboxResult",
    "SandboxSnapshotResult",
    "ScoreTrajectoryResult",
    "ToolCallResult",
    "ValidateLogsResult",
]


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: A point in time, sent as an ISO 8601 string in UTC (an epoch number is accepted in).
Timestamp = Annotated[datetime, AfterValidator(_utc)]


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- sandbox ----------------------------------------------------------------------------
class SandboxResult(_Result):
    """create_sandbox: the new sandbox."""

    id: str = Field(description="The id every other sandbox tool takes.")
    backend: str = Field(description="local or container.")
    created_at: Timestamp
    last_used: Timestamp
    idle_s: float = Field(description="Seconds since it was last used.")
    initial_snapshot: str = Field(description="The creation snapshot reset_sandbox restores.")
    snapshots: list[str] = Field(description="Snapshots taken since (sandbox_snapshot).")
    busy: bool
    workdir: str = Field(description="The workspace path inside the sandbox.")
    idle_timeout_s: float | None = Field(
        description="Unused this long, the sandbox is closed (null: never)."
    )


class ToolCallResult(_Result):
    """execute_tool: what the coding tool returned (a failure is a result, not a tool error)."""

    output: str = Field(description="The text an agent would see.")
    exit_code: int = Field(description="0 on success; a command's own code; 2 for a bad call.")
    error: str | None = Field(description="What went wrong; null on success.")
    data: dict[str, Any] = Field(description="Structured extras, e.g. {'timed_out': true}.")


class ResetSandboxResult(_Result):
    """reset_sandbox."""

    sandbox_id: str
    restored: str = Field(description="The snapshot the workspace now matches.")


class SandboxSnapshotResult(_Result):
    """sandbox_snapshot."""

    sandbox_id: str
    snapshot_id: str = Field(description="Pass it to reset_sandbox to come back here.")


class ReplayStep(_Result):
    index: int
    tool: str
    params: dict[str, Any]
    recorded_exit_code: int | None
    exit_code: int
    same_exit_code: bool
    same_output: bool
    error: str | None
    diff: str = Field(description="Unified diff recorded -> replayed output ('' when equal).")
    matches: bool


class ReplayTrajectoryResult(_Result):
    """replay_trajectory: step-by-step agreement of the replayed observations."""

    trajectory_id: str
    task_id: str
    replayed: int
    skipped: int = Field(description="Steps without an action.")
    differing: int
    first_divergence: int | None = Field(description="First differing step; null: all agree.")
    steps: list[ReplayStep]


# -- recorder ---------------------------------------------------------------------------
class ConvertLogsResult(_Result):
    """convert_logs: counts and where the trajectories went."""

    read: int
    converted: int
    rejected: int
    formats: dict[str, int] = Field(description="Records converted per log format.")
    output: str
    rejected_file: str | None = Field(description="Rejected records with reasons; null: none.")
    rejections: list[str] = Field(description="The first ten rejections.")


class LogProblem(_Result):
    path: str | None
    line: int | None
    problem: str


class ValidateLogsResult(_Result):
    """validate_logs."""

    records: int
    ok: int
    with_problems: int
    problems: list[LogProblem] = Field(description="At most 200.")


class LogFormat(_Result):
    name: str
    kind: Literal["session", "record"]
    description: str


class GetSchemaResult(_Result):
    """get_schema."""

    trajectory: dict[str, Any] = Field(description="The Trajectory model's JSON Schema.")
    formats: list[LogFormat] | None = Field(
        None, description="The log formats the recorder reads (null unless include_formats)."
    )


class TrajectoryRef(_Result):
    id: str
    task_id: str


class RecorderDiffResult(_Result):
    """recorder_diff: a and b side by side."""

    a: TrajectoryRef
    b: TrajectoryRef
    same_content: bool
    steps: list[int] = Field(description="[steps of a, steps of b].")
    tools: list[dict[str, int]] = Field(description="[tool -> calls of a, of b].")
    outcome: list[dict[str, Any]] = Field(description="[outcome of a, of b].")
    first_divergence: int | None
    rows: list[tuple[int, str, str]] = Field(
        description="[step, a's action, b's action]; 200 at most."
    )


# -- reward -----------------------------------------------------------------------------
class TrajectoryRewardResult(_Result):
    trajectory_id: str
    task_id: str
    agent: str
    model: str | None
    total: float | None = Field(description="The final reward; null when no step was scored.")
    total_raw: float | None
    step_rewards: list[float | None]
    rubric_scores: dict[str, float | None]
    step_rubrics: list[dict[str, float | None]]
    config_hash: str
    success: bool | None
    rationales: list[str | None]
    judge_errors: list[str | None]
    judge_model: str | None
    missing_layers: list[str]
    process: float | None


class ScoreTrajectoryResult(_Result):
    """score_trajectory."""

    config_hash: str
    rewards: list[TrajectoryRewardResult]
    rejected: list[str] = Field(description="Records of `paths` the recorder could not read.")
    output: str | None


class PreferencePairResult(_Result):
    pair_id: str
    task_id: str
    chosen_id: str
    rejected_id: str
    chosen_reward: float
    rejected_reward: float
    margin: float
    reason: str
    config_hash: str


class BuildPreferencesResult(_Result):
    """build_preferences."""

    pairs: list[PreferencePairResult]


class Metric(_Result):
    value: float | None
    low: float | None
    high: float | None


class Agreement(_Result):
    n: int
    pearson: Metric
    spearman: Metric
    kendall: Metric
    pairwise_accuracy: Metric
    mae: Metric
    confidence: float


class CalibrateRewardResult(_Result):
    """calibrate_reward: agreement with the human scores before and after the map."""

    map_version: str
    level: Literal["trajectory", "step"]
    n_matched: int
    n_unmatched: int
    before: Agreement
    after: Agreement
    after_cv: Agreement | None = Field(description="Cross-validated; null for few items.")
    version: str
    rejected_annotations: list[str]
    output: str | None


class RubricInfo(_Result):
    name: str
    layer: Literal["rules", "judge"]
    weight: float
    description: str


class ListRubricsResult(_Result):
    """list_rubrics."""

    domain: str
    rubric_version: str
    rubrics: list[RubricInfo]


class LeaderboardRow(_Result):
    key: dict[str, str | None]
    n: int
    mean_reward: float | None
    reward_low: float | None
    reward_high: float | None
    n_outcomes: int
    success_rate: float | None
    success_low: float | None
    success_high: float | None


class RewardLeaderboardResult(_Result):
    """reward_leaderboard."""

    rows: list[LeaderboardRow]


# -- pipeline ---------------------------------------------------------------------------
class RunPipelineResult(_Result):
    """run_pipeline: the flow run started."""

    pipeline: Literal["ingest", "reward", "export"]
    flow_run_id: str = Field(description="Pass it to pipeline_status.")
    name: str
    how: Literal["deployment", "in-process"]
    deployment: str | None
    store: str = Field(description="The store the run writes; pipeline_status reads it.")


class ExportDatasetResult(_Result):
    """export_dataset."""

    kind: Literal["sft", "dpo", "grpo"]
    rows: int
    trajectories: int = Field(description="Trajectories read.")
    rejected: dict[str, int] = Field(description="Trajectories left out, per reason.")
    output: str
    store: str | None = Field(description="The store read (null: only `paths`).")


class ScoredTrajectory(_Result):
    trajectory_id: str
    total: float | None


class ProcessLogResult(_Result):
    """process_log and process_logs_batch."""

    store: str
    files: int
    read: int
    new: int
    duplicates: int
    rejected: int
    rejections: list[str]
    rewards: list[ScoredTrajectory] | None = Field(
        None, description="The new trajectories' totals (null when score=false)."
    )
    reward_config_hashes: list[str] | None = None
    trajectories_version: int | None


class TaskRunStatus(_Result):
    name: str
    state: str | None
    state_name: str | None
    start_time: Timestamp | None
    end_time: Timestamp | None


class FlowRunStatus(_Result):
    flow_run_id: str
    name: str
    state: str | None = Field(description="Prefect's state type: SCHEDULED, RUNNING, ...")
    state_name: str | None
    message: str | None
    error: str | None = Field(description="Why it failed (FAILED / CRASHED); else null.")
    final: bool
    start_time: Timestamp | None
    end_time: Timestamp | None
    deployment_id: str | None
    task_runs: list[TaskRunStatus]


class TableCount(_Result):
    version: int
    rows: int | None = Field(description="Rows of the table at that version.")
    added: int | None = Field(description="Rows that version added.")


class StoreRun(_Result):
    run_id: str
    stage: str = Field(description="ingest, reward, export, train, ...")
    status: str
    started_at: Timestamp | None
    ended_at: Timestamp | None
    seconds: float | None
    tables: dict[str, TableCount] = Field(description="Table versions it wrote, with counts.")
    blobs: dict[str, str] = Field(description="Blobs it wrote (e.g. a checkpoint's hash).")
    params: dict[str, Any]
    error: str | None


class PipelineStatusResult(_Result):
    """pipeline_status."""

    store: str
    flow_run: FlowRunStatus | None = Field(description="Null without `flow_run_id`.")
    runs: list[StoreRun] = Field(
        description="The store's recent runs, newest first (of the flow run when one is given)."
    )

"""Typed inputs of the MCP tools: each model is the JSON Schema a client sees for one tool.

Paths are strings resolved against the server's allowed roots (relative ones against the
first root); see :mod:`knowlyr.mcp.roots`. A rule between arguments ("``paths`` when there is
no ``trajectory``") is in the schema too, as ``if``/``then``/``else``: clients such as the
Anthropic API refuse a ``oneOf`` / ``anyOf`` / ``allOf`` at the top of a tool's schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BuildPreferencesInput",
    "CalibrateRewardInput",
    "ConvertLogsInput",
    "CreateSandboxInput",
    "ExecuteToolInput",
    "ExportDatasetInput",
    "GetSchemaInput",
    "ListRubricsInput",
    "PipelineStatusInput",
    "ProcessLogInput",
    "ProcessLogsBatchInput",
    "RecorderDiffInput",
    "ReplayTrajectoryInput",
    "ResetSandboxInput",
    "RewardLeaderboardInput",
    "RunPipelineInput",
    "SandboxSnapshotInput",
    "ScoreTrajectoryInput",
    "ValidateLogsInput",
]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


_SANDBOX_ID = Field(..., description="Id returned by create_sandbox, e.g. 'sb-3f2a9c1e0b7d'.")
_PATHS = Field(
    ...,
    min_length=1,
    description="Log files or directories (walked recursively), inside the allowed roots.",
)
_FORMAT = Field(
    None, description="Force a recorder format (see get_schema); detected per file when omitted."
)
_STORE = Field(
    None,
    description="Store directory inside the allowed roots (default: <first root>/.knowlyr/store).",
)
_REWARDS = Field(
    ...,
    description="Rewards JSON file written by score_trajectory (its `output`), inside the roots.",
)
_TRAJECTORY = Field(
    None,
    description="A trajectory: the Trajectory JSON object (see get_schema) or its JSON text.",
)


class _OneTrajectory(_Input):
    # exactly one of trajectory / path
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["trajectory"]},
            "then": {"not": {"required": ["path"]}},
            "else": {"required": ["path"]},
        }
    )

    trajectory: dict[str, Any] | str | None = _TRAJECTORY
    path: str | None = Field(
        None,
        description="Or a file inside the roots holding it: trajectory JSON/JSONL or any agent "
        "log the recorder reads (the first record is used unless `index` says otherwise).",
    )
    index: int = Field(0, ge=0, description="Which record of `path` (0 = the first).")

    @model_validator(mode="after")
    def _one_source(self) -> _OneTrajectory:
        if (self.trajectory is None) == (self.path is None):
            raise ValueError("give exactly one of `trajectory` (JSON) or `path` (a file)")
        return self


# -- sandbox ----------------------------------------------------------------------------
class CreateSandboxInput(_Input):
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Initial workspace files {relative path: text content}.",
    )
    timeout_s: float | None = Field(
        None, gt=0, le=600, description="Wall-clock limit of one command (default: the server's)."
    )


class ExecuteToolInput(_Input):
    sandbox_id: str = _SANDBOX_ID
    tool: Literal["bash", "read_file", "write_file", "edit_file", "grep", "git", "submit"] = Field(
        ..., description="The coding tool to run in the sandbox."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The tool's arguments, e.g. {'command': 'ls -la'} for bash, "
        "{'path': 'a.py'} for read_file, {'path', 'content'} for write_file, "
        "{'path', 'old_str', 'new_str'} for edit_file, {'pattern', 'path'} for grep, "
        "{'args': 'log --oneline'} for git.",
    )


class ResetSandboxInput(_Input):
    sandbox_id: str = _SANDBOX_ID
    snapshot_id: str | None = Field(
        None,
        description="A snapshot from sandbox_snapshot to restore (default: the workspace as it "
        "was when the sandbox was created).",
    )


class SandboxSnapshotInput(_Input):
    sandbox_id: str = _SANDBOX_ID


class ReplayTrajectoryInput(_OneTrajectory):
    sandbox_id: str = _SANDBOX_ID
    reset: bool = Field(
        True, description="Reset the sandbox to its creation snapshot before replaying."
    )


# -- recorder ---------------------------------------------------------------------------
class ConvertLogsInput(_Input):
    paths: list[str] = _PATHS
    output: str = Field(
        ...,
        description="Trajectory JSONL file to write, inside the roots; rejected records go to "
        "OUTPUT.rejected.jsonl with their reason.",
    )
    format: str | None = _FORMAT
    redact: bool = Field(True, description="Redact API keys, tokens and passwords.")


class ValidateLogsInput(_Input):
    paths: list[str] = _PATHS
    format: str | None = _FORMAT


class GetSchemaInput(_Input):
    include_formats: bool = Field(True, description="Also list the log formats the recorder reads.")


class RecorderDiffInput(_Input):
    a: str = Field(..., description="First log or trajectory file, inside the roots.")
    b: str = Field(..., description="Second log or trajectory file, inside the roots.")
    format: str | None = _FORMAT


# -- reward -----------------------------------------------------------------------------
class ScoreTrajectoryInput(_Input):
    # `paths` is required when `trajectory` is not given
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"not": {"required": ["trajectory"]}},
            "then": {"required": ["paths"], "properties": {"paths": {"minItems": 1}}},
        }
    )

    trajectory: dict[str, Any] | str | None = _TRAJECTORY
    paths: list[str] = Field(
        default_factory=list,
        description="Agent logs / trajectory JSONL files inside the roots (every record is "
        "scored); required when `trajectory` is not given.",
    )
    domain: str = Field("generic", description="Domain profile (see list_rubrics).")
    weights: dict[str, float] | None = Field(None, description="Override rubric weights.")
    judge: str | None = Field(
        None, description="Add the LLM judge layer: anthropic:MODEL, openai:MODEL or hf:PATH."
    )
    output: str | None = Field(
        None,
        description="Write the rewards JSON here (inside the roots) for build_preferences, "
        "calibrate_reward and reward_leaderboard.",
    )
    store: str | None = Field(None, description="Also append the rewards to this store.")

    @model_validator(mode="after")
    def _some_input(self) -> ScoreTrajectoryInput:
        if self.trajectory is None and not self.paths:
            raise ValueError("give `trajectory` (JSON) or `paths` (files)")
        return self


class BuildPreferencesInput(_Input):
    rewards: str = _REWARDS
    min_margin: float = Field(0.05, ge=0, description="Smallest total-reward margin of a pair.")
    max_pairs_per_task: int | None = Field(None, ge=1, description="Keep the widest N per task.")
    store: str | None = Field(None, description="Also append the pairs to this store.")


class CalibrateRewardInput(_Input):
    rewards: str = _REWARDS
    annotations: str = Field(
        ...,
        description="Human scores, CSV or JSONL (trajectory_id, step_index, score, annotator), "
        "inside the roots.",
    )
    level: Literal["trajectory", "step"] = Field("trajectory", description="What was annotated.")
    n_boot: int = Field(200, ge=10, le=10_000, description="Bootstrap resamples for the CIs.")
    output: str | None = Field(None, description="Write the calibration map JSON here.")


class ListRubricsInput(_Input):
    domain: str = Field("generic", description="Domain profile name.")


class RewardLeaderboardInput(_Input):
    rewards: str = _REWARDS
    by: list[Literal["agent", "model"]] = Field(["agent"], min_length=1, description="Group by.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the intervals.")


# -- pipeline ---------------------------------------------------------------------------
class RunPipelineInput(_Input):
    # `logs` is required by the ingest pipeline (the default) and refused by the others
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"pipeline": {"const": "ingest"}}},
            "then": {"required": ["logs"], "properties": {"logs": {"minItems": 1}}},
            "else": {"properties": {"logs": {"maxItems": 0}}},
        }
    )

    pipeline: Literal["ingest", "reward", "export"] = Field(
        "ingest",
        description="ingest: logs -> store (dedup) -> rewards; reward: score the store's "
        "unscored trajectories; export: a SFT/DPO/GRPO dataset version from the store.",
    )
    logs: list[str] = Field(
        default_factory=list,
        description="Log files or directories inside the roots: required by ingest, refused by "
        "reward and export.",
    )
    store: str | None = _STORE
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Further fields of the flow's parameters (flows/ingest.py IngestParams, "
        "flows/reward.py RewardFlowParams, flows/export.py ExportFlowParams); `store` and "
        "`logs` are arguments of their own.",
        json_schema_extra={"propertyNames": {"not": {"enum": ["store_url", "logs"]}}},
    )


class ExportDatasetInput(_Input):
    kind: Literal["sft", "dpo", "grpo"] = Field("sft", description="Dataset kind.")
    paths: list[str] = Field(
        default_factory=list,
        description="Trajectory JSONL files or agent logs inside the roots.",
    )
    store: str | None = Field(
        None,
        description="Also read every trajectory of this store, inside the roots (default when "
        "`paths` is empty: the server's store, <first root>/.knowlyr/store).",
    )
    output: str = Field(..., description="Folder to write the dataset to, inside the roots.")
    include_failed: bool = Field(False, description="sft: keep unsuccessful trajectories.")
    min_reward: float | None = Field(None, description="sft: drop trajectories below this reward.")
    min_margin: float = Field(0.1, ge=0, description="dpo: smallest reward gap of a pair.")
    min_group_size: int = Field(1, ge=1, description="grpo: drop tasks with fewer trajectories.")


class ProcessLogInput(_Input):
    path: str = Field(..., description="One agent log file inside the roots.")
    store: str | None = _STORE
    format: str | None = _FORMAT
    redact: bool = Field(True, description="Redact secrets before anything is stored.")
    score: bool = Field(True, description="Score the new trajectories with the rule layer.")


class ProcessLogsBatchInput(_Input):
    paths: list[str] = _PATHS
    store: str | None = _STORE
    format: str | None = _FORMAT
    redact: bool = Field(True, description="Redact secrets before anything is stored.")
    score: bool = Field(True, description="Score the new trajectories with the rule layer.")


class PipelineStatusInput(_Input):
    flow_run_id: str | None = Field(
        None,
        description="A flow run id run_pipeline returned: its Prefect state and task runs, and "
        "only the store runs made while it ran (default: the store's recent runs alone).",
    )
    store: str | None = Field(
        None,
        description="The store whose runs to list, inside the roots (default: <first "
        "root>/.knowlyr/store; give the one run_pipeline was given).",
    )
    limit: int = Field(10, ge=1, le=100, description="Most store runs to list, newest first.")

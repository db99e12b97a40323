"""Export: scored trajectories of the train split -> an SFT / DPO / GRPO dataset version."""

from __future__ import annotations

from typing import Literal

from prefect import task
from pydantic import BaseModel, ConfigDict, Field

from knowlyr.export.store_io import export_from_store
from knowlyr.export.store_io import load_dataset as load_stored_dataset
from knowlyr.store import Manifest, Store, TableRef
from tasks._artifacts import publish_table, republish_cached
from tasks._cache import STAGE_CACHE
from tasks.reward import RewardSummary

__all__ = ["DatasetRef", "ExportParams", "ExportSettings", "export_dataset", "load_dataset"]

DEFAULT_SYSTEM_PROMPT = "You answer customers' questions about their orders."


class ExportSettings(BaseModel):
    """Which trajectories become a dataset, without its kind (``iterate`` sets that from the
    train method)."""

    model_config = ConfigDict(extra="forbid")

    suite: str | None = Field("conversation", description="only this suite (None: all)")
    family: str | None = Field("order_status", description="only this task family (None: all)")
    only_success: bool = Field(True, description="SFT: keep successful trajectories only")
    min_reward: float | None = Field(None, description="SFT: keep rewards >= this")
    system_prompt: str | None = Field(DEFAULT_SYSTEM_PROMPT, description="system message")
    replay_versions: int | None = Field(
        None,
        ge=0,
        description="only trajectories added in the exported trajectories version and this many "
        "versions before it (a bounded replay window; null: every trajectory in the store)",
    )


class ExportParams(ExportSettings):
    """Which trajectories become which kind of dataset."""

    kind: Literal["sft", "dpo", "grpo"] = Field("sft", description="dataset kind")


class DatasetRef(BaseModel):
    """One exported dataset: its name and the ``datasets`` table version that holds it."""

    name: str
    kind: str
    rows: int
    rejected: int
    datasets: Manifest
    trajectories: TableRef

    def __str__(self) -> str:
        return f"{self.name} (datasets@{self.datasets.version})"


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="export-{params.kind}-{trajectories.table}@{trajectories.version}",
    on_completion=[republish_cached],
)
def export_dataset(
    trajectories: TableRef,
    rewards: list[RewardSummary],
    params: ExportParams,
    agent_prefix: str | None = None,
) -> DatasetRef:
    """Export the train-split trajectories at this version with their rewards as a dataset
    (only those of agents named ``agent_prefix...`` when given)."""
    window = params.replay_versions
    out = export_from_store(
        Store.open(trajectories.store),
        trajectories_version=trajectories.version,
        reward_config_hashes=[h for r in rewards for h in r.config_hashes],
        agent_prefix=agent_prefix,
        since_version=None if window is None else trajectories.version - 1 - window,
        **params.model_dump(exclude={"replay_versions"}),
    )
    ref = DatasetRef(
        name=out.name,
        kind=params.kind,
        rows=out.rows,
        rejected=out.rejected,
        datasets=out.manifest,
        trajectories=trajectories,
    )
    publish_table(
        "export-counts",
        [{"dataset": out.name, "kind": params.kind, "in": out.n_in, "rows": ref.rows,
          "rejected": ref.rejected, "datasets_version": out.manifest.version}],
        "Rows exported and the dataset version",
    )  # fmt: skip
    return ref


def load_dataset(ref: DatasetRef):
    """The exported rows of ``ref`` as a Hugging Face ``datasets.Dataset``
    (see :func:`knowlyr.export.store_io.load_dataset`)."""
    return load_stored_dataset(
        Store.open(ref.datasets.store), ref.name, version=ref.datasets.version
    )

"""``export``: scored trajectories of a store version -> an SFT / DPO / GRPO dataset version."""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows._common import resolve_store, run_namer
from flows.reward import latest_ref, run_reward
from tasks.export import DatasetRef, ExportParams, export_dataset
from tasks.reward import RewardParams

__all__ = ["ExportFlowParams", "export"]


class ExportFlowParams(BaseModel):
    """Parameters of :func:`export`."""

    model_config = ConfigDict(extra="forbid")

    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")
    version: int | None = Field(None, description="trajectories version (default: latest)")
    reward: RewardParams = Field(default_factory=RewardParams, description="reward config used")
    export: ExportParams = Field(default_factory=ExportParams)


def _describe(p) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    e = get("export") or {}
    kind = e.get("kind", "sft") if isinstance(e, dict) else getattr(e, "kind", "sft")
    v = get("version")
    return f"{kind}-trajectories@{'latest' if v is None else v}"


@flow(name="export", flow_run_name=run_namer("export", _describe))
def export(params: ExportFlowParams = ExportFlowParams()) -> DatasetRef:
    """Export a dataset version from a trajectories version (scoring what is unscored first)."""
    ref = latest_ref(resolve_store(params.store_url), params.version)
    rewards = run_reward(ref, params.reward)
    dataset = export_dataset(ref, rewards, params.export)
    get_run_logger().info(
        f"exported {dataset.rows} rows ({dataset.rejected} rejected) as {dataset}"
    )
    return dataset

"""Export: scored trajectories of the train split -> an SFT / DPO / GRPO dataset version."""

from __future__ import annotations

from typing import Literal

from prefect import task
from pydantic import BaseModel, Field

from knowlyr.store import Manifest, Store, TableRef
from tasks._artifacts import publish_table
from tasks._cache import STAGE_CACHE
from tasks.reward import RewardSummary

__all__ = ["DatasetRef", "ExportParams", "export_dataset", "load_dataset"]

DEFAULT_SYSTEM_PROMPT = "You answer customers' questions about their orders."


class ExportParams(BaseModel):
    """Which trajectories become which kind of dataset."""

    kind: Literal["sft", "dpo", "grpo"] = Field("sft", description="dataset kind")
    suite: str | None = Field("conversation", description="only this suite (None: all)")
    family: str | None = Field("order_status", description="only this task family (None: all)")
    only_success: bool = Field(True, description="SFT: keep successful trajectories only")
    min_reward: float | None = Field(None, description="SFT: keep rewards >= this")
    system_prompt: str | None = Field(DEFAULT_SYSTEM_PROMPT, description="system message")


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


def _filter(params: ExportParams):
    import polars as pl

    from knowlyr.taskset import split_of

    expr = pl.col("task_id").map_elements(split_of, return_dtype=pl.String) == "train"
    if params.suite:
        expr &= pl.col("suite") == params.suite
        if params.family:
            expr &= pl.col("task_id").str.starts_with(f"{params.suite}-{params.family}-")
    return expr


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="export-{params.kind}-{trajectories.table}@{trajectories.version}",
)
def export_dataset(
    trajectories: TableRef, rewards: list[RewardSummary], params: ExportParams
) -> DatasetRef:
    """Export the train-split trajectories at this version with their rewards as a dataset."""
    import polars as pl

    from knowlyr.export import export_dpo, export_grpo, export_sft

    store = Store.open(trajectories.store)
    trajs = store.read_trajectories(version=trajectories.version, filter=_filter(params))
    hashes = sorted({h for r in rewards for h in r.config_hashes})
    rows = store.read("rewards", filter=pl.col("config_hash").is_in(hashes))
    by_id = {
        i: t for i, t in zip(rows["trajectory_id"], rows["total"], strict=True) if t is not None
    }
    if params.kind == "sft":
        result = export_sft(
            trajs,
            system_prompt=params.system_prompt,
            rewards=by_id,
            only_success=params.only_success,
            min_reward=params.min_reward,
        )
    elif params.kind == "dpo":
        result = export_dpo(trajs, system_prompt=params.system_prompt, rewards=by_id)
    else:
        result = export_grpo(trajs, system_prompt=params.system_prompt, rewards=by_id)
    scope = "-".join(x for x in (params.suite, params.family) if x) or "all"
    name = f"{params.kind}-{scope}-t{trajectories.version}-{'-'.join(h[:8] for h in hashes)}"
    manifest = result.to_store(store, name=name)
    store.record_run(
        "export",
        inputs={"trajectories": trajectories.version},
        outputs={"datasets": manifest.version},
        params={"name": name, **params.model_dump(), "reward_configs": hashes},
    )
    ref = DatasetRef(
        name=name,
        kind=params.kind,
        rows=len(result),
        rejected=len(result.rejected),
        datasets=manifest,
        trajectories=trajectories,
    )
    publish_table(
        "export-counts",
        [{"dataset": name, "kind": params.kind, "in": len(trajs), "rows": ref.rows,
          "rejected": ref.rejected, "datasets_version": manifest.version}],
        "Rows exported and the dataset version",
    )  # fmt: skip
    return ref


def load_dataset(ref: DatasetRef):
    """The exported rows of ``ref`` as a Hugging Face ``datasets.Dataset``, column types as the
    exporter made them: lists of dicts (messages, tools) stay ``list<json>`` so every message
    keeps its own keys (a plain Arrow struct would merge them: ``{"order_id", "text": null}``)."""
    import orjson
    import polars as pl
    import pyarrow as pa
    from datasets import Dataset

    from knowlyr.export.sft import json_list_array

    store = Store.open(ref.datasets.store)
    frame = store.read(
        "datasets",
        version=ref.datasets.version,
        filter=pl.col("dataset") == ref.name,
        columns=["row_id", "data"],
    )
    ordered = sorted(frame.iter_rows(), key=lambda r: int(r[0].split(":", 1)[0]))
    rows = [orjson.loads(data) for _, data in ordered]
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        if any(isinstance(v, list) and v and isinstance(v[0], dict) for v in values):
            columns[name] = json_list_array([[orjson.dumps(x) for x in v or []] for v in values])
        else:
            columns[name] = pa.array(values)
    return Dataset(pa.table(columns))

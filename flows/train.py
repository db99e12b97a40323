"""``train``: an exported dataset version -> a trained checkpoint (TRL), in-process or on a
GPU work pool through ``run_deployment``."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from flows._common import run_namer
from knowlyr.store import Store
from tasks.export import DatasetRef
from tasks.train import Checkpoint, TrainParams, build_policy, train_policy

__all__ = ["TrainFlowParams", "run_training", "train"]


class TrainFlowParams(BaseModel):
    """Parameters of :func:`train`: the dataset (as exported), optional init and settings."""

    dataset: DatasetRef = Field(..., description="the export to train on (from `export`)")
    init: Checkpoint | None = Field(None, description="initial policy (default: built fresh)")
    train: TrainParams = Field(default_factory=TrainParams)


def run_training(dataset: DatasetRef, p: TrainParams) -> tuple[Checkpoint, Checkpoint]:
    """Build the initial policy and train it: in-process, or as the ``p.deployment`` deployment
    (e.g. on a GPU work pool) when one is configured."""
    init = build_policy(dataset, p.model, p.hidden_size, p.num_layers, p.seed)
    if not p.deployment:
        return init, train_policy(dataset, init, p)
    from prefect.deployments import run_deployment

    params = TrainFlowParams(
        dataset=dataset, init=init, train=p.model_copy(update={"deployment": None})
    )
    run = run_deployment(p.deployment, parameters={"params": params.model_dump(mode="json")})
    if run.state is None or not run.state.is_completed():
        raise RuntimeError(
            f"training deployment {p.deployment!r} ended {run.state}: see flow run {run.id}"
        )
    return init, trained_checkpoint(dataset.datasets.store, str(run.id))


def trained_checkpoint(store_url: str, flow_run_id: str) -> Checkpoint:
    """The checkpoint a ``train`` flow run recorded in the store's ``checkpoints`` table."""
    import polars as pl

    rows = Store.open(store_url).read("checkpoints", filter=pl.col("flow_run_id") == flow_run_id)
    if rows.height == 0:
        raise RuntimeError(f"train flow run {flow_run_id} recorded no checkpoint in {store_url}")
    return Checkpoint.model_validate_json(rows["checkpoint_json"][-1])


def _describe(p) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    ds = get("dataset") or {}
    t = get("train") or {}
    name = ds.get("name") if isinstance(ds, dict) else getattr(ds, "name", "")
    method = t.get("method", "sft") if isinstance(t, dict) else getattr(t, "method", "sft")
    return f"{method}-{name}"


@flow(name="train", flow_run_name=run_namer("train", _describe))
def train(params: TrainFlowParams) -> Checkpoint:
    """Train a policy on an exported dataset and record the checkpoint in the store."""
    from prefect.runtime import flow_run

    t = params.train
    init = params.init or build_policy(params.dataset, t.model, t.hidden_size, t.num_layers, t.seed)
    ckpt = train_policy(params.dataset, init, params.train)
    Store.open(params.dataset.datasets.store).append(
        "checkpoints",
        [{"flow_run_id": str(flow_run.id), "checkpoint": ckpt.blob,
          "checkpoint_json": ckpt.model_dump_json(), "created_at": datetime.now(UTC)}],
        key="flow_run_id",
    )  # fmt: skip
    get_run_logger().info(
        f"trained {ckpt.name} on {params.dataset}: {ckpt.path} ({ckpt.seconds:.0f} s)"
    )
    return ckpt

"""``train``: an exported dataset version -> a trained checkpoint (TRL), in-process or on a
GPU work pool through ``run_deployment``."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows._common import run_namer
from knowlyr.store import Store
from knowlyr.train.selection import restart
from tasks.export import DatasetRef
from tasks.train import Checkpoint, TrainParams, build_policy, select_checkpoint, train_policy

__all__ = [
    "SHARED_INIT_COPY_ACCURACY",
    "TrainFlowParams",
    "copies",
    "run_training",
    "train",
    "train_restarts",
]


#: A built init whose induction pretraining copies at least this share of a repeated span's
#: tokens on a fresh batch has learned the circuit (it jumps from ~5% to 95-98%): later
#: restarts start from it instead of building their own.
SHARED_INIT_COPY_ACCURACY = 0.9


def copies(init: Checkpoint) -> bool:
    """Whether ``init`` was induction-pretrained and learned to copy (then restarts share it)."""
    accuracy = init.metrics.get("induction_copy_accuracy")
    return accuracy is not None and accuracy >= SHARED_INIT_COPY_ACCURACY


class TrainFlowParams(BaseModel):
    """Parameters of :func:`train`: the dataset (as exported), optional init and settings."""

    model_config = ConfigDict(extra="forbid")

    dataset: DatasetRef = Field(..., description="the export to train on (from `export`)")
    init: Checkpoint | None = Field(None, description="initial policy (default: built fresh)")
    train: TrainParams = Field(default_factory=TrainParams)


def train_restarts(
    dataset: DatasetRef, p: TrainParams, init: Checkpoint | None = None
) -> tuple[Checkpoint, Checkpoint]:
    """Train up to ``p.restarts`` seeds (``p.seed``, ``p.seed + 1``...) and keep the one with
    the lowest validation loss; returns that candidate's initial policy and its checkpoint.

    Restarts run one after another and stop early once a candidate's validation loss is at
    or below ``p.target_eval_loss``. Each is its own cached ``train`` task run. A given
    ``init`` is the start of every restart (they then differ in data order). Otherwise the
    first seed builds one, and later restarts start from it too when its induction
    pretraining learned to copy (:data:`SHARED_INIT_COPY_ACCURACY`): the plateau a restart
    gets away from is one of SFT, not of the init (an init whose SFT stopped on it reached
    the target with other data orders; README), and rebuilding it took as long as the SFT.
    An init that did not learn to copy (or had no induction pretraining) is rebuilt with the
    next seed.
    """

    built: list[Checkpoint] = []  # the init the first restart built

    def one(seed: int) -> tuple[Checkpoint, Checkpoint]:
        # one candidate's parameters, without the selection settings (they would only split
        # the cache of identical training runs)
        q = p.model_copy(
            update={"seed": seed, "restarts": 1, "target_eval_loss": None, "deployment": None,
                    "timeout_s": None}
        )  # fmt: skip
        start = init or (built[0] if built and copies(built[0]) else None)
        if start is None:
            start = build_policy(dataset, q.model, q.hidden_size, q.num_layers, q.seed, q.induction)
            built[:] = [start]
        elif start is not init:
            get_run_logger().info(
                f"restart seed {seed} starts from {start.name} (its induction pretraining "
                f"copies {start.metrics['induction_copy_accuracy']:.0%}); only the data order "
                "differs"
            )
        return start, train_policy.with_options(timeout_seconds=p.timeout_s)(dataset, start, q)

    seeds = range(p.seed, p.seed + p.restarts)
    _, pairs = restart(one, seeds, lambda pair: pair[1].metrics, target=p.target_eval_loss)
    best = select_checkpoint([c for _, c in pairs]) if len(pairs) > 1 else 0
    losses = ", ".join(f"{c.metrics.get('eval_loss', float('nan')):.4f}" for _, c in pairs)
    get_run_logger().info(
        f"trained {len(pairs)} of up to {p.restarts} restarts (validation loss {losses}); "
        f"kept seed {p.seed + best}"
    )
    return pairs[best]


def run_training(
    dataset: DatasetRef, p: TrainParams, init: Checkpoint | None = None
) -> tuple[Checkpoint, Checkpoint]:
    """Train from ``init`` (the champion, in the nightly loop) or from freshly built initial
    policies (see :func:`train_restarts`): in-process, or as the ``p.deployment`` deployment
    (e.g. on a GPU work pool) when one is configured. Returns the kept candidate's initial
    policy and checkpoint; with a deployment, several restarts and no ``init`` the initial
    policy returned is the first seed's."""
    if not p.deployment:
        return train_restarts(dataset, p, init)
    from prefect.deployments import run_deployment

    given = init
    init = init or build_policy(dataset, p.model, p.hidden_size, p.num_layers, p.seed, p.induction)
    params = TrainFlowParams(
        dataset=dataset,
        init=init if given is not None or p.restarts == 1 else None,
        train=p.model_copy(update={"deployment": None}),
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

    _, ckpt = train_restarts(params.dataset, params.train, params.init)
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

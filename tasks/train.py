"""Train: build the initial policy for a dataset, train it with TRL, store the checkpoint."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from pathlib import Path
from typing import Any, Literal

from prefect import task
from pydantic import BaseModel, Field

from knowlyr.store import Store
from tasks._artifacts import artifact_key, in_run
from tasks._cache import STAGE_CACHE
from tasks.export import DatasetRef, load_dataset

__all__ = [
    "MODEL_LOAD_LOCK",
    "Checkpoint",
    "TrainParams",
    "build_policy",
    "checkpoint_path",
    "register_checkpoint",
    "train_policy",
]


class TrainParams(BaseModel):
    """The model and the trainer's settings (see ``knowlyr.train``)."""

    method: Literal["sft"] = Field("sft", description="trainer (SFT on the exported dataset)")
    model: str = Field("tiny", description="'tiny' (from scratch) or a local checkpoint folder")
    hidden_size: int = Field(64, gt=0, description="tiny model width")
    num_layers: int = Field(2, gt=0, description="tiny model depth")
    epochs: float = Field(10, gt=0, description="training epochs")
    learning_rate: float = Field(3e-3, gt=0, description="peak learning rate")
    batch_size: int = Field(16, gt=0, description="per-device batch size")
    seed: int = Field(0, description="weight init and data order seed")
    deployment: str | None = Field(
        None, description="run training as this deployment (e.g. 'train/gpu') via run_deployment"
    )


class Checkpoint(BaseModel):
    """A model folder, its content-addressed archive in the store and where it came from."""

    name: str
    path: str
    blob: str
    store: str
    dataset: str | None = None
    trained: bool = False
    metrics: dict[str, float] = Field(default_factory=dict)
    seconds: float = 0.0


# transformers builds a model under process-wide settings (meta device, default dtype) while
# it loads weights, so two threads of one task runner must not load models at the same time.
MODEL_LOAD_LOCK = threading.Lock()


def _root(store: Store) -> Path:
    base = Path(store.root) if store.local else Path.home() / ".cache" / "knowlyr"
    return base / "checkpoints"


def _archive(store: Store, folder: Path) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                info = tar.gettarinfo(str(f), arcname=str(f.relative_to(folder)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with f.open("rb") as fh:
                    tar.addfile(info, fh)
    return store.put_blob(buf.getvalue())


def checkpoint_path(ckpt: Checkpoint) -> str:
    """A local folder holding ``ckpt``: its path, or its archive unpacked from the store."""
    if (Path(ckpt.path) / "config.json").is_file():
        return ckpt.path
    store = Store.open(ckpt.store)
    target = _root(store) / "unpacked" / ckpt.blob[:16]
    if not (target / "config.json").is_file():
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(store.get_blob(ckpt.blob))) as tar:
            tar.extractall(target, filter="data")
    return str(target)


@task(cache_policy=STAGE_CACHE, task_run_name="init-{model}-for-{dataset.name}")
def build_policy(
    dataset: DatasetRef,
    model: str = "tiny",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
) -> Checkpoint:
    """The untrained policy: a tiny model (tokenizer trained on the dataset) or a base folder."""
    from knowlyr.train.models import build_tiny_model_for, load_model, save_model
    from knowlyr.train.run import dataset_prompt_info

    data = load_dataset(dataset)
    if model == "tiny":
        net, tok = build_tiny_model_for(
            data, hidden_size=hidden_size, num_layers=num_layers, seed=seed
        )
        name = f"init-tiny-{num_layers}x{hidden_size}"
    else:
        with MODEL_LOAD_LOCK:
            net, tok = load_model(model)
        name = f"init-{Path(model).name}"
    store = Store.open(dataset.datasets.store)
    folder = _root(store) / f"{dataset.name}-{name}-s{seed}"
    save_model(net, tok, folder, **dataset_prompt_info(data))
    return Checkpoint(
        name=name,
        path=str(folder),
        blob=_archive(store, folder),
        store=store.url,
        dataset=dataset.name,
    )


def _progress_callback(total_key: str) -> Any:
    from prefect.artifacts import create_progress_artifact, update_progress_artifact
    from transformers import TrainerCallback

    class PrefectProgress(TrainerCallback):
        """Reports training progress to a Prefect progress artifact."""

        artifact_id = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.artifact_id = create_progress_artifact(
                0.0, key=total_key, description="Training steps done"
            )

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.artifact_id is not None and state.max_steps:
                update_progress_artifact(
                    self.artifact_id, 100.0 * state.global_step / state.max_steps
                )

        def on_train_end(self, args, state, control, **kwargs):
            if self.artifact_id is not None:
                update_progress_artifact(self.artifact_id, 100.0)

    return PrefectProgress()


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="train-{params.method}-{params.model}-{params.epochs}ep",
)
def train_policy(dataset: DatasetRef, init: Checkpoint, params: TrainParams) -> Checkpoint:
    """Train ``init`` on the dataset with TRL and store the final checkpoint."""
    from knowlyr.train.models import load_model
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    data = load_dataset(dataset)
    with MODEL_LOAD_LOCK:
        model, tok = load_model(checkpoint_path(init))
    store = Store.open(dataset.datasets.store)
    run_key = hashlib.sha256(f"{init.blob}{params.model_dump_json()}".encode()).hexdigest()
    out = _root(store) / f"{dataset.name}-{params.method}-{run_key[:12]}"
    config = KnowlyrSFTConfig(
        output_dir=str(out),
        learning_rate=params.learning_rate,
        per_device_train_batch_size=params.batch_size,
        num_train_epochs=params.epochs,
        logging_steps=max(1, len(data) // params.batch_size // 4),
        disable_tqdm=True,
        seed=params.seed,
    )
    callbacks = [_progress_callback(artifact_key("train-progress"))] if in_run() else []
    result = train_sft(data, model, tok, config, callbacks=callbacks)
    blob = _archive(store, result.path)
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    store.record_run(
        "train",
        inputs={"datasets": dataset.datasets.version, "init": init.blob},
        outputs={"checkpoint": blob},
        params={**params.model_dump(), "dataset": dataset.name},
    )
    return Checkpoint(
        name=f"{params.method}-{init.name.removeprefix('init-')}",
        path=str(result.path),
        blob=blob,
        store=store.url,
        dataset=dataset.name,
        trained=True,
        metrics=metrics,
        seconds=result.seconds,
    )


def register_checkpoint(store_url: str, folder: str, *, name: str | None = None) -> Checkpoint:
    """Archive an existing checkpoint folder into the store and describe it."""
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise ValueError(f"checkpoint {folder!r} is not a model folder (no config.json)")
    store = Store.open(store_url)
    return Checkpoint(
        name=name or path.name,
        path=str(path.resolve()),
        blob=_archive(store, path),
        store=store.url,
    )

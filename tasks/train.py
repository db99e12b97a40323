"""Train: build the initial policy for a dataset, train it with TRL, store the checkpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from prefect import get_run_logger, task
from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowlyr.store import Store
from knowlyr.train.checkpoints import (
    MODEL_LOAD_LOCK,
    archive_checkpoint,
    checkpoint_root,
    init_policy,
    train_dpo_checkpoint,
    train_grpo_checkpoint,
    train_sft_checkpoint,
    unpack_checkpoint,
)
from knowlyr.train.induction import DEFAULT_STEPS
from knowlyr.train.selection import VALIDATION_METRIC, select_best, validation_split
from tasks._artifacts import (
    artifact_key,
    in_run,
    markdown_image,
    publish_table,
    republish_cached,
    short_path,
    svg_curves,
)
from tasks._cache import STAGE_CACHE
from tasks.export import DatasetRef, load_dataset

__all__ = [
    "MODEL_LOAD_LOCK",
    "Checkpoint",
    "TrainParams",
    "build_policy",
    "checkpoint_path",
    "register_checkpoint",
    "select_checkpoint",
    "train_policy",
]


class TrainParams(BaseModel):
    """The model and the trainer's settings (see ``knowlyr.train``)."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["sft", "dpo", "grpo"] = Field(
        "sft",
        description="sft: SFT on the exported (reward-filtered) trajectories; dpo: DPO on "
        "preference pairs (the init is the reference); grpo: online GRPO in the env",
    )
    model: str = Field("tiny", description="'tiny' (from scratch) or a local checkpoint folder")
    hidden_size: int = Field(128, gt=0, description="tiny model width")
    num_layers: int = Field(2, gt=0, description="tiny model depth")
    induction_steps: int | None = Field(
        None,
        ge=0,
        description="steps teaching a tiny model to copy from its context before any task "
        "data (knowlyr.train.induction); null: 1000 for 'tiny', 0 for a pretrained base",
    )
    epochs: float = Field(10, gt=0, description="training epochs")
    learning_rate: float = Field(3e-3, gt=0, description="peak learning rate")
    batch_size: int = Field(16, gt=0, description="per-device batch size")
    seed: int = Field(0, description="weight init and data order seed (of the first restart)")
    restarts: int = Field(
        4,
        ge=1,
        description="most seeds trained (seed, seed+1, ...); the lowest validation loss is kept. "
        "Later seeds start from the first seed's init when its induction pretraining learned to "
        "copy (they then differ in data order), else build their own",
    )
    target_eval_loss: float | None = Field(
        0.01,
        gt=0,
        description="stop restarting once a candidate's validation loss is at or below this "
        "(null: train all restarts)",
    )
    validation_fraction: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="share of the dataset's tasks held back from training to pick a restart",
    )
    deployment: str | None = Field(
        None, description="run training as this deployment (e.g. 'train/gpu') via run_deployment"
    )
    timeout_s: float | None = Field(
        4 * 3600.0,
        gt=0,
        description="a training task run that takes longer fails (TimedOut) and its flow with it",
    )
    beta: float = Field(0.1, gt=0, description="dpo: KL strength towards the init (reference)")
    env_id: str | None = Field(
        None, description="grpo: the env its episodes run in (iterate: the task source's env)"
    )
    num_generations: int = Field(8, ge=2, description="grpo: episodes per prompt (the group)")
    temperature: float = Field(1.0, gt=0, description="grpo: rollout sampling temperature")
    max_steps: int = Field(4, gt=0, description="grpo: tool calls per episode")

    @model_validator(mode="after")
    def _selection_needs_validation(self) -> TrainParams:
        if self.method == "grpo" and not self.env_id:
            raise ValueError(
                "method='grpo' plays episodes online: set env_id (e.g. knowlyr/conversation)"
            )
        if self.method != "sft" and (self.restarts > 1 or self.target_eval_loss):
            raise ValueError(
                f"restarts are selected by SFT validation loss; with method={self.method!r} set "
                "restarts=1 and target_eval_loss=null"
            )
        if self.validation_fraction == 0 and (self.restarts > 1 or self.target_eval_loss):
            raise ValueError(
                "restarts > 1 and target_eval_loss pick by validation loss: set "
                "validation_fraction > 0, or restarts=1 and target_eval_loss=null"
            )
        if self.induction_steps and self.model != "tiny":
            raise ValueError(
                f"induction_steps teaches a model built from scratch to copy; model="
                f"{self.model!r} is pretrained: set induction_steps=0 or leave it null"
            )
        return self

    @property
    def induction(self) -> int:
        """Induction pretraining steps of the init: ``induction_steps``, or its default."""
        if self.induction_steps is not None:
            return self.induction_steps
        return DEFAULT_STEPS if self.model == "tiny" else 0


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
    curve: dict[str, list[tuple[float, float]]] = Field(
        default_factory=dict, description="logged train / eval loss by step"
    )


def checkpoint_path(ckpt: Checkpoint) -> str:
    """A local folder holding ``ckpt``: its path, or its archive unpacked from the store."""
    if (Path(ckpt.path) / "config.json").is_file():
        return ckpt.path
    return unpack_checkpoint(Store.open(ckpt.store), ckpt.blob)


@task(cache_policy=STAGE_CACHE, task_run_name="init-{model}-s{seed}-for-{dataset.name}")
def build_policy(
    dataset: DatasetRef,
    model: str = "tiny",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    induction_steps: int = 0,
) -> Checkpoint:
    """The untrained policy: a tiny model (tokenizer trained on the dataset, then
    ``induction_steps`` of copy pretraining) or a base folder."""
    store = Store.open(dataset.datasets.store)
    out = init_policy(
        store,
        load_dataset(dataset),
        dataset_name=dataset.name,
        model=model,
        hidden_size=hidden_size,
        num_layers=num_layers,
        seed=seed,
        induction_steps=induction_steps,
    )
    if out.metrics:
        get_run_logger().info(
            f"{out.name}: induction pretraining copies {out.metrics['induction_copy_accuracy']:.0%} "
            f"of a repeated span's tokens after {out.metrics['induction_steps_taken']:.0f} of up "
            f"to {induction_steps} steps ({out.seconds:.0f} s)"
        )
    return Checkpoint(
        name=out.name,
        path=str(out.path),
        blob=out.blob,
        store=store.url,
        dataset=dataset.name,
        metrics=out.metrics,
        seconds=out.seconds,
    )


#: How often a run's loss curve artifact is redrawn at most (and once more at the end).
CURVE_UPDATES = 20


def _progress_callback(key: str, what: str) -> Any:
    from prefect.artifacts import (
        create_markdown_artifact,
        create_progress_artifact,
        update_progress_artifact,
    )
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactUpdate
    from transformers import TrainerCallback

    log = get_run_logger()
    # knowlyr.train logs every loss itself; forwarded to the run's log (PREFECT_LOGGING_EXTRA_
    # LOGGERS=knowlyr, as make and prefect.yaml set it) the callback need not repeat them
    forwarded = _forwarded("knowlyr.train")

    curve_key = key.replace("train-progress", "train-loss", 1)

    class PrefectProgress(TrainerCallback):
        """Reports training progress and each logged loss / eval metric to the run's log and
        a Prefect progress artifact (its description carries the latest numbers), and draws
        the train and eval loss so far as a ``train-loss`` markdown artifact, redrawn in place
        at most :data:`CURVE_UPDATES` times a run and at its end."""

        artifact_id = None
        curve_id = None
        latest = ""
        drawn_at = -1.0

        def __init__(self) -> None:
            self.curve: dict[str, list[tuple[float, float]]] = {"train loss": [], "eval loss": []}

        def draw(self, state: Any, final: bool = False) -> None:
            done = state.global_step / state.max_steps if state.max_steps else 1.0
            if not final and done - self.drawn_at < 1.0 / CURVE_UPDATES:
                return
            self.drawn_at = done
            svg = svg_curves(
                self.curve,
                title=f"{what}: loss by step",
                xlabel="optimizer step",
                ylabel="loss",
            )
            markdown = (
                f"{markdown_image(svg, 'loss by step')}\n\n"
                f"Step {state.global_step}/{state.max_steps}: {self.latest}"
            )
            if self.curve_id is None:
                self.curve_id = create_markdown_artifact(
                    markdown, key=curve_key, description=f"{what}: train and eval loss by step"
                )
            else:  # the same artifact redrawn in place: one card in the run's Artifacts tab
                with get_client(sync_client=True) as client:
                    client.update_artifact(self.curve_id, ArtifactUpdate(data=markdown))

        def on_train_begin(self, args, state, control, **kwargs):
            self.artifact_id = create_progress_artifact(
                0.0, key=key, description=f"{what}: training started"
            )

        def on_log(self, args, state, control, logs=None, **kwargs):
            numbers = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
            for name, k in (("train loss", "loss"), ("eval loss", "eval_loss")):
                if k in numbers:
                    self.curve[name].append((float(state.global_step), float(numbers[k])))
            shown = [
                k for k in ("loss", "eval_loss", "train_loss", "learning_rate") if k in numbers
            ]
            self.latest = ", ".join(f"{k} {numbers[k]:.4g}" for k in shown)
            step = f"step {state.global_step}/{state.max_steps}"
            if not forwarded:
                log.info(f"{what}: {step}, epoch {state.epoch or 0:.2f}: {self.latest}")
            if self.artifact_id is not None and state.max_steps:
                update_progress_artifact(
                    self.artifact_id,
                    100.0 * state.global_step / state.max_steps,
                    description=f"{what}: {step}, {self.latest}",
                )

            if any(k in numbers for k in ("loss", "eval_loss")):
                self.draw(state)

        def on_train_end(self, args, state, control, **kwargs):
            self.draw(state, final=True)
            if self.artifact_id is not None:
                update_progress_artifact(
                    self.artifact_id, 100.0, description=f"{what}: done, {self.latest}"
                )

    return PrefectProgress()


def _forwarded(logger: str) -> bool:
    """Whether Prefect forwards ``logger``'s records to the run's log (its extra loggers)."""
    from prefect.settings import get_current_settings

    extra = get_current_settings().logging.extra_loggers or []
    names = [extra] if isinstance(extra, str) else list(extra)
    return any(logger == n or logger.startswith(f"{n}.") for n in names)


def _clear_unfinished(folder: Path) -> None:
    """Remove a checkpoint folder that holds no saved model (a crashed or failed attempt)."""
    import shutil

    saved = (folder / "config.json", folder / "final" / "config.json")  # see knowlyr.train.run
    if folder.is_dir() and not any(f.is_file() for f in saved):
        shutil.rmtree(folder, ignore_errors=True)


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="train-{params.method}-{params.model}-{params.epochs}ep-s{params.seed}",
)
def train_policy(dataset: DatasetRef, init: Checkpoint, params: TrainParams) -> Checkpoint:
    """Train ``init`` on the dataset with TRL and store the final checkpoint.

    With ``params.validation_fraction`` > 0 that share of the tasks is held back and the
    checkpoint's metrics carry the final model's ``eval_loss`` on it.
    """
    store = Store.open(dataset.datasets.store)
    run_key = hashlib.sha256(f"{init.blob}{params.model_dump_json()}".encode()).hexdigest()
    what = f"{params.method} seed {params.seed} on {dataset.name}"
    progress_key = artifact_key("train-progress", params.method, f"s{params.seed}")
    callbacks = [_progress_callback(progress_key, what)] if in_run() else []
    rows = load_dataset(dataset)
    if dataset.kind != params.method:
        raise ValueError(
            f"train method {params.method!r} needs a {params.method} export, got the "
            f"{dataset.kind} dataset {dataset.name}"
        )
    output_dir = checkpoint_root(store) / f"{dataset.name}-{params.method}-{run_key[:12]}"
    _clear_unfinished(output_dir)  # an attempt killed mid-training left it empty
    common = {
        "init": checkpoint_path(init),
        "output_dir": output_dir,
        "learning_rate": params.learning_rate,
        "batch_size": params.batch_size,
        "epochs": params.epochs,
        "seed": params.seed,
        "callbacks": callbacks,
    }
    try:
        if params.method == "sft":
            val = None
            if params.validation_fraction > 0:
                rows, val = validation_split(rows, params.validation_fraction)
            out = train_sft_checkpoint(store, rows, eval_dataset=val, **common)
        elif params.method == "dpo":
            out = train_dpo_checkpoint(store, rows, beta=params.beta, **common)
        else:
            out = train_grpo_checkpoint(
                store,
                rows,
                env_id=params.env_id,
                num_generations=params.num_generations,
                temperature=params.temperature,
                max_steps=params.max_steps,
                **common,
            )
    except BaseException:
        _clear_unfinished(output_dir)
        raise
    store.record_run(
        "train",
        inputs={"datasets": dataset.datasets.version, "init": init.blob},
        outputs={"checkpoint": out.blob},
        params={**params.model_dump(), "dataset": dataset.name},
    )
    return Checkpoint(
        name=f"{params.method}-{init.name.removeprefix('init-')}",
        path=str(out.path),
        blob=out.blob,
        store=store.url,
        dataset=dataset.name,
        trained=True,
        metrics=out.metrics,
        seconds=out.seconds,
        curve=out.curve,
    )


@task(
    cache_policy=STAGE_CACHE,
    task_run_name="select-checkpoint-by-{metric}",
    on_completion=[republish_cached],
)
def select_checkpoint(candidates: list[Checkpoint], metric: str = VALIDATION_METRIC) -> int:
    """Index of the trained candidate with the lowest ``metric`` (validation loss); the
    candidates and the choice go to a ``train-candidates`` table artifact."""
    best = select_best([c.metrics for c in candidates], key=metric)
    publish_table(
        "train-candidates",
        [
            {
                "restart": i,
                "kept": i == best,
                metric: c.metrics.get(metric),
                "last step loss": c.metrics.get("last_loss"),
                "mean train loss": c.metrics.get("train_loss"),
                "seconds": round(c.seconds, 1),
                "checkpoint": short_path(c.path, c.store),
            }
            for i, c in enumerate(candidates)
        ],
        f"Restarts trained on the same data; the lowest {metric} is kept",
    )
    return best


def register_checkpoint(store_url: str, folder: str, *, name: str | None = None) -> Checkpoint:
    """Archive an existing checkpoint folder into the store and describe it."""
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise ValueError(f"checkpoint {folder!r} is not a model folder (no config.json)")
    store = Store.open(store_url)
    return Checkpoint(
        name=name or path.name,
        path=str(path.resolve()),
        blob=archive_checkpoint(store, path),
        store=store.url,
    )

"""Checkpoints in the store: content-addressed archives, unpacking, the initial and trained policy.

A checkpoint folder is archived as a deterministic tar (sorted files, zeroed mtimes and
owners) into the store's blobs, so the same weights always have the same address and any
machine holding the store can unpack them (:func:`unpack_checkpoint`). :func:`init_policy`
, :func:`train_sft_checkpoint`, :func:`train_dpo_checkpoint` and :func:`train_grpo_checkpoint`
build and train a policy for a stored dataset and return the folder with its archive.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowlyr.agents.inference import MODEL_LOAD_LOCK
from knowlyr.errors import ConfigError

if TYPE_CHECKING:
    from knowlyr.store import Store

__all__ = [
    "MODEL_LOAD_LOCK",
    "StoredCheckpoint",
    "archive_checkpoint",
    "checkpoint_root",
    "init_policy",
    "train_dpo_checkpoint",
    "train_grpo_checkpoint",
    "train_sft_checkpoint",
    "unpack_checkpoint",
]


@dataclass
class StoredCheckpoint:
    """A model folder and its archive in the store.

    Attributes:
        name: a short name (``init-tiny-2x64``, ``init-<base folder>``).
        path: the folder.
        blob: the archive's digest in the store's blobs.
        metrics: numeric final training metrics (trained checkpoints): TRL's
            ``train_loss`` is the mean loss over the whole run; ``last_loss`` is the loss of
            the last logged step; ``eval_loss`` the final model's on held-back rows.
        seconds: training wall time (trained checkpoints).
        curve: the logged losses by step, ``{"train loss": [(step, loss), ...],
            "eval loss": [...]}``, at most :data:`CURVE_POINTS` points each.
    """

    name: str
    path: Path
    blob: str
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    curve: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


#: The most points a stored loss curve keeps per series (evenly spaced, the last one kept).
CURVE_POINTS = 200


def loss_curve(log_history: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Train and eval loss by step from a trainer's ``log_history`` (at most
    :data:`CURVE_POINTS` points each, the last point always kept).

    Example:
        >>> loss_curve([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0, "eval_loss": 1.5}])
        {'train loss': [(1.0, 2.0), (2.0, 1.0)], 'eval loss': [(2.0, 1.5)]}
    """
    out: dict[str, list[tuple[float, float]]] = {}
    for name, key in (("train loss", "loss"), ("eval loss", "eval_loss")):
        pts = [
            (float(h["step"]), float(h[key]))
            for h in log_history
            if isinstance(h.get(key), int | float) and "step" in h
        ]
        if len(pts) > CURVE_POINTS:
            keep = {round(i * (len(pts) - 1) / (CURVE_POINTS - 1)) for i in range(CURVE_POINTS)}
            pts = [p for i, p in enumerate(pts) if i in keep]
        if pts:
            out[name] = pts
    return out


def checkpoint_root(store: Store) -> Path:
    """Where checkpoint folders of ``store`` live: under a local store, else the user cache."""
    base = Path(store.root) if store.local else Path.home() / ".cache" / "knowlyr"
    return base / "checkpoints"


def archive_checkpoint(store: Store, folder: str | Path) -> str:
    """Archive ``folder`` as a deterministic tar into the store's blobs; return its digest.

    Example:
        >>> blob = archive_checkpoint(store, "runs/sft")  # doctest: +SKIP
        >>> unpack_checkpoint(store, blob)  # doctest: +SKIP
        '.../checkpoints/unpacked/9f2c...'
    """
    folder = Path(folder)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                info = tar.gettarinfo(str(f), arcname=str(f.relative_to(folder)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with f.open("rb") as fh:
                    tar.addfile(info, fh)
    return store.put_blob(buf.getvalue())


def unpack_checkpoint(store: Store, blob: str, *, path: str | Path | None = None) -> str:
    """A local model folder for the archive ``blob``: ``path`` if it still holds the model,
    else the archive unpacked (once) under :func:`checkpoint_root`.

    Raises:
        NotFoundError: the blob is not in the store.
    """
    if path is not None and (Path(path) / "config.json").is_file():
        return str(path)
    target = checkpoint_root(store) / "unpacked" / blob[:16]
    if not (target / "config.json").is_file():
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(store.get_blob(blob))) as tar:
            tar.extractall(target, filter="data")
    return str(target)


def init_policy(
    store: Store,
    dataset: Any,
    *,
    dataset_name: str,
    model: str = "tiny",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    induction_steps: int = 0,
) -> StoredCheckpoint:
    """The untrained policy for ``dataset``, saved and archived into the store.

    ``model="tiny"`` builds a tiny model from scratch whose tokenizer is trained on the
    dataset's texts, then (``induction_steps`` > 0) teaches it to copy from its context on
    synthetic sequences (:mod:`knowlyr.train.induction`: no task data, so the policy is still
    untrained on the tasks); anything else is a local checkpoint folder loaded as the base.
    The dataset's tools and system prompt are saved with the model.

    Args:
        store: the store to archive into.
        dataset: an exported ``datasets.Dataset`` (see
            :func:`knowlyr.export.store_io.load_dataset`).
        dataset_name: the dataset's name (part of the folder name).
        model: ``"tiny"`` or a local checkpoint folder.
        hidden_size: tiny model width.
        num_layers: tiny model depth.
        seed: weight init seed (and the synthetic sequences' seed).
        induction_steps: induction pretraining steps of a tiny model (0: none). The result's
            ``metrics`` hold ``induction_copy_accuracy`` and ``seconds`` its time.

    Raises:
        ConfigError: ``induction_steps`` > 0 for a base folder (it copies already).

    Example:
        >>> ckpt = init_policy(store, ds, dataset_name="sft-all-t0-ab12cd34")  # doctest: +SKIP
        >>> ckpt.name  # doctest: +SKIP
        'init-tiny-2x64'
    """
    from knowlyr.train.models import build_tiny_model_for, load_model, save_model
    from knowlyr.train.run import dataset_prompt_info

    metrics: dict[str, float] = {}
    seconds = 0.0
    if model == "tiny":
        net, tok = build_tiny_model_for(
            dataset, hidden_size=hidden_size, num_layers=num_layers, seed=seed
        )
        name = f"init-tiny-{num_layers}x{hidden_size}"
        if induction_steps:
            from knowlyr.train.induction import induction_pretrain

            done = induction_pretrain(net, tok, steps=induction_steps, seed=seed)
            name += f"-ind{induction_steps}"
            metrics["induction_copy_accuracy"] = done.copy_accuracy
            metrics["induction_steps_taken"] = done.steps
            seconds = done.seconds
    elif induction_steps:
        raise ConfigError(
            f"induction_steps={induction_steps} teaches a model built from scratch to copy; the "
            f"base {model} is pretrained: set induction_steps=0"
        )
    else:
        net, tok = load_model(model)
        name = f"init-{Path(model).name}"
    folder = checkpoint_root(store) / f"{dataset_name}-{name}-s{seed}"
    save_model(net, tok, folder, **dataset_prompt_info(dataset))
    return StoredCheckpoint(
        name=name,
        path=folder,
        blob=archive_checkpoint(store, folder),
        metrics=metrics,
        seconds=seconds,
    )


def _load(init: str | Path) -> tuple[Any, Any]:
    from knowlyr.train.models import load_model

    return load_model(init)


def _stored(store: Store, result: Any) -> StoredCheckpoint:
    """A finished :class:`~knowlyr.train.run.TrainResult`, archived into the store."""
    return StoredCheckpoint(
        name=Path(result.path).name,
        path=Path(result.path),
        blob=archive_checkpoint(store, result.path),
        metrics=_final_metrics(result),
        seconds=result.seconds,
        curve=loss_curve(result.log_history),
    )


def _final_metrics(result: Any) -> dict[str, float]:
    """The result's numeric metrics plus ``last_loss``, the last logged step's loss (TRL's
    ``train_loss`` is the mean over the run, far above it when the loss fell)."""
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
    steps = [h["loss"] for h in result.log_history if isinstance(h.get("loss"), int | float)]
    if steps:
        metrics["last_loss"] = float(steps[-1])
    return metrics


def train_sft_checkpoint(
    store: Store,
    dataset: Any,
    *,
    init: str | Path,
    output_dir: str | Path,
    learning_rate: float = 3e-3,
    batch_size: int = 16,
    epochs: float = 10,
    seed: int = 0,
    eval_dataset: Any = None,
    callbacks: Sequence[Any] = (),
) -> StoredCheckpoint:
    """SFT the model folder ``init`` on ``dataset`` with TRL; archive the result into the store.

    Logs about once an epoch (to the ``knowlyr.train`` logger), without progress bars. With ``eval_dataset`` the final
    model is evaluated on it and the metrics carry ``eval_loss`` (see
    :mod:`knowlyr.train.selection`).

    Args:
        store: the store to archive into.
        dataset: an exported SFT ``datasets.Dataset``.
        init: the initial model folder (see :func:`unpack_checkpoint`).
        output_dir: where the trained model is saved.
        learning_rate: peak learning rate.
        batch_size: per-device batch size.
        epochs: training epochs.
        seed: data order seed.
        eval_dataset: held-back rows (e.g. from :func:`~knowlyr.train.selection.validation_split`).
        callbacks: ``transformers.TrainerCallback`` objects.

    Returns:
        The trained folder, its archive, its numeric final metrics and the training time
        (``name`` is the saved folder's name).

    Example:
        >>> out = train_sft_checkpoint(store, ds, init=ckpt.path, output_dir="runs/sft")  # doctest: +SKIP
        >>> out.metrics["train_loss"]  # doctest: +SKIP
    """
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    model, tok = _load(init)
    config = KnowlyrSFTConfig(
        output_dir=str(output_dir),
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        num_train_epochs=epochs,
        logging_steps=max(1, len(dataset) // batch_size),
        disable_tqdm=True,
        seed=seed,
    )
    extra = {"eval_dataset": eval_dataset} if eval_dataset is not None else {}
    return _stored(
        store, train_sft(dataset, model, tok, config, callbacks=list(callbacks), **extra)
    )


def train_dpo_checkpoint(
    store: Store,
    dataset: Any,
    *,
    init: str | Path,
    output_dir: str | Path,
    learning_rate: float = 5e-4,
    batch_size: int = 16,
    epochs: float = 2,
    seed: int = 0,
    beta: float = 0.1,
    callbacks: Sequence[Any] = (),
) -> StoredCheckpoint:
    """DPO the model folder ``init`` on preference pairs with TRL; archive the result.

    ``init`` is both the policy's start and the frozen reference (the champion, in the
    nightly loop). Logs about once an epoch (to the ``knowlyr.train`` logger), without progress bars.

    Args:
        store: the store to archive into.
        dataset: an exported DPO ``datasets.Dataset`` (``prompt`` / ``chosen`` / ``rejected``).
        init: the initial (and reference) model folder.
        output_dir: where the trained model is saved.
        learning_rate: peak learning rate.
        batch_size: per-device batch size.
        epochs: training epochs.
        seed: data order seed.
        beta: DPO's KL strength (higher stays closer to the reference).
        callbacks: ``transformers.TrainerCallback`` objects.
    """
    from knowlyr.train.dpo_config import KnowlyrDPOConfig
    from knowlyr.train.run import train_dpo

    model, tok = _load(init)
    config = KnowlyrDPOConfig(
        output_dir=str(output_dir),
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        num_train_epochs=epochs,
        logging_steps=max(1, len(dataset) // batch_size),
        disable_tqdm=True,
        seed=seed,
        beta=beta,
    )
    return _stored(store, train_dpo(dataset, model, tok, config, callbacks=list(callbacks)))


def train_grpo_checkpoint(
    store: Store,
    dataset: Any,
    *,
    init: str | Path,
    output_dir: str | Path,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    learning_rate: float = 1e-4,
    batch_size: int = 16,
    epochs: float = 1,
    seed: int = 0,
    num_generations: int = 8,
    temperature: float = 1.0,
    max_steps: int = 4,
    max_completion_length: int = 256,
    callbacks: Sequence[Any] = (),
) -> StoredCheckpoint:
    """Online GRPO of the model folder ``init`` in ``env_id`` with TRL; archive the result.

    Each row of ``dataset`` (a :func:`~knowlyr.export.export_grpo` export: prompt + task id) is
    played ``num_generations`` times in the environment; the episodes' outcome scores are
    the rewards (see :mod:`knowlyr.train.grpo_trainer`). GRPO learns only from a policy that
    succeeds some of the time (a group whose episodes all score the same has no advantage):
    start from a partly right champion. For the tiny models, 3e-4 learned where TRL's default
    1e-6 did nothing and 1e-3 collapsed the policy (``tests/train/test_grpo_learning.py``:
    held-out success 0.48 -> 0.93 in 20 steps of 8 prompts x 8 episodes).

    Args:
        store: the store to archive into.
        dataset: an exported GRPO ``datasets.Dataset``.
        init: the initial model folder.
        output_dir: where the trained model is saved.
        env_id: the registered env the episodes run in (the tasks' env).
        env_kwargs: extra env arguments.
        learning_rate: peak learning rate.
        batch_size: completions per device batch (a multiple of ``num_generations``).
        epochs: passes over the prompts.
        seed: sampling and data order seed.
        num_generations: episodes per prompt (the GRPO group).
        temperature: sampling temperature of the rollouts.
        max_steps: tool calls per episode.
        max_completion_length: tokens of a whole episode, tool results included (TRL drops
            a tool result past it, so the episode never ends: order_status needs ~90).
        callbacks: ``transformers.TrainerCallback`` objects.
    """
    from knowlyr.train.grpo_config import KnowlyrGRPOConfig
    from knowlyr.train.grpo_trainer import environment_factory_for
    from knowlyr.train.run import dataset_prompt_info, train_grpo

    model, tok = _load(init)
    batch = max(num_generations, batch_size - batch_size % num_generations)
    config = KnowlyrGRPOConfig(
        output_dir=str(output_dir),
        learning_rate=learning_rate,
        per_device_train_batch_size=batch,
        num_generations=num_generations,
        num_train_epochs=epochs,
        temperature=temperature,
        max_tool_calling_iterations=max_steps,
        max_completion_length=max_completion_length,
        beta=0.0,
        logging_steps=1,
        disable_tqdm=True,
        seed=seed,
    )
    factory = environment_factory_for(
        env_id,
        env_kwargs=env_kwargs,
        tools=dataset_prompt_info(dataset).get("tools"),
        max_steps=max_steps,
    )
    result = train_grpo(
        dataset, model, tok, config, environment_factory=factory, callbacks=list(callbacks)
    )
    return _stored(store, result)

"""Thin entry points: build the trainer, train, save the final model with what inference needs.

The saved folder (``<output_dir>/final``) holds the model, the tokenizer and
``knowlyr_model.json`` with the tool schemas and system prompt of the training data, so
``AgentInference.from_pretrained(path).create_agent()`` shows the model exactly what it was
trained on. The tools are saved only when every row declares the same ones; a model trained
on several tool sets (several suites) is shown each episode's env tools instead.

Example:
    >>> result = train_sft(export.dataset, model, tokenizer, KnowlyrSFTConfig(output_dir="runs/sft"))  # doctest: +SKIP
    >>> result.path  # doctest: +SKIP
    PosixPath('runs/sft/final')
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowlyr.errors import TrainError

__all__ = [
    "TrainResult",
    "dataset_prompt_info",
    "load_dataset_dir",
    "train_dpo",
    "train_grpo",
    "train_sft",
]


@dataclass
class TrainResult:
    """Where the trained model was saved, the final metrics and the log history."""

    path: Path
    metrics: dict[str, Any]
    seconds: float
    log_history: list[dict[str, Any]] = field(default_factory=list)
    trainer: Any = field(default=None, repr=False)


log = logging.getLogger("knowlyr.train")


def log_callback() -> Any:
    """A ``TrainerCallback`` that sends the trainer's log dicts to the ``knowlyr.train`` logger
    (one line each, numbers rounded) instead of printing them."""
    from transformers import TrainerCallback

    class LogCallback(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                parts = [
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items()
                ]
                log.info(f"step {state.global_step}/{state.max_steps}: {' '.join(parts)}")

    return LogCallback()


def dataset_prompt_info(dataset: Any) -> dict[str, Any]:
    """The ``tools`` and system prompt of an exported dataset, for a checkpoint's marker.

    ``tools``: the tools every row declares; ``None`` when the rows declare different ones (a
    dataset of several suites, each with its tools), so that an agent acting with the
    checkpoint shows each episode its env's tools (the reset ``info["tools"]``) instead of one
    suite's. The system prompt is the first row's.
    """
    if len(dataset) == 0:
        return {}
    row = dataset[0]
    msgs = row.get("messages") or row.get("prompt") or []
    system = next(
        (m["content"] for m in msgs if isinstance(m, dict) and m.get("role") == "system"), None
    )
    tools = row.get("tools")
    if tools is not None and not _same_in_every_row(dataset, "tools"):
        tools = None
    return {"tools": tools, "system_prompt": system}


def _same_in_every_row(dataset: Any, column: str) -> bool:
    """Whether every row of ``dataset`` has the same ``column`` value. An exported dataset's
    ``list<json>`` column is compared as Arrow (one joined string per row, its distinct count),
    without decoding its rows; anything else row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if hasattr(dataset, "with_format"):  # a datasets.Dataset: its rows (selection included)
        col = dataset.with_format("arrow")[column]
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_list(col.type) and isinstance(col.type.value_type, pa.JsonType):
            joined = pc.binary_join(col.cast(pa.list_(pa.string())), "\n")  # JSON has no raw \n
            return pc.count_distinct(joined, mode="all").as_py() <= 1
        values = col.to_pylist()
    else:
        values = [r.get(column) for r in dataset]
    return all(v == values[0] for v in values)


def load_dataset_dir(path: str | Path) -> Any:
    """Load an export saved by :meth:`ExportResult.save` (or a ``save_to_disk`` / parquet path)."""
    from datasets import Dataset, load_from_disk

    p = Path(path)
    if (p / "dataset").is_dir():
        return load_from_disk(str(p / "dataset"))
    if p.suffix == ".parquet":
        return Dataset.from_parquet(str(p))
    if p.is_dir():
        return load_from_disk(str(p))
    raise TrainError(
        f"{p} is not an exported dataset (expected a folder written by ExportResult.save)"
    )


def _finish(trainer: Any, dataset: Any, output_dir: str, started: float, out: Any) -> TrainResult:
    from knowlyr.train.models import save_model

    path = Path(output_dir) / "final"
    model = trainer.model
    if hasattr(model, "merge_and_unload") and getattr(trainer.args, "lora_r", None):
        model = model.merge_and_unload()
    save_model(model, trainer.processing_class, path, **dataset_prompt_info(dataset))
    metrics = dict(out.metrics)
    if getattr(trainer, "eval_dataset", None) is not None:
        # the final model's loss on the held-back rows (``eval_loss``...): what restarts are
        # selected by (see knowlyr.train.selection)
        metrics.update(trainer.evaluate())
    return TrainResult(
        path=path,
        metrics=metrics,
        seconds=time.perf_counter() - started,
        log_history=list(trainer.state.log_history),
        trainer=trainer,
    )


def _train(
    trainer_cls: Any, dataset: Any, model: Any, tokenizer: Any, config: Any, kwargs: dict[str, Any]
) -> TrainResult:
    from contextlib import nullcontext

    from knowlyr._progress import quiet_progress
    from knowlyr._threads import one_thread, small_cpu_model

    started = time.perf_counter()
    with quiet_progress():
        trainer = trainer_cls(
            model=model, args=config, train_dataset=dataset, processing_class=tokenizer, **kwargs
        )
    if getattr(config, "disable_tqdm", False):
        # transformers prints every log dict to stdout when its progress bar is off: send them
        # to the ``knowlyr.train`` logger instead (a Prefect run log picks it up)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(log_callback())
    # a tiny model trains ~3x faster on one CPU thread (see knowlyr._threads)
    with one_thread() if small_cpu_model(trainer.model) else nullcontext(), quiet_progress():
        out = trainer.train()
        return _finish(trainer, dataset, config.output_dir, started, out)


def train_sft(
    dataset: Any,
    model: Any,
    tokenizer: Any,
    config: Any = None,
    *,
    packing: bool | None = None,
    max_length: int | None = None,
    **trainer_kwargs: Any,
) -> TrainResult:
    """SFT with :class:`~knowlyr.train.sft_trainer.KnowlyrSFTTrainer` and save the result.

    Args:
        dataset: an exported SFT dataset.
        model, tokenizer: the model to train and its tokenizer.
        config: a :class:`~knowlyr.train.sft_config.KnowlyrSFTConfig` (default: one writing
            to ``runs/sft``).
        packing: when given, overrides ``config.packing``: pack rows into ``max_length``-token
            budgets without padding (see :mod:`knowlyr.train.packing`).
        max_length: when given, overrides ``config.max_length`` (packing needs one).
        **trainer_kwargs: passed to the trainer (``callbacks``, ``eval_dataset``...).

    Raises:
        TrainError: packing without ``max_length`` (here or in ``config``).

    Example:
        >>> result = train_sft(ds, model, tok, config, packing=True, max_length=4096)  # doctest: +SKIP
    """
    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from knowlyr.train.sft_trainer import KnowlyrSFTTrainer

    config = config or KnowlyrSFTConfig(output_dir="runs/sft")
    overrides = {
        k: v for k, v in (("packing", packing), ("max_length", max_length)) if v is not None
    }
    if overrides:  # a new config, so its checks (packing needs max_length...) run again
        config = dataclasses.replace(config, **overrides)
    return _train(KnowlyrSFTTrainer, dataset, model, tokenizer, config, trainer_kwargs)


def train_dpo(
    dataset: Any, model: Any, tokenizer: Any, config: Any = None, **trainer_kwargs: Any
) -> TrainResult:
    """DPO with :class:`~knowlyr.train.dpo_trainer.KnowlyrDPOTrainer` and save the result."""
    from knowlyr.train.dpo_config import KnowlyrDPOConfig
    from knowlyr.train.dpo_trainer import KnowlyrDPOTrainer

    config = config or KnowlyrDPOConfig(output_dir="runs/dpo")
    return _train(KnowlyrDPOTrainer, dataset, model, tokenizer, config, trainer_kwargs)


def train_grpo(
    dataset: Any, model: Any, tokenizer: Any, config: Any = None, **trainer_kwargs: Any
) -> TrainResult:
    """GRPO with :class:`~knowlyr.train.grpo_trainer.KnowlyrGRPOTrainer` and save the result."""
    from knowlyr.train.grpo_config import KnowlyrGRPOConfig
    from knowlyr.train.grpo_trainer import KnowlyrGRPOTrainer

    config = config or KnowlyrGRPOConfig(output_dir="runs/grpo")
    return _train(KnowlyrGRPOTrainer, dataset, model, tokenizer, config, trainer_kwargs)

"""TRL's SFTTrainer extended for agent trajectories.

What it adds to ``trl.SFTTrainer`` (everything else is TRL's):

- **observation masking**: ``assistant_only_loss`` on by default, so labels are -100 on every
  system, user and tool token;
- **step-weighted loss**: each assistant turn's tokens are weighted by the row's
  ``step_weights`` (from step rewards); weight-0 turns (chunk context) get label -100;
- **curriculum**: rows ordered by (steps, -reward) and read in that order;
- **LoRA** from ``lora_r`` through peft.

Example:
    >>> from knowlyr.train import KnowlyrSFTConfig, KnowlyrSFTTrainer, build_tiny_model
    >>> model, tok = build_tiny_model(texts)  # doctest: +SKIP
    >>> trainer = KnowlyrSFTTrainer(model=model, args=KnowlyrSFTConfig(output_dir="out"),
    ...                             train_dataset=export.dataset, processing_class=tok)  # doctest: +SKIP
    >>> trainer.train()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch
from trl import SFTTrainer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from knowlyr.errors import TrainError
from knowlyr.train._defaults import lora_config
from knowlyr.train.sft_config import KnowlyrSFTConfig

__all__ = [
    "KnowlyrSFTConfig",
    "KnowlyrSFTTrainer",
    "WeightedDataCollator",
    "curriculum_order",
    "token_weights",
]


def token_weights(labels: list[int], turn_weights: list[float]) -> tuple[list[int], list[float]]:
    """Spread per-turn weights over tokens and mask weight-0 turns.

    Each maximal run of labels that are not -100 is one assistant turn (the chat template puts
    the masked role header between turns); the k-th run gets ``turn_weights[k]``. Returns the
    new labels (-100 where the weight is 0) and one weight per token (0 on masked tokens).
    """
    out_labels = list(labels)
    weights = [0.0] * len(labels)
    turn = -1
    prev_masked = True
    for i, lab in enumerate(labels):
        if lab == -100:
            prev_masked = True
            continue
        if prev_masked:
            turn += 1
            prev_masked = False
        w = float(turn_weights[turn]) if turn < len(turn_weights) else 1.0
        if w <= 0.0:
            out_labels[i] = -100
        else:
            weights[i] = w
    return out_labels, weights


def curriculum_order(dataset: Any) -> Any:
    """The rows sorted easy-first: fewest steps, then highest reward (stable)."""
    cols = dataset.column_names
    if "n_steps" not in cols:
        raise TrainError(
            "curriculum needs an `n_steps` column (an SFT export has one); set curriculum=False"
        )
    steps = dataset["n_steps"]
    reward = dataset["reward"] if "reward" in cols else [0.0] * len(steps)
    order = sorted(range(len(steps)), key=lambda i: (steps[i], -(reward[i] or 0.0)))
    return dataset.select(order)


class WeightedDataCollator(DataCollatorForLanguageModeling):
    """TRL's language-modeling collator that also pads a ``loss_weights`` column (with 0)."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        weights = (
            [ex.pop("loss_weights") for ex in examples] if "loss_weights" in examples[0] else None
        )
        out = super().torch_call(examples)
        if weights is not None:
            if self.padding_free:
                out["loss_weights"] = torch.tensor(
                    [w for ws in weights for w in ws], dtype=torch.float32
                )[None]
            else:
                width = out["input_ids"].shape[1]
                padded = torch.zeros((len(weights), width), dtype=torch.float32)
                for i, ws in enumerate(weights):
                    padded[i, : len(ws)] = torch.tensor(ws[:width], dtype=torch.float32)
                out["loss_weights"] = padded
        return out


class KnowlyrSFTTrainer(SFTTrainer):
    """``trl.SFTTrainer`` with observation masking, step-weighted loss, curriculum and LoRA.

    Takes the same arguments as ``SFTTrainer``; ``args`` should be a
    :class:`~knowlyr.train.sft_config.KnowlyrSFTConfig` (a plain ``SFTConfig`` gets the
    enhancements switched off).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        self._step_weighted = bool(getattr(config, "step_weighted_loss", False))
        self._curriculum = bool(getattr(config, "curriculum", False))
        if self._curriculum and kwargs.get("train_dataset") is not None:
            kwargs["train_dataset"] = curriculum_order(kwargs["train_dataset"])
            config.shuffle_dataset = False
        if getattr(config, "lora_r", None) and kwargs.get("peft_config") is None:
            kwargs["peft_config"] = lora_config(
                config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout
            )
        if self._step_weighted and kwargs.get("data_collator") is None:
            tok = kwargs.get("processing_class")
            if tok is None:
                raise TrainError("step_weighted_loss needs processing_class= (the tokenizer)")
            kwargs["data_collator"] = WeightedDataCollator(
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                padding_free=bool(getattr(config, "padding_free", False)),
                pad_to_multiple_of=getattr(config, "pad_to_multiple_of", None),
            )
        if self._step_weighted and getattr(config, "packing", False):
            raise TrainError(
                "step_weighted_loss does not work with packing=True; turn one of them off"
            )
        super().__init__(*args, **kwargs)

    # -- data -----------------------------------------------------------------------------------

    def _prepare_dataset(
        self, dataset: Any, processing_class: Any, args: Any, *rest: Any, **kw: Any
    ) -> Any:
        dataset = super()._prepare_dataset(dataset, processing_class, args, *rest, **kw)
        if self._step_weighted and "labels" in dataset.column_names:
            if "step_weights" not in dataset.column_names:
                raise TrainError(
                    "step_weighted_loss needs a `step_weights` column (an SFT export has one); "
                    "set step_weighted_loss=False"
                )

            def add_weights(ex: dict[str, Any]) -> dict[str, Any]:
                labels, weights = token_weights(ex["labels"], ex["step_weights"])
                return {"labels": labels, "loss_weights": weights}

            dataset = dataset.map(add_weights, desc="Spreading step weights over tokens")
        return dataset

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if self._step_weighted and "loss_weights" not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, "loss_weights"]

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        if self._curriculum:
            ds = train_dataset if train_dataset is not None else self.train_dataset
            return torch.utils.data.SequentialSampler(ds)
        return super()._get_train_sampler(train_dataset)

    # -- loss -----------------------------------------------------------------------------------

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        weights = inputs.pop("loss_weights", None)
        if weights is None:
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        mode = "train" if self.model.training else "eval"
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        w = weights[:, 1:].to(outputs.log_probs.dtype) if weights.dim() == 2 else weights
        num_tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -(outputs.log_probs * w).sum() / torch.as_tensor(num_tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        num_valid = self.accelerator.gather_for_metrics(outputs.label_mask.sum()).sum()
        if outputs.entropy is not None:
            ent = self.accelerator.gather_for_metrics(outputs.entropy.detach().sum()).sum()
            self._metrics[mode]["entropy"].append(
                (ent / num_valid).item() if num_valid > 0 else 0.0
            )
        if outputs.is_top1 is not None:
            top1 = self.accelerator.gather_for_metrics(outputs.is_top1.sum()).sum()
            self._metrics[mode]["mean_token_accuracy"].append(
                (top1 / num_valid).item() if num_valid > 0 else 0.0
            )
        if mode == "train" and "attention_mask" in inputs:
            self._total_train_tokens += (
                self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            )
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return (loss, outputs) if return_outputs else loss

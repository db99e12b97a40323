"""TRL's SFTTrainer extended for agent trajectories.

What it adds to ``trl.SFTTrainer`` (everything else is TRL's):

- **observation masking**: ``assistant_only_loss`` on by default, so labels are -100 on every
  system, user and tool token;
- **step-weighted loss**: each assistant turn's tokens are weighted by the row's
  ``step_weights`` (from step rewards); weight-0 turns (chunk context) get label -100. The
  collator spreads the weights over a whole batch with tensor ops; the loss is TRL's, one
  forward pass, times the weights;
- **curriculum**: rows ordered by (steps, -reward) and read in that order;
- **LoRA** from ``lora_r`` through peft;
- **padding-free packing** (``packing=True``): rows packed into ``max_length`` budgets with
  the step weights carried per token (:mod:`knowlyr.train.packing`);
- **Liger's kernels** (``use_liger_kernel``): TRL applies only the layer kernels and keeps its
  chunked fused LM head, whose per-token log-probabilities the step weights multiply, so the
  weighted loss is unchanged (a test checks it); Liger's fused linear cross-entropy, which
  would replace it, is refused;
- **a memory check** before training on CUDA that names the options when a step will not fit
  (:func:`knowlyr.train._defaults.check_training_memory`).

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
from knowlyr.train._defaults import (
    check_training_memory,
    lora_config,
    model_memory_estimate,
)
from knowlyr.train.packing import PackedDataCollator, check_packed_attention, pack_rows
from knowlyr.train.sft_config import KnowlyrSFTConfig

__all__ = [
    "KnowlyrSFTConfig",
    "KnowlyrSFTTrainer",
    "WeightedDataCollator",
    "curriculum_order",
    "spread_turn_weights",
    "token_weights",
    "use_training_template",
]


def spread_turn_weights(
    labels: torch.Tensor, turn_weights: list[list[float]], lengths: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spread per-turn weights over the tokens of a collated batch and mask weight-0 turns.

    Each maximal run of labels that are not -100 is one assistant turn (the chat template puts
    the masked role header between turns); the k-th run of sequence ``i`` gets
    ``turn_weights[i][k]`` (1.0 past the end of the list). Tensor ops over the whole batch: no
    per-token Python.

    Args:
        labels: ``(batch, length)`` labels, one sequence per row (right padding with -100), or
            ``(1, total)`` for padding-free batches (then ``lengths`` gives each sequence's
            length, in order).
        turn_weights: each sequence's turn weights (the ``step_weights`` column).
        lengths: sequence lengths of a padding-free batch.

    Returns:
        The labels with -100 on weight-0 turns (a new tensor), and the ``float32`` weight of
        every token (0 where the label is -100).
    """
    import numpy as np

    lab = labels.numpy()  # numpy: a few us per op on these small arrays, torch ~10x that
    flat = lab.reshape(-1)
    n = flat.size
    if lengths is None:
        rows, width = lab.shape
        seg = np.repeat(np.arange(rows), width)
        seg_start = np.arange(rows) * width
    else:
        lens = np.asarray(lengths, dtype=np.int64)
        seg_start = np.cumsum(lens) - lens
        seg = np.repeat(np.arange(len(lens)), lens)
        seg = np.concatenate([seg, np.full(n - seg.size, max(len(lens) - 1, 0))])
    mask = flat != -100
    prev = np.zeros_like(mask)
    prev[1:] = mask[:-1]
    prev[seg_start] = False  # a sequence's first token starts a run
    start = mask & ~prev
    runs = np.cumsum(start)
    turn = runs - 1 - (runs[seg_start] - start[seg_start])[seg]  # run index in its sequence
    k = max((len(w) for w in turn_weights), default=0)
    table = np.ones((len(turn_weights), k + 1))  # 1.0 past the end of a row's list
    given = np.arange(k + 1)[None, :] < np.array([len(w) for w in turn_weights])[:, None]
    table[given] = [w for ws in turn_weights for w in ws]
    weights = table[seg, np.clip(turn, 0, k)]
    dropped = mask & (weights <= 0)
    weights = np.where(mask & ~dropped, weights, 0.0).astype(np.float32)
    out = labels.clone()
    out.view(-1)[torch.from_numpy(np.flatnonzero(dropped))] = -100
    return out, torch.from_numpy(weights.reshape(lab.shape))


def token_weights(labels: list[int], turn_weights: list[float]) -> tuple[list[int], list[float]]:
    """:func:`spread_turn_weights` for one sequence, as lists.

    Example:
        >>> token_weights([-100, 5, 6, -100, 7], [0.0, 2.0])
        ([-100, -100, -100, -100, 7], [0.0, 0.0, 0.0, 0.0, 2.0])
    """
    out, weights = spread_turn_weights(torch.tensor([labels], dtype=torch.long), [turn_weights])
    return out[0].tolist(), weights[0].tolist()


def _per_token_weights(row: dict[str, Any]) -> dict[str, Any]:
    """A tokenized row's ``step_weights`` spread over its tokens (weight-0 turns masked)."""
    labels, weights = token_weights(row["labels"], row["step_weights"])
    return {"labels": labels, "loss_weights": weights}


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
    """TRL's language-modeling collator that also spreads each row's ``step_weights`` over its
    tokens (``loss_weights``, see :func:`spread_turn_weights`) and masks weight-0 turns.

    A batch whose weights are all 1 gets no ``loss_weights``: the trainer then computes TRL's
    own loss, which equals the weighted one, at TRL's cost."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        if "step_weights" not in examples[0]:
            return super().torch_call(examples)
        turn_weights = [ex.pop("step_weights") for ex in examples]
        if all(w == 1.0 for ws in turn_weights for w in ws):
            return super().torch_call(examples)  # uniform: TRL's loss is the weighted loss
        lengths = [len(ex["input_ids"]) for ex in examples] if self.padding_free else None
        out = super().torch_call(examples)
        out["labels"], out["loss_weights"] = spread_turn_weights(
            out["labels"], turn_weights, lengths
        )
        return out


def _has_tool_calls(dataset: Any) -> bool:
    if dataset is None or len(dataset) == 0:
        return False
    row = dataset[0]
    if row.get("tools"):
        return True
    msgs = row.get("messages") or [*(row.get("prompt") or []), *(row.get("completion") or [])]
    return any(isinstance(m, dict) and m.get("tool_calls") for m in msgs)


def use_training_template(tokenizer: Any, dataset: Any, config: Any) -> Any:
    """Put the training chat template on ``tokenizer`` before TRL tokenizes (see
    :mod:`knowlyr.train.chat_templates`), so the saved tokenizer prompts the model the way it
    was trained; returns the :class:`~knowlyr.train.chat_templates.TrainingTemplate` or ``None``.

    A template TRL knows (Qwen2.5/3, Llama 3) is left for TRL to swap in for training; one
    knowlyr built replaces the tokenizer's own (it renders what the own one renders byte for
    byte, plus tool calls where the own one has none, as SmolLM2's), also with
    ``assistant_only_loss=False``. Raises :class:`TrainError` when none is
    found and assistant-only loss needs one, or when rows have tool calls the template
    cannot render.
    """
    from knowlyr.train.chat_templates import training_chat_template

    if getattr(tokenizer, "chat_template", None) is None and config.chat_template is None:
        return None  # not a chat model: TRL says what it needs
    only_assistant = bool(getattr(config, "assistant_only_loss", False))
    try:
        choice = training_chat_template(tokenizer, getattr(config, "chat_template", None))
    except TrainError:
        if only_assistant:
            raise
        return None
    if choice.source in ("knowlyr", "given"):
        tokenizer.chat_template = choice.template
    if not choice.renders_tools and _has_tool_calls(dataset):
        raise TrainError(
            f"the {choice.family} chat template does not render tool calls and tool results, "
            "and the dataset has them; pass KnowlyrSFTConfig(chat_template=...) with a template "
            "that does"
        )
    return choice


class KnowlyrSFTTrainer(SFTTrainer):
    """``trl.SFTTrainer`` with observation masking, step-weighted loss, curriculum and LoRA.

    Takes the same arguments as ``SFTTrainer``; ``args`` should be a
    :class:`~knowlyr.train.sft_config.KnowlyrSFTConfig` (a plain ``SFTConfig`` gets the
    enhancements switched off).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        self._step_weighted = bool(getattr(config, "step_weighted_loss", False))
        # TRL goes padding-free with bfd packing or padding_free=True; step weights then travel
        # per token (spread before packing) and our collator replaces TRL's after its __init__,
        # which refuses a custom collator in that mode.
        self._padding_free = bool(getattr(config, "padding_free", False)) or (
            bool(getattr(config, "packing", False))
            and getattr(config, "packing_strategy", "bfd") in ("bfd", "bfd_split")
        )
        self._curriculum = bool(getattr(config, "curriculum", False))
        if self._curriculum and kwargs.get("train_dataset") is not None:
            kwargs["train_dataset"] = curriculum_order(kwargs["train_dataset"])
            config.shuffle_dataset = False
        if getattr(config, "lora_r", None) and kwargs.get("peft_config") is None:
            kwargs["peft_config"] = lora_config(
                config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout
            )
        collator = None
        self._per_token_weights = False
        if self._step_weighted and kwargs.get("data_collator") is None:
            tok = kwargs.get("processing_class")
            if tok is None:
                raise TrainError("step_weighted_loss needs processing_class= (the tokenizer)")
            per_token = self._padding_free or bool(getattr(config, "packing", False))
            self._per_token_weights = per_token
            collator = (PackedDataCollator if per_token else WeightedDataCollator)(
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                padding_free=self._padding_free,
                pad_to_multiple_of=getattr(config, "pad_to_multiple_of", None),
            )
            if not per_token:
                kwargs["data_collator"] = collator
        tok = kwargs.get("processing_class")
        if tok is not None and config is not None:
            use_training_template(tok, kwargs.get("train_dataset"), config)
        super().__init__(*args, **kwargs)
        if self._per_token_weights:
            self.data_collator = collator
        if self._padding_free:
            check_packed_attention(self.model)

    # -- data -----------------------------------------------------------------------------------

    def _prepare_dataset(
        self,
        dataset: Any,
        processing_class: Any,
        args: Any,
        packing: bool,
        formatting_func: Any = None,
        dataset_name: str = "train",
    ) -> Any:
        own_packing = packing and self._per_token_weights  # TRL's packing drops step_weights
        dataset = super()._prepare_dataset(
            dataset,
            processing_class,
            args,
            packing and not own_packing,
            formatting_func,
            dataset_name,
        )
        if not self._step_weighted or "labels" not in dataset.column_names:
            return dataset
        if "step_weights" not in dataset.column_names:
            raise TrainError(
                "step_weighted_loss needs a `step_weights` column (an SFT export has one); "
                "set step_weighted_loss=False"
            )
        if not self._per_token_weights:
            return dataset
        map_kwargs: dict[str, Any] = {"num_proc": args.dataset_num_proc}
        if hasattr(dataset, "num_rows"):  # IterableDataset.map takes no desc
            map_kwargs["desc"] = f"Spreading step weights over {dataset_name} tokens"
        dataset = dataset.map(_per_token_weights, remove_columns=["step_weights"], **map_kwargs)
        if own_packing:
            if hasattr(dataset, "num_rows"):
                map_kwargs["desc"] = f"Packing {dataset_name} dataset"
            dataset = pack_rows(
                dataset, args.max_length, strategy=args.packing_strategy, map_kwargs=map_kwargs
            )
        return dataset

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        extra = "loss_weights" if self._per_token_weights else "step_weights"
        if self._step_weighted and extra not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, extra]

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        if self._curriculum:
            ds = train_dataset if train_dataset is not None else self.train_dataset
            return torch.utils.data.SequentialSampler(ds)
        return super()._get_train_sampler(train_dataset)

    # -- memory ---------------------------------------------------------------------------------

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self._check_gpu_memory()
        return super().train(*args, **kwargs)

    def _batch_tokens(self) -> int:
        """Tokens in the largest batch: packed budgets, else the longest rows padded."""
        args, batch = self.args, self.args.per_device_train_batch_size
        if args.packing:
            return batch * args.max_length
        longest = 0
        ds = self.train_dataset
        if ds is not None and hasattr(ds, "data") and "input_ids" in ds.column_names:
            import pyarrow.compute as pc

            longest = pc.max(pc.list_value_length(ds.data.column("input_ids"))).as_py() or 0
        if args.max_length is not None:
            longest = min(longest, args.max_length) if longest else args.max_length
        return batch * longest

    def _check_gpu_memory(self) -> None:
        """On CUDA, stop before training when one step will not fit, naming the options."""
        if not getattr(self.args, "check_memory", False) or self.args.device.type != "cuda":
            return
        tokens = self._batch_tokens()
        model = self.model
        est = model_memory_estimate(model, self.args, tokens)
        if est is None or tokens == 0:
            return
        free, _ = torch.cuda.mem_get_info(self.args.device)
        resident = sum(
            p.numel() * p.element_size() for p in model.parameters() if p.device.type == "cuda"
        )
        n_params = sum(p.numel() for p in model.parameters())
        lora = n_params // 100  # an adapter is about 1% of the weights at rank 16
        alternatives = {
            "lora": None
            if getattr(model, "peft_config", None)
            else model_memory_estimate(model, self.args, tokens, n_trainable=lora),
            "activation_checkpointing": None
            if self.args.activation_checkpointing
            else model_memory_estimate(model, self.args, tokens, activation_checkpointing=True),
            "smaller_batch": model_memory_estimate(
                model, self.args, max(tokens // max(self.args.per_device_train_batch_size, 1), 1)
            ),
            "optim_8bit": None
            if "8bit" in str(getattr(self.args.optim, "value", self.args.optim))
            else model_memory_estimate(model, self.args, tokens, optim="adamw_8bit"),
        }
        check_training_memory(
            est,
            free,
            resident_bytes=resident,
            device=str(self.args.device),
            alternatives=alternatives,
        )

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
        elif mode == "train" and "position_ids" in inputs:  # padding-free: every token is real
            n = torch.tensor(inputs["position_ids"].size(1), device=inputs["position_ids"].device)
            self._total_train_tokens += self.accelerator.gather_for_metrics(n).sum().item()
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return (loss, outputs) if return_outputs else loss

"""Device-aware defaults shared by the knowlyr trainer configs, and LoRA through peft."""

from __future__ import annotations

import importlib.util
from typing import Any

from knowlyr.errors import TrainError

__all__ = ["TINY_LEARNING_RATES", "apply_device_defaults", "lora_config"]

#: Peak learning rates the tiny from-scratch models (``knowlyr train ... --model tiny``, the
#: flows' policy) learn with, per method: SFT 3e-3 (the flows' ``TrainParams``; TRL's 2e-5
#: leaves a tiny model's loss near 5.6 after 25 epochs), DPO 5e-4 and GRPO 1e-4 (the defaults
#: of ``train_dpo_checkpoint`` / ``train_grpo_checkpoint``). A pretrained model keeps TRL's.
TINY_LEARNING_RATES: dict[str, float] = {"sft": 3e-3, "dpo": 5e-4, "grpo": 1e-4}


def apply_device_defaults(config: Any) -> None:
    """Fill ``bf16`` / ``use_cpu`` for the machine before ``TrainingArguments.__post_init__``.

    ``bf16=None`` becomes ``True`` only on a GPU that supports it (TRL would turn it on
    everywhere, which is ~27x slower on CPUs without bf16). Without a GPU, ``use_cpu`` is set.
    """
    import torch

    has_gpu = torch.cuda.is_available()
    if config.bf16 is None:
        config.bf16 = bool(has_gpu and torch.cuda.is_bf16_supported()) and not config.fp16
    if not has_gpu:
        config.use_cpu = True


def lora_config(
    r: int,
    *,
    alpha: int | None = None,
    dropout: float = 0.05,
    target_modules: list[str] | str | None = "all-linear",
    task_type: str = "CAUSAL_LM",
) -> Any:
    """A ``peft.LoraConfig``; raises :class:`TrainError` naming the extra when peft is missing."""
    if importlib.util.find_spec("peft") is None:
        raise TrainError("LoRA (lora_r / peft_config) needs peft: pip install 'knowlyr-gym[train]'")
    from peft import LoraConfig

    if r < 1:
        raise TrainError(f"lora_r must be a positive rank, got {r}")
    return LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        target_modules=target_modules,
        task_type=task_type,
    )

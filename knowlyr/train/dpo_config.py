"""Configuration of :class:`~knowlyr.train.dpo_trainer.KnowlyrDPOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DPOConfig

from knowlyr.train._defaults import (
    ACTIVATION_CHECKPOINTING_HELP,
    LIGER_KERNEL_HELP,
    apply_device_defaults,
)

__all__ = ["KnowlyrDPOConfig"]


@dataclass
class KnowlyrDPOConfig(DPOConfig):
    """TRL's ``DPOConfig`` with LoRA fields and CPU-friendly defaults.

    Defaults that differ from TRL: ``max_length=None`` (never truncate trajectories),
    ``bf16`` only where the GPU supports it, ``use_cpu`` without a GPU,
    ``activation_checkpointing`` on when training on CUDA and off on the CPU (as for SFT),
    ``report_to="none"``, ``save_strategy="no"``.

    Example:
        >>> config = KnowlyrDPOConfig(output_dir="out", beta=0.1)
    """

    lora_r: int | None = field(
        default=None,
        metadata={
            "help": "LoRA rank; set to train a LoRA adapter through peft (the frozen base is the reference)."
        },
    )
    lora_alpha: int | None = field(
        default=None, metadata={"help": "LoRA alpha (default 2 * lora_r)."}
    )
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    max_length: int | None = field(
        default=None,
        metadata={"help": "Maximum tokenized prompt + completion length; None never truncates."},
    )
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision; None turns it on only on a GPU that supports bf16."
        },
    )
    activation_checkpointing: bool | None = field(
        default=None, metadata={"help": ACTIVATION_CHECKPOINTING_HELP}
    )
    use_liger_kernel: bool | str = field(default=False, metadata={"help": LIGER_KERNEL_HELP})
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Deprecated alias of activation_checkpointing (transformers 5)."},
    )
    report_to: str | list[str] = field(
        default="none",
        metadata={"help": "Integrations to report to (none, tensorboard, wandb...)."},
    )
    save_strategy: str = field(
        default="no",
        metadata={"help": "Checkpoint saving during training (the final model is always saved)."},
    )
    logging_steps: float = field(default=10, metadata={"help": "Log every X update steps."})

    def __post_init__(self) -> None:
        apply_device_defaults(self)
        super().__post_init__()

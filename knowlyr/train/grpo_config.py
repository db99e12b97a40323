"""Configuration of :class:`~knowlyr.train.grpo_trainer.KnowlyrGRPOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from knowlyr.train._defaults import (
    ACTIVATION_CHECKPOINTING_HELP,
    LIGER_KERNEL_HELP,
    apply_device_defaults,
)

__all__ = ["KnowlyrGRPOConfig"]


@dataclass
class KnowlyrGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` with step-level advantages, LoRA fields and CPU-friendly defaults.

    Defaults that differ from TRL: ``num_generations=4``, ``max_completion_length=128``,
    ``max_tool_calling_iterations=8``, ``bf16`` only where the GPU supports it, ``use_cpu``
    without a GPU, ``activation_checkpointing`` on when training on CUDA and off on the CPU
    (as for SFT), ``report_to="none"``, ``save_strategy="no"``.

    Example:
        >>> config = KnowlyrGRPOConfig(output_dir="out", step_advantage=True, step_advantage_mix=0.5)
    """

    step_advantage: bool = field(
        default=True,
        metadata={
            "help": "Step-level advantage: in multi-turn rollouts through a knowlyr environment, weight each "
            "assistant turn's tokens by its step reward (trajectory advantage x step weight, mean weight 1)."
        },
    )
    step_advantage_mix: float = field(
        default=0.5,
        metadata={
            "help": "How much step weights follow the step rewards: 0 = plain GRPO, 1 = proportional to the "
            "step reward (a step with reward 0 gets no credit)."
        },
    )
    lora_r: int | None = field(
        default=None, metadata={"help": "LoRA rank; set to train a LoRA adapter via peft."}
    )
    lora_alpha: int | None = field(
        default=None, metadata={"help": "LoRA alpha (default 2 * lora_r)."}
    )
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    num_generations: int | None = field(
        default=4, metadata={"help": "Completions sampled per prompt (the GRPO group size)."}
    )
    max_completion_length: int | None = field(
        default=128,
        metadata={"help": "Maximum tokens generated per completion (tool results included)."},
    )
    max_tool_calling_iterations: int | None = field(
        default=8, metadata={"help": "Maximum tool calls per rollout (the episode's step limit)."}
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
    logging_steps: float = field(default=1, metadata={"help": "Log every X update steps."})

    def __post_init__(self) -> None:
        apply_device_defaults(self)
        super().__post_init__()

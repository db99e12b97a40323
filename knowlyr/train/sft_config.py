"""Configuration of :class:`~knowlyr.train.sft_trainer.KnowlyrSFTTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from knowlyr.errors import TrainError
from knowlyr.train._defaults import LIGER_KERNEL_HELP, apply_device_defaults

__all__ = ["KnowlyrSFTConfig"]


@dataclass
class KnowlyrSFTConfig(SFTConfig):
    """TRL's ``SFTConfig`` with agent-training fields and CPU-friendly defaults.

    Everything TRL's ``SFTConfig`` accepts works here. Defaults that differ from TRL:
    ``assistant_only_loss=True`` (observation masking), ``max_length=None`` (never truncate:
    chunk long trajectories at export instead), ``bf16`` only where the GPU supports it,
    ``use_cpu`` without a GPU, ``activation_checkpointing`` on when training on CUDA and off on
    the CPU, ``report_to="none"``, ``save_strategy="no"`` (the entry point saves the final
    model). ``packing=True`` packs rows into ``max_length``-token budgets without padding and
    keeps observation masking and step weights exact (see :mod:`knowlyr.train.packing`).
    ``use_liger_kernel`` takes True, False or ``"auto"`` (Liger's kernels where the package
    and a CUDA GPU are present, see :func:`~knowlyr.train._defaults.resolve_liger_kernel`);
    the step-weighted loss is the same with them.

    Example:
        >>> config = KnowlyrSFTConfig(output_dir="out", step_weighted_loss=True, curriculum=True)
        >>> packed = KnowlyrSFTConfig(output_dir="out", packing=True, max_length=4096)
    """

    assistant_only_loss: bool = field(
        default=True,
        metadata={
            "help": "Observation masking: compute the loss only on assistant tokens (labels are -100 on the "
            "system, user and tool tokens). Needs a chat template with {% generation %} markers: knowlyr finds "
            "or builds one for SmolLM2 and other ChatML templates, Qwen2.5/3 and Llama 3/3.1/3.2 "
            "(knowlyr.train.chat_templates); any other template needs chat_template=."
        },
    )
    chat_template: str | None = field(
        default=None,
        metadata={
            "help": "Training chat template to use instead of the one found for the tokenizer: Jinja text with "
            "{% generation %} markers, a .jinja file, or a template shipped in knowlyr/train/templates "
            "('chatml_training', 'smollm2_training'). It replaces the tokenizer's template, so the saved "
            "model is prompted the way it was trained."
        },
    )
    step_weighted_loss: bool = field(
        default=False,
        metadata={
            "help": "Weight each assistant turn's tokens by its step weight (the `step_weights` column of an "
            "SFT export, derived from step rewards). Turns with weight 0 (e.g. chunk context) are not trained."
        },
    )
    curriculum: bool = field(
        default=False,
        metadata={
            "help": "Train in curriculum order (fewest steps first, then highest reward) instead of shuffled. "
            "Uses the `n_steps` and `reward` columns of an SFT export."
        },
    )
    lora_r: int | None = field(
        default=None,
        metadata={
            "help": "LoRA rank; set to train a LoRA adapter through peft instead of all weights."
        },
    )
    lora_alpha: int | None = field(
        default=None, metadata={"help": "LoRA alpha (default 2 * lora_r)."}
    )
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Maximum tokenized length; None never truncates (chunk long trajectories at export with "
            "max_steps_per_row instead)."
        },
    )
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision; None turns it on only on a GPU that supports bf16."
        },
    )
    activation_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in backward instead of keeping them (trades compute for "
            "memory). None: on when training on CUDA, off on the CPU (tiny models)."
        },
    )
    packing: bool = field(
        default=False,
        metadata={
            "help": "Pack rows into budgets of max_length tokens with no padding: position_ids restart at "
            "each row and attention never crosses rows (flash/SDPA varlen on a GPU, a block-diagonal mask "
            "on the CPU). Observation masking, step weights and chunk context (weight 0) stay exact. "
            "Needs max_length."
        },
    )
    check_memory: bool = field(
        default=True,
        metadata={
            "help": "Before training on CUDA, estimate parameters + gradients + optimizer states + one "
            "batch's activations and stop with the options (LoRA, activation checkpointing, smaller "
            "batch, 8-bit optimizer) when they will not fit in the free GPU memory."
        },
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
        if self.packing and self.max_length is None:
            raise TrainError(
                "packing=True needs max_length: the token budget of each packed row "
                "(e.g. max_length=4096); longer rows are truncated to it"
            )
        if self.packing and self.curriculum:
            raise TrainError(
                "curriculum=True reads rows in order, and packing=True regroups them into "
                "budgets by length; turn one of them off"
            )
        apply_device_defaults(self)
        super().__post_init__()

"""Configuration of :class:`~knowlyr.train.sft_trainer.KnowlyrSFTTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from knowlyr.train._defaults import apply_device_defaults

__all__ = ["KnowlyrSFTConfig"]


@dataclass
class KnowlyrSFTConfig(SFTConfig):
    """TRL's ``SFTConfig`` with agent-training fields and CPU-friendly defaults.

    Everything TRL's ``SFTConfig`` accepts works here. Defaults that differ from TRL:
    ``assistant_only_loss=True`` (observation masking), ``max_length=None`` (never truncate:
    chunk long trajectories at export instead), ``bf16`` only where the GPU supports it,
    ``use_cpu`` without a GPU, ``activation_checkpointing=False``, ``report_to="none"``,
    ``save_strategy="no"`` (the entry point saves the final model).

    Example:
        >>> config = KnowlyrSFTConfig(output_dir="out", step_weighted_loss=True, curriculum=True)
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
        default=False,
        metadata={"help": "Trade compute for memory; off by default (tiny and small models)."},
    )
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

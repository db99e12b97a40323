"""Device-aware defaults shared by the knowlyr trainer configs, the GPU memory check, and LoRA
through peft."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

from knowlyr.errors import TrainError

__all__ = [
    "ACTIVATION_CHECKPOINTING_HELP",
    "LIGER_KERNEL_HELP",
    "MEMORY_OPTIONS",
    "TINY_LEARNING_RATES",
    "MemoryEstimate",
    "apply_device_defaults",
    "check_training_memory",
    "estimate_training_memory",
    "lora_config",
    "model_memory_estimate",
    "resolve_liger_kernel",
]

log = logging.getLogger("knowlyr.train")

#: Peak learning rates the tiny from-scratch models (``knowlyr train ... --model tiny``, the
#: flows' policy) learn with, per method: SFT 3e-3 (the flows' ``TrainParams``; TRL's 2e-5
#: leaves a tiny model's loss near 5.6 after 25 epochs), DPO 5e-4 and GRPO 1e-4 (the defaults
#: of ``train_dpo_checkpoint`` / ``train_grpo_checkpoint``). A pretrained model keeps TRL's.
TINY_LEARNING_RATES: dict[str, float] = {"sft": 3e-3, "dpo": 5e-4, "grpo": 1e-4}

#: Help text of every knowlyr config's ``activation_checkpointing`` field (default ``None``,
#: resolved by :func:`apply_device_defaults`).
ACTIVATION_CHECKPOINTING_HELP = (
    "Recompute activations in backward instead of keeping them (trades compute for memory). "
    "None: on when training on CUDA, off on the CPU (tiny models)."
)

#: Help text of every knowlyr config's ``use_liger_kernel`` field (resolved by
#: :func:`resolve_liger_kernel`).
LIGER_KERNEL_HELP = (
    "Liger's fused Triton kernels (RMSNorm, RoPE, SwiGLU) through TRL. True needs the liger-kernel "
    "package and a CUDA GPU and stops with the fix when either is missing; 'auto' uses them where "
    "both are present and logs why not elsewhere; False (TRL's default) never. The loss is still "
    "TRL's chunked fused LM head, so step weights and observation masking apply unchanged (Liger's "
    "fused linear cross-entropy is refused: it would replace that loss)."
)


def apply_device_defaults(config: Any) -> None:
    """Fill ``bf16`` / ``use_cpu`` / ``activation_checkpointing`` for the machine before
    ``TrainingArguments.__post_init__``.

    ``bf16=None`` becomes ``True`` only on a GPU that supports it (TRL would turn it on
    everywhere, which is ~27x slower on CPUs without bf16). Without a GPU, ``use_cpu`` is set.
    ``activation_checkpointing=None`` (with the deprecated ``gradient_checkpointing`` unset too)
    becomes ``True`` when training on CUDA (it cut a 1.5B model's peak from 75 to 22 GiB at the
    same tokens/s on an H100) and ``False`` on the CPU (tiny models, where it only costs time).
    An explicit value always wins. ``use_liger_kernel`` (True / False / ``"auto"``) becomes a
    bool through :func:`resolve_liger_kernel`.
    """
    import torch

    has_gpu = torch.cuda.is_available()
    if config.bf16 is None:
        config.bf16 = bool(has_gpu and torch.cuda.is_bf16_supported()) and not config.fp16
    if not has_gpu:
        config.use_cpu = True
    if (
        getattr(config, "activation_checkpointing", False) is None
        and getattr(config, "gradient_checkpointing", None) is None
    ):
        config.activation_checkpointing = bool(has_gpu and not config.use_cpu)
    if not _has_activation_checkpointing_field():
        # transformers before the rename (5.17, say) reads only ``gradient_checkpointing``: our
        # ``activation_checkpointing`` field would be ignored and checkpointing left off (a 7B
        # LoRA run took 126 GiB instead of ~26 on an H200), so the two are kept in step
        if getattr(config, "gradient_checkpointing", None) is None:
            config.gradient_checkpointing = bool(getattr(config, "activation_checkpointing", False))
        else:
            config.activation_checkpointing = bool(config.gradient_checkpointing)
    if hasattr(config, "use_liger_kernel"):
        config.use_liger_kernel = resolve_liger_kernel(
            config.use_liger_kernel,
            on_gpu=has_gpu and not config.use_cpu,
            kernel_config=getattr(config, "liger_kernel_config", None),
        )


def _has_activation_checkpointing_field() -> bool:
    """Whether this transformers' ``TrainingArguments`` has ``activation_checkpointing`` (the
    name that replaced ``gradient_checkpointing``; earlier versions read only the old one)."""
    import dataclasses

    from transformers import TrainingArguments

    return "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}


def _liger_kernel_available() -> bool:
    """Whether liger-kernel is installed in a version transformers applies (>= 0.3)."""
    if importlib.util.find_spec("liger_kernel") is None:
        return False
    from transformers.utils import is_liger_kernel_available

    return bool(is_liger_kernel_available())


def resolve_liger_kernel(
    requested: bool | str, *, on_gpu: bool, kernel_config: dict[str, Any] | None = None
) -> bool:
    """Whether to train with Liger's kernels: ``use_liger_kernel`` (True, False or ``"auto"``)
    resolved for this machine.

    TRL 1.16 applies only Liger's layer kernels and keeps its own chunked fused LM head, whose
    per-token log-probabilities the knowlyr losses weight, so step weights are applied with
    Liger as without. Liger's ``fused_linear_cross_entropy`` would replace the model's forward
    and the loss with its own (no step weights): it is refused here, naming the option.

    Args:
        requested: ``True`` (must run: a :class:`TrainError` naming the fix when the
            liger-kernel package or a CUDA GPU is missing), ``"auto"`` (on where both are
            present; elsewhere off, with an info line on the ``knowlyr.train`` logger saying
            why) or ``False``.
        on_gpu: training runs on CUDA (not ``use_cpu``).
        kernel_config: ``liger_kernel_config``.

    Example:
        >>> resolve_liger_kernel("auto", on_gpu=False)
        False
    """
    if isinstance(requested, str):
        key = requested.strip().lower()
        if key not in ("auto", "true", "false"):
            raise TrainError(f"use_liger_kernel must be True, False or 'auto', got {requested!r}")
        requested = "auto" if key == "auto" else key == "true"
    if requested is False:
        return False
    if (kernel_config or {}).get("fused_linear_cross_entropy"):
        raise TrainError(
            'liger_kernel_config={"fused_linear_cross_entropy": True} replaces the model\'s forward '
            "and loss with Liger's, which would drop the knowlyr loss (step weights); leave "
            "fused_linear_cross_entropy unset, TRL keeps its own chunked fused LM head"
        )
    missing = []
    if not _liger_kernel_available():
        missing.append("the liger-kernel package (pip install liger-kernel)")
    if not on_gpu:
        missing.append("a CUDA GPU (Liger's kernels are Triton GPU kernels)")
    if not missing:
        if requested == "auto":
            log.info("use_liger_kernel='auto': training with Liger's kernels")
        return True
    if requested == "auto":
        log.info(
            "use_liger_kernel='auto': training without Liger's kernels, which need %s",
            " and ".join(missing),
        )
        return False
    raise TrainError(
        f"use_liger_kernel=True needs {' and '.join(missing)}; set use_liger_kernel='auto' to "
        "use Liger only where it can run, or use_liger_kernel=False"
    )


_GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one training step needs on the device, by part (see
    :func:`estimate_training_memory`)."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    tokens: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations

    def describe(self) -> str:
        """One line: the total and its parts in GiB."""
        return (
            f"{self.total / _GIB:.1f} GiB (parameters {self.parameters / _GIB:.1f}, gradients "
            f"{self.gradients / _GIB:.1f}, optimizer states {self.optimizer / _GIB:.1f}, "
            f"activations {self.activations / _GIB:.1f} for a batch of {self.tokens:,} tokens)"
        )


def _optimizer_state_bytes(optim: str, param_bytes: int) -> int:
    """Bytes of optimizer state per trainable parameter for a ``TrainingArguments.optim`` name."""
    name = str(getattr(optim, "value", optim)).lower()
    if "8bit" in name:
        return 2  # two 1-byte moments (bitsandbytes)
    if name.startswith(("sgd", "adafactor")):
        return 0  # no momentum / factored second moment: negligible
    if "lion" in name:
        return param_bytes  # one moment
    return 2 * param_bytes  # Adam-style: exp_avg and exp_avg_sq in the parameter dtype


def estimate_training_memory(
    *,
    n_params: int,
    n_trainable: int,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    tokens: int,
    param_bytes: int = 4,
    compute_bytes: int = 2,
    activation_checkpointing: bool = False,
    optim: str = "adamw_torch",
) -> MemoryEstimate:
    """Estimate the device memory of one training step of a decoder-only transformer.

    Parameters, their gradients (trainable ones only), optimizer states and the activations
    that backward needs for one batch of ``tokens`` tokens. Per token and layer, a layer with
    a gated MLP saves about ``4 * intermediate_size`` values in the compute dtype (MLP
    projections and activation), ``6 * hidden_size`` in the compute dtype (q/k/v, attention
    output) and ``6 * hidden_size`` in the parameter dtype (residual stream and norms); the
    attention scores are never materialised (SDPA / flash) and neither are the logits (TRL's
    fused LM head). With activation checkpointing only each layer's input is kept, plus one
    layer recomputed during backward. Against peaks measured on an H100 (Qwen2 0.5B / 1.5B
    shapes, 4 x 4,096 tokens, bf16 autocast over fp32 weights, AdamW) it is within ~12%.

    Args:
        n_params: all parameters of the model.
        n_trainable: parameters that get gradients and optimizer states (fewer with LoRA).
        hidden_size, intermediate_size, num_layers: the model's shape.
        tokens: tokens in one batch on this device (batch size x padded length).
        param_bytes: bytes per parameter as stored (4 for fp32, 2 for bf16 weights).
        compute_bytes: bytes per activation value in the compute dtype (2 under bf16/fp16
            mixed precision, else ``param_bytes``).
        activation_checkpointing: recompute activations in backward instead of keeping them.
        optim: the ``TrainingArguments.optim`` name (8-bit optimizers keep 2 bytes a parameter).

    Returns:
        A :class:`MemoryEstimate`.

    Example:
        >>> est = estimate_training_memory(n_params=1_350_000_000, n_trainable=1_350_000_000,
        ...     hidden_size=1536, intermediate_size=8960, num_layers=28, tokens=4 * 4096)
        >>> round(est.total / 2**30)
        75
    """
    per_layer = 4 * intermediate_size * compute_bytes + 6 * hidden_size * (
        compute_bytes + param_bytes
    )
    if activation_checkpointing:
        per_token = num_layers * hidden_size * param_bytes + per_layer
    else:
        per_token = num_layers * per_layer
    per_token += 2 * hidden_size * param_bytes  # final norm and the hidden states fed to the head
    return MemoryEstimate(
        parameters=n_params * param_bytes,
        gradients=n_trainable * param_bytes,
        optimizer=n_trainable * _optimizer_state_bytes(optim, param_bytes),
        activations=tokens * per_token,
        tokens=tokens,
    )


def model_memory_estimate(
    model: Any, args: Any, tokens: int, **overrides: Any
) -> MemoryEstimate | None:
    """:func:`estimate_training_memory` for a model and its ``TrainingArguments``; ``None`` when
    the model's config has no ``hidden_size`` / ``num_hidden_layers`` (not a decoder shape this
    estimate knows). ``overrides`` replace any argument (to price an alternative)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    hidden = getattr(config, "hidden_size", None)
    layers = getattr(config, "num_hidden_layers", None)
    if not hidden or not layers:
        return None
    params = list(model.parameters())
    param_bytes = max((p.element_size() for p in params if p.is_floating_point()), default=4)
    mixed = bool(getattr(args, "bf16", False) or getattr(args, "fp16", False))
    kwargs: dict[str, Any] = {
        "n_params": sum(p.numel() for p in params),
        "n_trainable": sum(p.numel() for p in params if p.requires_grad),
        "hidden_size": hidden,
        "intermediate_size": getattr(config, "intermediate_size", None) or 4 * hidden,
        "num_layers": layers,
        "tokens": tokens,
        "param_bytes": param_bytes,
        "compute_bytes": min(2, param_bytes) if mixed else param_bytes,
        "activation_checkpointing": bool(getattr(args, "activation_checkpointing", False)),
        "optim": getattr(args, "optim", "adamw_torch"),
    }
    kwargs.update(overrides)
    return estimate_training_memory(**kwargs)


#: The ways out of a too-large step, by key of ``check_training_memory(alternatives=...)``.
MEMORY_OPTIONS: dict[str, str] = {
    "lora": "LoRA (lora_r=16: gradients and optimizer states only for the adapter)",
    "activation_checkpointing": "activation_checkpointing=True",
    "smaller_batch": "a smaller per_device_train_batch_size or max_length "
    "(raise gradient_accumulation_steps to keep the effective batch)",
    "optim_8bit": "an 8-bit optimizer (optim='adamw_8bit', needs bitsandbytes)",
}


def check_training_memory(
    estimate: MemoryEstimate,
    free_bytes: int,
    *,
    resident_bytes: int = 0,
    headroom: float = 0.1,
    device: str = "cuda",
    alternatives: dict[str, MemoryEstimate | None] | None = None,
) -> None:
    """Raise :class:`TrainError` naming the options when ``estimate`` will not fit in
    ``free_bytes``.

    Args:
        estimate: what one step needs (:func:`estimate_training_memory`).
        free_bytes: free memory on the device now (``torch.cuda.mem_get_info()[0]``).
        resident_bytes: part of the estimate already on the device (the parameters once the
            trainer has moved the model), so not counted against ``free_bytes`` again.
        headroom: fraction of ``free_bytes`` kept for the allocator, kernels' workspaces and
            the temporaries the estimate leaves out.
        device: the device's name, for the message.
        alternatives: a :data:`MEMORY_OPTIONS` key -> that option's estimate (shown in the
            message), or ``None`` to leave an option out (already in use). Keys not given are
            listed without a figure.

    Example:
        >>> est = estimate_training_memory(n_params=7_000_000_000, n_trainable=7_000_000_000,
        ...     hidden_size=4096, intermediate_size=11008, num_layers=32, tokens=8192)
        >>> check_training_memory(est, free_bytes=80 * 2**30)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        knowlyr.errors.TrainError: training needs about ...
    """
    need = estimate.total - resident_bytes
    if need <= int(free_bytes * (1.0 - headroom)):
        return
    given = alternatives or {}
    options = []
    for key, text in MEMORY_OPTIONS.items():
        if key in given and given[key] is None:
            continue
        alt = given.get(key)
        options.append(text if alt is None else f"{text}: about {alt.total / _GIB:.1f} GiB")
    loaded = f", {resident_bytes / _GIB:.1f} GiB of it already loaded" if resident_bytes else ""
    raise TrainError(
        f"training needs about {estimate.describe()} on {device}{loaded}, and only "
        f"{free_bytes / _GIB:.1f} GiB are free. Options: "
        + "; ".join(options)
        + ". Set check_memory=False to train anyway."
    )


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

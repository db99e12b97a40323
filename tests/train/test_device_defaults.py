"""Memory-aware defaults: activation checkpointing follows the device unless the user chose, and
a training step too large for the GPU stops before training with the ways out."""

from __future__ import annotations

import pytest
import torch

from knowlyr.errors import TrainError
from knowlyr.train._defaults import (
    MemoryEstimate,
    check_training_memory,
    estimate_training_memory,
    model_memory_estimate,
)
from knowlyr.train.sft_config import KnowlyrSFTConfig

GIB = 1024**3


def _on_cuda(monkeypatch):
    """Pretend a bf16 GPU is present (none exists on the machines the suite runs on)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def _resolve(**kwargs):
    """Run only the knowlyr part of the config's defaults (TrainingArguments would then look
    for the fake GPU)."""
    from knowlyr.train._defaults import apply_device_defaults

    fields = {
        "bf16": None,
        "fp16": False,
        "use_cpu": False,
        "activation_checkpointing": None,
        "gradient_checkpointing": None,
    }
    fields.update(kwargs)
    config = type("Config", (), fields)()
    apply_device_defaults(config)
    return config


def test_activation_checkpointing_is_off_on_the_cpu():
    assert not torch.cuda.is_available()  # what this machine is
    config = KnowlyrSFTConfig(output_dir="unused")
    assert config.activation_checkpointing is False and config.gradient_checkpointing is False
    assert _resolve().activation_checkpointing is False


def test_activation_checkpointing_is_on_on_cuda(monkeypatch):
    _on_cuda(monkeypatch)
    config = _resolve()
    assert config.activation_checkpointing is True and config.bf16 is True
    assert _resolve(use_cpu=True).activation_checkpointing is False  # GPU there, not used


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "cuda"])
@pytest.mark.parametrize("explicit", [False, True])
def test_an_explicit_choice_wins(monkeypatch, cuda, explicit):
    if cuda:
        _on_cuda(monkeypatch)
    assert _resolve(activation_checkpointing=explicit).activation_checkpointing is explicit
    # the deprecated alias is a choice too: transformers copies it over
    assert _resolve(gradient_checkpointing=explicit).activation_checkpointing is None
    if not cuda:
        config = KnowlyrSFTConfig(output_dir="unused", activation_checkpointing=explicit)
        assert config.activation_checkpointing is explicit
        config = KnowlyrSFTConfig(output_dir="unused", gradient_checkpointing=explicit)
        assert config.activation_checkpointing is explicit


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, True),  # the CUDA default reaches the field old transformers reads
        ({"activation_checkpointing": False}, False),
        ({"gradient_checkpointing": False}, False),
        ({"gradient_checkpointing": True}, True),
    ],
)
def test_transformers_before_the_rename_gets_gradient_checkpointing(monkeypatch, kwargs, expected):
    """transformers 5.17 (the H200's) has no ``activation_checkpointing`` argument and reads only
    ``gradient_checkpointing``: ours must set it, or checkpointing stays off on a GPU (a 7B LoRA
    run measured 126 GiB instead of 25.6)."""
    from knowlyr.train import _defaults

    _on_cuda(monkeypatch)
    monkeypatch.setattr(_defaults, "_has_activation_checkpointing_field", lambda: False)
    config = _resolve(**kwargs)
    assert config.gradient_checkpointing is expected
    assert config.activation_checkpointing is expected  # what our memory check reads


def test_this_transformers_has_the_renamed_argument():
    """The suite's transformers has the new name, so the alias stays untouched here."""
    from knowlyr.train._defaults import _has_activation_checkpointing_field

    assert _has_activation_checkpointing_field()
    assert _resolve(activation_checkpointing=True).gradient_checkpointing is None


# Peaks measured on one H100 80GB (issue 37): Qwen2 shapes with a 32k vocabulary, 4 x 4,096
# tokens, bf16 autocast over fp32 weights, AdamW, knowlyr's trainer.
QWEN2_05B = {
    "n_params": 382_000_000,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_layers": 24,
}
QWEN2_15B = {
    "n_params": 1_350_000_000,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_layers": 28,
}


@pytest.mark.parametrize(
    ("shape", "checkpointing", "measured_gib"),
    [
        (QWEN2_05B, False, 34.0),
        (QWEN2_05B, True, 7.4),
        (QWEN2_15B, False, 75.0),
        (QWEN2_15B, True, 22.2),
    ],
)
def test_estimate_is_near_the_peaks_measured_on_a_gpu(shape, checkpointing, measured_gib):
    est = estimate_training_memory(
        **shape,
        n_trainable=shape["n_params"],
        tokens=4 * 4096,
        activation_checkpointing=checkpointing,
    )
    assert est.parameters == est.gradients == shape["n_params"] * 4
    assert est.optimizer == 2 * est.parameters  # AdamW: two fp32 moments
    assert est.total / GIB == pytest.approx(measured_gib, rel=0.15)


def test_estimate_moves_the_way_each_option_promises():
    base = {**QWEN2_15B, "n_trainable": QWEN2_15B["n_params"], "tokens": 4 * 4096}
    full = estimate_training_memory(**base)
    ckpt = estimate_training_memory(**base, activation_checkpointing=True)
    lora = estimate_training_memory(**{**base, "n_trainable": 18_000_000})
    small = estimate_training_memory(**{**base, "tokens": 4096})
    eight_bit = estimate_training_memory(**base, optim="adamw_bnb_8bit")
    assert ckpt.activations < full.activations / 5 and ckpt.parameters == full.parameters
    assert lora.gradients + lora.optimizer < (full.gradients + full.optimizer) / 50
    assert small.activations == full.activations // 4
    assert eight_bit.optimizer == full.optimizer // 4
    bf16_weights = estimate_training_memory(**base, param_bytes=2)
    assert bf16_weights.parameters == full.parameters // 2


def test_a_model_too_large_for_the_gpu_is_stopped_with_the_options():
    est = estimate_training_memory(
        n_params=7_000_000_000,
        n_trainable=7_000_000_000,
        hidden_size=4096,
        intermediate_size=11008,
        num_layers=32,
        tokens=8192,
    )
    assert est.total > 80 * GIB  # 16 bytes a parameter before any activation
    with pytest.raises(TrainError) as err:
        check_training_memory(est, free_bytes=80 * GIB, device="cuda:0")
    msg = str(err.value)
    for option in (
        "LoRA",
        "activation_checkpointing=True",
        "per_device_train_batch_size",
        "max_length",
        "8-bit optimizer",
        "check_memory=False",
    ):
        assert option in msg
    assert "on cuda:0" in msg and "80.0 GiB are free" in msg and "8,192 tokens" in msg

    small = MemoryEstimate(
        parameters=GIB, gradients=GIB, optimizer=2 * GIB, activations=GIB, tokens=1024
    )
    check_training_memory(small, free_bytes=8 * GIB)  # fits: nothing raised
    # the parameters already on the GPU are not counted twice
    check_training_memory(small, free_bytes=4.5 * GIB, resident_bytes=GIB)
    with pytest.raises(TrainError, match=r"1\.0 GiB of it already loaded"):
        check_training_memory(small, free_bytes=4 * GIB, resident_bytes=GIB)


def test_options_in_use_are_left_out_and_alternatives_priced():
    est = MemoryEstimate(
        parameters=GIB, gradients=GIB, optimizer=2 * GIB, activations=8 * GIB, tokens=1024
    )
    cheaper = MemoryEstimate(
        parameters=GIB, gradients=GIB, optimizer=2 * GIB, activations=GIB, tokens=1024
    )
    with pytest.raises(TrainError) as err:
        check_training_memory(
            est,
            free_bytes=4 * GIB,
            alternatives={"activation_checkpointing": cheaper, "lora": None},
        )
    msg = str(err.value)
    assert "LoRA" not in msg
    assert "activation_checkpointing=True: about 5.0 GiB" in msg


def test_estimate_reads_the_model_shape():
    from knowlyr.train.models import build_tiny_model

    model, _ = build_tiny_model(["order K3Z9Q has shipped"], seed=0)
    config = KnowlyrSFTConfig(output_dir="unused")
    est = model_memory_estimate(model, config, tokens=512)
    n = sum(p.numel() for p in model.parameters())
    assert est.parameters == est.gradients == 4 * n and est.tokens == 512
    assert model_memory_estimate(model, config, tokens=512, n_trainable=0).optimizer == 0


def test_the_trainer_checks_before_training_on_cuda(tmp_path, monkeypatch):
    """The trainer's own check, with the device and its free memory faked (no GPU here)."""
    from knowlyr.export import export_sft
    from knowlyr.train.models import build_tiny_model_for
    from knowlyr.train.sft_trainer import KnowlyrSFTTrainer
    from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory

    traj = Trajectory(
        task=TaskInfo(task_id="t0", instruction="Status of order 1?"),
        steps=[
            Step(
                index=0,
                action=ToolCall(tool="respond", params={"text": "Order 1 shipped."}),
                observation=Observation(output="Reply sent."),
            )
        ],
        outcome=Outcome(success=True, score=1.0),
    )
    ds = export_sft([traj]).dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(output_dir=str(tmp_path), disable_tqdm=True)
    trainer = KnowlyrSFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tok)
    longest = max(len(ids) for ids in trainer.train_dataset["input_ids"])
    assert trainer._batch_tokens() == config.per_device_train_batch_size * longest

    monkeypatch.setattr(type(config), "device", property(lambda self: torch.device("cuda")))
    free = {"bytes": 2**20}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free["bytes"], 80 * GIB))
    with pytest.raises(TrainError, match=r"LoRA .*activation_checkpointing=True: about"):
        trainer.train()  # stops before the first step
    from transformers.training_args import OptimizerNames

    config.optim = OptimizerNames("adamw_bnb_8bit")  # an option in use is not offered again
    with pytest.raises(TrainError) as err:
        trainer._check_gpu_memory()
    assert "8-bit optimizer" not in str(err.value) and "LoRA" in str(err.value)
    free["bytes"] = GIB
    trainer._check_gpu_memory()  # fits
    free["bytes"] = 2**20
    config.check_memory = False
    trainer._check_gpu_memory()  # the user chose to try anyway

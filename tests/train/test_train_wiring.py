"""Packing and the device defaults reach every way of training: ``knowlyr train sft
--packing``, ``train_sft(packing=...)``, the DPO and GRPO configs, and the memory estimate
exported from ``knowlyr.train``."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.errors import TrainError
from knowlyr.train._defaults import apply_device_defaults
from knowlyr.train.dpo_config import KnowlyrDPOConfig
from knowlyr.train.grpo_config import KnowlyrGRPOConfig
from knowlyr.train.sft_config import KnowlyrSFTConfig


@pytest.fixture(scope="module")
def sft_export(tmp_path_factory, expert_and_random):
    """A tiny SFT export of expert episodes, written by the CLI."""
    good, _ = expert_and_random
    root = tmp_path_factory.mktemp("wiring")
    src = root / "trajs.jsonl"
    src.write_bytes(b"\n".join(t.to_json() for t in good[:8]) + b"\n")
    out = CliRunner().invoke(app, ["export", "sft", str(src), "-o", str(root / "sft")])
    assert out.exit_code == 0, out.output
    return root / "sft"


def _report(output: str) -> dict:
    return json.loads(output[output.rindex('{\n  "model"') :])


def test_train_sft_packing_from_the_command_line(tmp_path, sft_export):
    out = CliRunner().invoke(
        app,
        ["train", "sft", str(sft_export), "-o", str(tmp_path / "run"), "--epochs", "1",
         "--batch-size", "2", "--step-weighted", "--packing", "--max-length", "1024",
         "--induction-steps", "0"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "max_length 1024, packing True" in out.output  # the settings line says so
    report = _report(out.output)
    assert report["model"].endswith("final") and report["train_loss"] > 0
    assert (tmp_path / "run" / "final" / "knowlyr_model.json").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--packing: needs --max-length"),
        (["--max-length", "512", "--curriculum"], "--packing: regroups rows"),
    ],
    ids=["no-max-length", "with-curriculum"],
)
def test_train_sft_packing_without_what_it_needs_is_a_usage_error(
    tmp_path, sft_export, extra, message
):
    out = CliRunner().invoke(
        app, ["train", "sft", str(sft_export), "-o", str(tmp_path / "run"), "--packing", *extra]
    )
    assert out.exit_code == 2
    assert message in " ".join(out.output.split())
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written


def test_train_sft_passes_packing_through(tmp_path, sft_export):
    from knowlyr.train.models import build_tiny_model_for
    from knowlyr.train.run import load_dataset_dir, train_sft

    ds = load_dataset_dir(sft_export)
    model, tok = build_tiny_model_for(ds, hidden_size=32, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path / "run"),
        num_train_epochs=1,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        disable_tqdm=True,
    )
    with pytest.raises(TrainError, match="packing=True needs max_length"):
        train_sft(ds, model, tok, config, packing=True)
    result = train_sft(ds, model, tok, config, packing=True, max_length=1024)
    args = result.trainer.args
    assert args.packing and args.max_length == 1024 and args.learning_rate == 3e-3
    assert not config.packing  # the caller's config is left as it was
    # a packed batch is one padding-free row that holds several episodes
    batch = next(iter(result.trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch
    starts = (batch["position_ids"][0] == 0).sum().item()
    assert starts > 1
    assert result.metrics["train_loss"] > 0


@pytest.mark.parametrize("config_cls", [KnowlyrDPOConfig, KnowlyrGRPOConfig])
def test_dpo_and_grpo_checkpointing_follows_the_device(monkeypatch, config_cls):
    field = {f.name: f for f in dataclasses.fields(config_cls)}["activation_checkpointing"]
    assert field.default is None and "None: on when training on CUDA" in field.metadata["help"]
    # on this machine (no GPU): off, unless chosen
    assert not torch.cuda.is_available()
    assert config_cls(output_dir="unused").activation_checkpointing is False
    assert config_cls(output_dir="unused", activation_checkpointing=True).activation_checkpointing

    # with a GPU: the config's own defaults resolve to on (only knowlyr's part is run:
    # TrainingArguments would then look for the fake GPU)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(config_cls)
        if f.name
        in ("bf16", "fp16", "use_cpu", "activation_checkpointing", "gradient_checkpointing")
    }
    resolved = type("Config", (), defaults)()
    apply_device_defaults(resolved)
    assert resolved.activation_checkpointing is True and resolved.bf16 is True


def test_memory_estimate_is_exported():
    import knowlyr.train as train

    assert {"estimate_training_memory", "MemoryEstimate"} <= set(train.__all__)
    est = train.estimate_training_memory(
        n_params=1_350_000_000,
        n_trainable=1_350_000_000,
        hidden_size=1536,
        intermediate_size=8960,
        num_layers=28,
        tokens=4 * 4096,
    )
    assert isinstance(est, train.MemoryEstimate) and "GiB" in est.describe()

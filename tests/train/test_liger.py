"""Liger's fused kernels are an option with a fallback, and the loss stays the knowlyr loss.

No test here needs a GPU or the liger-kernel package: the choice logic runs with CUDA and the
package faked, and a training step runs with transformers' ``apply_liger_kernel`` replaced by
a stand-in that swaps every RMSNorm's forward for an equivalent one (what Liger's layer
kernels do, in Triton, on a GPU).
"""

from __future__ import annotations

import logging

import pytest
import torch

from knowlyr.errors import TrainError
from knowlyr.export import export_sft
from knowlyr.train import _defaults
from knowlyr.train._defaults import resolve_liger_kernel
from knowlyr.train.dpo_config import KnowlyrDPOConfig
from knowlyr.train.grpo_config import KnowlyrGRPOConfig
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.sft_config import KnowlyrSFTConfig
from knowlyr.train.sft_trainer import KnowlyrSFTTrainer
from tests.train.test_sft_weighted_batches import _traj

CONFIGS = [KnowlyrSFTConfig, KnowlyrDPOConfig, KnowlyrGRPOConfig]


def _liger_installed(monkeypatch, installed: bool) -> None:
    monkeypatch.setattr(_defaults, "_liger_kernel_available", lambda: installed)


@pytest.mark.parametrize("package", [False, True], ids=["no-package", "package"])
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "cuda"])
def test_auto_uses_liger_only_where_it_can_run(monkeypatch, caplog, package, gpu):
    _liger_installed(monkeypatch, package)
    with caplog.at_level(logging.INFO, logger="knowlyr.train"):
        chosen = resolve_liger_kernel("auto", on_gpu=gpu)
    assert chosen is (package and gpu)
    if not chosen:  # the fallback says what is missing
        assert "training without Liger's kernels" in caplog.text
        assert ("pip install liger-kernel" in caplog.text) is not package
        assert ("CUDA GPU" in caplog.text) is not gpu


@pytest.mark.parametrize("package", [False, True], ids=["no-package", "package"])
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "cuda"])
def test_an_explicit_request_runs_or_names_the_fix(monkeypatch, package, gpu):
    _liger_installed(monkeypatch, package)
    if package and gpu:
        assert resolve_liger_kernel(True, on_gpu=gpu) is True
        return
    with pytest.raises(TrainError, match="use_liger_kernel=True needs") as err:
        resolve_liger_kernel(True, on_gpu=gpu)
    assert ("pip install liger-kernel" in str(err.value)) is not package
    assert ("CUDA GPU" in str(err.value)) is not gpu
    assert "use_liger_kernel='auto'" in str(err.value)
    assert resolve_liger_kernel(False, on_gpu=gpu) is False


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_configs_resolve_the_option_on_this_machine(config, tmp_path):
    assert not torch.cuda.is_available()  # what this machine is
    assert config(output_dir=str(tmp_path), use_liger_kernel="auto").use_liger_kernel is False
    assert config(output_dir=str(tmp_path)).use_liger_kernel is False  # TRL's default
    with pytest.raises(TrainError, match=r"use_liger_kernel=True needs .*CUDA GPU"):
        config(output_dir=str(tmp_path), use_liger_kernel=True)
    with pytest.raises(TrainError, match="True, False or 'auto', got 'yes'"):
        config(output_dir=str(tmp_path), use_liger_kernel="yes")


def test_liger_fused_cross_entropy_is_refused_naming_the_option(monkeypatch):
    _liger_installed(monkeypatch, True)
    with pytest.raises(TrainError, match=r"fused_linear_cross_entropy.*step weights"):
        resolve_liger_kernel(True, on_gpu=True, kernel_config={"fused_linear_cross_entropy": True})
    assert resolve_liger_kernel(True, on_gpu=True, kernel_config={"rms_norm": True}) is True


def _stand_in_liger(calls: list[dict]):
    """What transformers' ``apply_liger_kernel`` does with Liger installed: patch the layers in
    place (here with an equivalent RMSNorm forward, as Liger's Triton kernel is)."""

    def apply(model, kernel_config):
        calls.append(dict(kernel_config or {}))
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm"):

                def fused(hidden, m=module):
                    x = hidden.float()
                    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m.variance_epsilon)
                    return m.weight * x.to(hidden.dtype)

                module.forward = fused
                calls[-1]["patched"] = calls[-1].get("patched", 0) + 1

    return apply


def _one_step(ds, tmp_path, name, *, liger: bool, step_weighted: bool = True):
    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path / name),
        step_weighted_loss=step_weighted,
        per_device_train_batch_size=4,
        max_steps=1,
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    config.use_liger_kernel = liger  # as resolved on a GPU with liger-kernel installed
    trainer = KnowlyrSFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tok)
    trainer.train()
    loss = next(h["loss"] for h in trainer.state.log_history if "loss" in h)
    return loss, model.lm_head.weight.detach().clone()


def test_liger_keeps_the_step_weighted_loss(monkeypatch, tmp_path):
    import transformers.trainer

    calls: list[dict] = []
    monkeypatch.setattr(transformers.trainer, "apply_liger_kernel", _stand_in_liger(calls))
    ds = export_sft([_traj(i, [0.0, 0.5, 1.0]) for i in range(4)], system_prompt="S").dataset

    plain_loss, plain_w = _one_step(ds, tmp_path, "plain", liger=False)
    assert calls == []
    liger_loss, liger_w = _one_step(ds, tmp_path, "liger", liger=True)
    # TRL applied the layer kernels only, keeping the fused LM head our weighted loss reads
    assert len(calls) == 1 and calls[0]["fused_linear_cross_entropy"] is False
    assert calls[0]["patched"] > 0
    assert liger_loss == pytest.approx(plain_loss, rel=1e-6)
    assert torch.allclose(liger_w, plain_w, atol=1e-7)
    # and the weights are in that loss: without them the step is another one
    unweighted_loss, _ = _one_step(ds, tmp_path, "unweighted", liger=True, step_weighted=False)
    assert unweighted_loss != pytest.approx(liger_loss, rel=1e-3)


def test_cli_liger_on_this_machine_is_a_usage_error_naming_the_fix(tmp_path, expert_and_random):
    from typer.testing import CliRunner

    from knowlyr.cli import app

    good, _ = expert_and_random
    src = tmp_path / "trajs.jsonl"
    src.write_bytes(b"\n".join(t.to_json() for t in good[:4]) + b"\n")
    assert (
        CliRunner().invoke(app, ["export", "sft", str(src), "-o", str(tmp_path / "sft")]).exit_code
        == 0
    )
    out = CliRunner().invoke(
        app, ["train", "sft", str(tmp_path / "sft"), "-o", str(tmp_path / "run"), "--liger"]
    )
    assert out.exit_code == 2, out.output
    text = " ".join(out.output.split())
    assert "--liger: needs" in text and "CUDA GPU" in text and "drop --liger" in text
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written

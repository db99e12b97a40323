"""The step-weighted loss costs nothing where it changes nothing, and is TRL's loss where the
weights are uniform: same batches, same labels, same loss as plain ``trl.SFTTrainer``."""

from __future__ import annotations

import pytest
import torch
from trl import SFTConfig, SFTTrainer

from knowlyr.export import export_sft
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.sft_config import KnowlyrSFTConfig
from knowlyr.train.sft_trainer import KnowlyrSFTTrainer
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory


def _traj(i: int, rewards: list[float | None]) -> Trajectory:
    steps = [
        Step(
            index=k,
            action=ToolCall(tool="query_stats", params={"order_id": f"A{i}B{k}C"}),
            observation=Observation(output=f"order A{i}B{k}C: shipped"),
            reward=r,
        )
        for k, r in enumerate(rewards[:-1])
    ]
    steps.append(
        Step(
            index=len(rewards) - 1,
            action=ToolCall(tool="respond", params={"text": f"Order {i} shipped."}),
            observation=Observation(output="Reply sent."),
            reward=rewards[-1],
        )
    )
    return Trajectory(
        task=TaskInfo(task_id=f"t{i}", instruction=f"Status of order {i}?"),
        steps=steps,
        outcome=Outcome(success=True, score=1.0),
    )


def _pair(ds, tmp_path):
    """Our trainer (step-weighted loss) and plain TRL on the same data, model init and seed."""
    common = {"per_device_train_batch_size": 4, "disable_tqdm": True, "seed": 0}
    model, tok = build_tiny_model_for(ds, seed=0)
    ours = KnowlyrSFTTrainer(
        model=model,
        args=KnowlyrSFTConfig(output_dir=str(tmp_path / "ours"), step_weighted_loss=True, **common),
        train_dataset=ds,
        processing_class=tok,
    )
    plain_model, _ = build_tiny_model_for(ds, seed=0)
    plain = SFTTrainer(
        model=plain_model,
        args=SFTConfig(
            output_dir=str(tmp_path / "trl"),
            bf16=False,
            use_cpu=True,
            report_to="none",
            assistant_only_loss=True,
            max_length=None,
            activation_checkpointing=False,
            **common,
        ),
        train_dataset=ds.select_columns(["messages", "tools"]),
        processing_class=tok,
    )
    return ours, plain


def _first_batch(trainer):
    torch.manual_seed(0)
    return next(iter(trainer.get_train_dataloader()))


@pytest.mark.parametrize(
    ("rewards", "weighted"),
    [([None, None, None], False), ([0.0, 0.5, 1.0], True)],
    ids=["no-step-rewards", "step-rewards"],
)
def test_only_batches_with_unequal_weights_carry_loss_weights(tmp_path, rewards, weighted):
    ds = export_sft([_traj(i, rewards) for i in range(4)], system_prompt="S").dataset
    ours, plain = _pair(ds, tmp_path)
    mine, theirs = _first_batch(ours), _first_batch(plain)
    assert ("loss_weights" in mine) is weighted
    assert torch.equal(mine["input_ids"], theirs["input_ids"])
    if not weighted:
        assert torch.equal(mine["labels"], theirs["labels"])


def test_uniform_weights_give_trl_loss_and_gradients(tmp_path):
    ds = export_sft([_traj(i, [None, None]) for i in range(4)], system_prompt="S").dataset
    ours, plain = _pair(ds, tmp_path)
    losses = []
    for trainer in (ours, plain):
        trainer.model.train()
        batch = _first_batch(trainer)
        loss = trainer.compute_loss(trainer.model, dict(batch))
        loss.backward()
        losses.append((loss.item(), trainer.model.lm_head.weight.grad.clone()))
    (mine, g_mine), (theirs, g_theirs) = losses
    assert mine == pytest.approx(theirs, rel=1e-6)
    assert torch.allclose(g_mine, g_theirs, atol=1e-7)

"""Each agent enhancement of KnowlyrSFTTrainer changes exactly what it claims."""

from __future__ import annotations

import pytest
import torch

from knowlyr.agents.action_format import render_action
from knowlyr.export import export_sft
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.sft_config import KnowlyrSFTConfig
from knowlyr.train.sft_trainer import KnowlyrSFTTrainer, spread_turn_weights
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory


def _traj(i: int, n_steps: int, rewards=None, score=1.0) -> Trajectory:
    steps = [
        Step(
            index=k,
            thought=f"step {k}",
            action=ToolCall(tool="query_stats", params={"order_id": f"A{i}B{k}C"}),
            observation=Observation(output=f"order A{i}B{k}C: shipped"),
            reward=None if rewards is None else rewards[k],
        )
        for k in range(n_steps - 1)
    ]
    steps.append(
        Step(
            index=n_steps - 1,
            action=ToolCall(tool="respond", params={"text": f"Order {i} shipped."}),
            observation=Observation(output="Reply sent."),
            reward=None if rewards is None else rewards[-1],
        )
    )
    return Trajectory(
        task=TaskInfo(task_id=f"t{i}", instruction=f"Status of order {i}?"),
        steps=steps,
        outcome=Outcome(success=True, score=score),
    )


def _trainer(ds, tmp_path, **cfg):
    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2, disable_tqdm=True, **cfg
    )
    return KnowlyrSFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tok), tok


def test_observation_masking_trains_on_exactly_the_assistant_text(tmp_path):
    trajs = [_traj(0, 3), _traj(1, 2)]
    trainer, tok = _trainer(export_sft(trajs, system_prompt="S").dataset, tmp_path)
    for row, traj in zip(trainer.train_dataset, trajs, strict=True):
        ids, labels = row["input_ids"], row["labels"]
        trained = tok.decode(
            [t for t, lab in zip(ids, labels, strict=True) if lab != -100],
            skip_special_tokens=False,
        )
        masked = tok.decode(
            [t for t, lab in zip(ids, labels, strict=True) if lab == -100],
            skip_special_tokens=False,
        )
        want = "".join(
            "\n"
            + render_action({"tool": s.action.tool, "params": s.action.params}, thought=s.thought)
            + "<|im_end|>\n"
            for s in traj.steps
        )
        assert trained == want
        assert (
            "<tool_response>" in masked
            and "Status of order" in masked
            and "shipped\n</tool_response>" in masked
        )
        assert all(lab in (-100, t) for t, lab in zip(ids, labels, strict=True))


def _batch(trainer):
    return next(iter(trainer.get_train_dataloader()))


def test_step_weighted_loss_follows_the_step_weights(tmp_path):
    trajs = [_traj(0, 2, rewards=[0.0, 1.0]), _traj(1, 2, rewards=[0.0, 1.0])]
    ds = export_sft(trajs, step_weight_mix=1.0).dataset
    assert ds[0]["step_weights"] == [0.0, 2.0]
    trainer, _ = _trainer(ds, tmp_path, step_weighted_loss=True)
    batch = _batch(trainer)
    labels, weights = batch["labels"], batch["loss_weights"]
    # weight-0 turns are masked out entirely; the rest carry their step weight
    assert set(weights[labels != -100].tolist()) == {2.0}
    trainer.model.eval()
    with torch.no_grad():
        weighted = trainer.compute_loss(trainer.model, dict(batch)).item()
        plain = trainer.compute_loss(
            trainer.model, {k: v for k, v in batch.items() if k != "loss_weights"}
        ).item()
        doubled = dict(batch, loss_weights=batch["loss_weights"] * 2)
        assert trainer.compute_loss(trainer.model, doubled).item() == pytest.approx(
            2 * weighted, rel=1e-5
        )
    # same tokens counted, every weight 2: the weighted loss is exactly twice TRL's mean loss
    assert weighted == pytest.approx(2 * plain, rel=1e-5)

    uniform = export_sft(trajs, step_weight_mix=0.0).dataset
    trainer_u, _ = _trainer(uniform, tmp_path / "u", step_weighted_loss=True)
    b = _batch(trainer_u)
    assert (b["labels"] != -100).sum() > (labels != -100).sum()  # the first step is trained again


def test_chunking_splits_at_step_boundaries_with_context_that_is_not_trained(tmp_path):
    traj = _traj(0, 5)
    res = export_sft([traj], max_steps_per_row=2, chunk_overlap=1)
    ds = res.dataset
    assert ds["chunk"] == [0, 1, 2] and ds["n_steps"] == [2, 2, 1]
    assert ds["step_weights"] == [[1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0]]
    trained_steps = []
    for row in ds:
        assistant = [m for m in row["messages"] if m["role"] == "assistant"]
        ctx = sum(1 for w in row["step_weights"] if w == 0.0)
        trained_steps += [m["tool_calls"][0]["function"]["arguments"] for m in assistant[ctx:]]
        roles = [m["role"] for m in row["messages"]]
        assert roles[:2] == ["system", "user"] and all(
            a == "assistant" and b == "tool"
            for a, b in zip(roles[2:-1:2], roles[3::2], strict=False)
        )
    assert trained_steps == [
        s.action.params for s in traj.steps
    ]  # every step trained once, in order
    trainer, tok = _trainer(ds, tmp_path, step_weighted_loss=True)
    row = trainer.train_dataset[1]
    batch = trainer.data_collator([{k: row[k] for k in ("input_ids", "labels", "step_weights")}])
    trained = tok.decode(
        [
            t
            for t, lab in zip(row["input_ids"], batch["labels"][0].tolist(), strict=True)
            if lab != -100
        ]
    )
    assert (
        "A0B1C" not in trained and "A0B2C" in trained and "A0B3C" in trained
    )  # step 1 is context only


def test_curriculum_reads_short_and_high_reward_rows_first(tmp_path):
    trajs = [_traj(0, 4), _traj(1, 2, score=0.2), _traj(2, 3), _traj(3, 2, score=0.9), _traj(4, 1)]
    ds = export_sft(trajs).dataset
    trainer, _ = _trainer(ds, tmp_path, curriculum=True)
    assert trainer.train_dataset["n_steps"] == [1, 2, 2, 3, 4]
    assert trainer.train_dataset["task_id"][1:3] == ["t3", "t1"]  # higher reward first among equals
    first = _batch(trainer)["input_ids"]
    assert isinstance(trainer._get_train_sampler(), torch.utils.data.SequentialSampler)
    assert first.shape[0] == 2
    shuffled, _ = _trainer(ds, tmp_path / "s")
    assert not isinstance(shuffled._get_train_sampler(), torch.utils.data.SequentialSampler)


def test_lora_wraps_the_model_in_a_peft_adapter(tmp_path):
    trainer, _ = _trainer(export_sft([_traj(0, 2)]).dataset, tmp_path, lora_r=4)
    from peft import PeftModel

    assert isinstance(trainer.model, PeftModel)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in trainer.model.parameters()) / 2


def test_config_defaults_suit_a_cpu():
    config = KnowlyrSFTConfig(output_dir="unused")
    assert config.bf16 is (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert config.use_cpu is not torch.cuda.is_available()
    assert (
        config.assistant_only_loss
        and config.max_length is None
        and not config.activation_checkpointing
    )
    assert config.report_to in ("none", ["none"], [])


def _reference_token_weights(labels, turn_weights):
    """The per-token loop the collator's tensor version replaces."""
    out, weights, turn, prev_masked = list(labels), [0.0] * len(labels), -1, True
    for i, lab in enumerate(labels):
        if lab == -100:
            prev_masked = True
            continue
        if prev_masked:
            turn, prev_masked = turn + 1, False
        w = float(turn_weights[turn]) if turn < len(turn_weights) else 1.0
        if w <= 0.0:
            out[i] = -100
        else:
            weights[i] = w
    return out, weights


@pytest.mark.parametrize("seed", range(5))
def test_batch_weight_spreading_equals_the_per_token_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    seqs, turn_weights = [], []
    for _ in range(6):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        lab = torch.randint(0, 50, (n,), generator=gen)
        lab[torch.rand(n, generator=gen) < 0.5] = -100
        seqs.append(lab.tolist())
        k = int(torch.randint(0, 5, (1,), generator=gen))
        turn_weights.append([float(x) for x in torch.randint(0, 3, (k,), generator=gen) * 0.5])
    want = [_reference_token_weights(lab, w) for lab, w in zip(seqs, turn_weights, strict=True)]
    width = max(map(len, seqs)) + 3
    padded = torch.full((len(seqs), width), -100)
    for i, lab in enumerate(seqs):
        padded[i, : len(lab)] = torch.tensor(lab)
    labels, weights = spread_turn_weights(padded, turn_weights)
    for i, (wl, ww) in enumerate(want):
        assert labels[i, : len(wl)].tolist() == wl and weights[i, : len(ww)].tolist() == ww
        assert set(labels[i, len(wl) :].tolist()) <= {-100} and not weights[i, len(ww) :].any()
    flat = torch.tensor([[x for lab in seqs for x in lab] + [-100, -100]])  # padding-free
    labels, weights = spread_turn_weights(flat, turn_weights, [len(x) for x in seqs])
    assert labels[0].tolist() == [x for wl, _ in want for x in wl] + [-100, -100]
    assert weights[0].tolist() == [x for _, ww in want for x in ww] + [0.0, 0.0]

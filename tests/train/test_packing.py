"""Padding-free packing changes how rows are laid out, never what is trained: the packed batch
gives the padded batch's labels, per-token weights, log-probabilities, loss and gradients."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from knowlyr.errors import TrainError
from knowlyr.export import export_sft
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.packing import PackedDataCollator, check_packed_attention
from knowlyr.train.sft_config import KnowlyrSFTConfig
from knowlyr.train.sft_trainer import KnowlyrSFTTrainer
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory

BUDGET = 600


def _traj(i: int, n_steps: int) -> Trajectory:
    steps = [
        Step(
            index=k,
            action=ToolCall(tool="query_stats", params={"order_id": f"A{i}B{k}C"}),
            observation=Observation(output=f"order A{i}B{k}C: shipped"),
            reward=(k + i) % 3 / 2,
        )
        for k in range(n_steps - 1)
    ]
    steps.append(
        Step(
            index=n_steps - 1,
            action=ToolCall(tool="respond", params={"text": f"Order {i} shipped."}),
            observation=Observation(output="Reply sent."),
            reward=1.0,
        )
    )
    return Trajectory(
        task=TaskInfo(task_id=f"t{i}", instruction=f"Status of order {i}?"),
        steps=steps,
        outcome=Outcome(success=True, score=1.0),
    )


@pytest.fixture(scope="module")
def agent_rows():
    """Rows with unequal step weights and chunk context (weight-0 turns) of several lengths."""
    trajs = [_traj(i, 2 + i % 4) for i in range(8)]
    ds = export_sft(trajs, step_weight_mix=1.0, max_steps_per_row=3, chunk_overlap=1).dataset
    weights = [w for ws in ds["step_weights"] for w in ws]
    assert 0.0 in weights and len({w for w in weights if w > 0}) > 2  # context and real weights
    return ds


def _trainer(ds, tmp_path, *, packing: bool, step_weighted: bool):
    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path / ("packed" if packing else "padded")),
        per_device_train_batch_size=2,
        disable_tqdm=True,
        step_weighted_loss=step_weighted,
        packing=packing,
        max_length=BUDGET if packing else None,
    )
    trainer = KnowlyrSFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tok)
    trainer.model.train()
    return trainer


def _padded_batch_of(padded, rows: list[list[int]]):
    """The padded trainer's batch of exactly these rows (found by their tokens), in order."""
    index = {tuple(ids): i for i, ids in enumerate(padded.train_dataset["input_ids"])}
    keys = [
        k for k in ("input_ids", "labels", "step_weights") if k in padded.train_dataset.features
    ]
    examples = [{k: padded.train_dataset[index[tuple(r)]][k] for k in keys} for r in rows]
    return padded.data_collator(examples)


def _token_terms(trainer, batch):
    """Per target token: label, weight and log-probability (TRL's fused head, as the loss uses)."""
    inputs = {k: v for k, v in batch.items() if k not in ("loss_weights", "labels")}
    out = trainer.model(**inputs, labels=batch["labels"], use_cache=False, fused_lm_head=True)
    labels = batch["labels"][:, 1:]
    weights = batch.get("loss_weights")
    weights = (labels != -100).float() if weights is None else weights[:, 1:]
    return labels, weights, out.log_probs


@pytest.mark.parametrize("step_weighted", [True, False], ids=["step-weighted", "plain"])
def test_packed_batch_trains_exactly_what_the_padded_batch_trains(
    agent_rows, tmp_path, step_weighted
):
    packed = _trainer(agent_rows, tmp_path, packing=True, step_weighted=step_weighted)
    padded = _trainer(agent_rows, tmp_path, packing=False, step_weighted=step_weighted)
    for a, b in zip(packed.model.parameters(), padded.model.parameters(), strict=True):
        assert torch.equal(a, b)

    # fixed budgets, fewer rows, no row lost or cut
    seq_lengths = packed.train_dataset["seq_lengths"]
    assert all(sum(lengths) <= BUDGET for lengths in seq_lengths)
    assert len(seq_lengths) < len(padded.train_dataset)
    assert sorted(n for lengths in seq_lengths for n in lengths) == sorted(
        len(ids) for ids in padded.train_dataset["input_ids"]
    )

    torch.manual_seed(0)
    batch = next(iter(packed.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch
    assert ("loss_weights" in batch) is step_weighted
    pos = batch["position_ids"][0]
    starts = [*(pos == 0).nonzero().flatten().tolist(), pos.numel()]
    spans = list(pairwise(starts))
    rows = [batch["input_ids"][0, s:e].tolist() for s, e in spans]
    assert len(rows) >= 3 and all(pos[s:e].tolist() == list(range(e - s)) for s, e in spans)
    ref = _padded_batch_of(padded, rows)
    assert ("loss_weights" in ref) is step_weighted

    p_labels, p_weights, p_logp = _token_terms(packed, batch)
    r_labels, r_weights, r_logp = _token_terms(padded, ref)
    for i, (s, e) in enumerate(spans):
        n = e - s - 1  # targets of a row: its tokens after the first
        # observation masking and weight-0 turns: the same tokens are trained, with the same weight
        assert torch.equal(p_labels[0, s : e - 1], r_labels[i, :n])
        assert torch.equal(p_weights[0, s : e - 1], r_weights[i, :n])
        assert (r_labels[i, n:] == -100).all()
        # attention stays inside the row: every token's log-probability is the padded one's
        torch.testing.assert_close(p_logp[0, s : e - 1], r_logp[i, :n], atol=1e-5, rtol=1e-5)
        row_loss = -(p_logp[0, s : e - 1] * p_weights[0, s : e - 1]).sum()
        ref_loss = -(r_logp[i, :n] * r_weights[i, :n]).sum()
        torch.testing.assert_close(row_loss, ref_loss, atol=1e-4, rtol=1e-5)
    assert step_weighted is bool(((p_weights != 0) & (p_weights != 1)).any())
    # the packed row's boundaries are never targets: nothing is predicted across rows
    assert (p_labels[0, [s - 1 for s, _ in spans[1:]]] == -100).all()

    losses = []
    for trainer, b in ((packed, batch), (padded, ref)):
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, dict(b))
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], atol=1e-6, rtol=1e-5)
    for (name, a), b in zip(
        packed.model.named_parameters(), padded.model.parameters(), strict=True
    ):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_packed_collator_drops_uniform_weights_and_zeroes_masked_tokens():
    collate = PackedDataCollator(pad_token_id=0, padding_free=True)
    rows = [
        {"input_ids": [5, 6, 7], "labels": [5, 6, 7], "loss_weights": [1.0, 1.0, 1.0]},
        {"input_ids": [8, 9], "labels": [-100, 9], "loss_weights": [0.0, 1.0]},
    ]
    assert "loss_weights" not in collate([dict(r) for r in rows])  # TRL's loss is exact
    rows[0]["loss_weights"] = [3.0, 2.0, 0.5]
    out = collate([dict(r) for r in rows])
    # each row's first token is never a target, so its weight is 0 whatever it was given
    assert out["loss_weights"].tolist() == [[0.0, 2.0, 0.5, 0.0, 1.0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1]]


def test_packing_needs_a_token_budget_and_no_curriculum(tmp_path):
    with pytest.raises(TrainError, match="packing=True needs max_length"):
        KnowlyrSFTConfig(output_dir=str(tmp_path), packing=True)
    with pytest.raises(TrainError, match="curriculum"):
        KnowlyrSFTConfig(output_dir=str(tmp_path), packing=True, max_length=64, curriculum=True)


def _leaky_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """An attention kernel that ignores packing: plain causal over the whole packed row."""
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, is_causal=True, scale=scaling
    )
    return out.transpose(1, 2).contiguous(), None


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_attention_that_keeps_rows_apart_passes_the_check(agent_rows, impl):
    model, _ = build_tiny_model_for(agent_rows, seed=0)
    model.set_attn_implementation(impl)
    check_packed_attention(model)
    assert model.training  # the check leaves the mode as it was


def test_attention_that_crosses_rows_is_refused(agent_rows):
    from transformers import AttentionInterface

    AttentionInterface.register("knowlyr_test_leaky", _leaky_attention)
    model, _ = build_tiny_model_for(agent_rows, seed=0)
    model.set_attn_implementation("knowlyr_test_leaky")
    with pytest.raises(TrainError, match="packed rows attend to each other"):
        check_packed_attention(model)

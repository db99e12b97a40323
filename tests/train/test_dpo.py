from __future__ import annotations

import pytest

from knowlyr.errors import TrainError
from knowlyr.export import export_dpo
from knowlyr.train.dpo_config import KnowlyrDPOConfig
from knowlyr.train.dpo_trainer import KnowlyrDPOTrainer
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.run import train_dpo


def test_dpo_from_exported_pairs_raises_the_reward_margin(tmp_path, expert_and_random):
    good, bad = expert_and_random
    assert all(t.outcome.success for t in good) and not any(t.outcome.success for t in bad)
    export = export_dpo(good + bad, system_prompt="Answer order questions.")
    ds = export.dataset
    assert len(ds) == len(good)  # one expert-vs-random pair per task
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["chosen"][0]["tool_calls"][0]["function"]["name"] == "query_stats"
    assert row["margin"] > 0

    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrDPOConfig(
        output_dir=str(tmp_path / "dpo"),
        learning_rate=2e-3,
        per_device_train_batch_size=8,
        num_train_epochs=2,
        logging_steps=1,
        beta=0.1,
        disable_tqdm=True,
        seed=0,
    )
    result = train_dpo(ds, model, tok, config)
    margins = [h["rewards/margins"] for h in result.log_history if "rewards/margins" in h]
    acc = [h["rewards/accuracies"] for h in result.log_history if "rewards/accuracies" in h]
    print(
        f"\nDPO reward margin: first step {margins[0]:.4f} -> last {margins[-1]:.4f}; accuracy {acc[-1]:.2f}"
    )
    assert abs(margins[0]) < 1e-3  # policy == reference at the first step
    assert margins[-1] > margins[0] + 0.05
    assert acc[-1] >= 0.75
    assert (result.path / "knowlyr_model.json").is_file()


def test_dpo_trainer_names_the_missing_columns(tmp_path, expert_and_random):
    good, _ = expert_and_random
    from knowlyr.export import export_sft

    ds = export_sft(good).dataset
    model, tok = build_tiny_model_for(ds)
    with pytest.raises(TrainError, match="export_dpo"):
        KnowlyrDPOTrainer(
            model=model,
            args=KnowlyrDPOConfig(output_dir=str(tmp_path)),
            train_dataset=ds,
            processing_class=tok,
        )

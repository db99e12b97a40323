"""Done-when (issue 7): GRPO moves its reward in the expected direction.

An untrained tiny model never earns the episode's sparse success reward, so GRPO has
nothing to learn from. Here a brief SFT on expert ``order_status`` episodes gives a policy
that sometimes, not reliably, emits a well-formed ``<tool_call>``; GRPO (TRL's trainer through
KnowlyrGRPOTrainer) on exported GRPO prompts with the verifiable
:func:`~knowlyr.train.rewards.tool_call_reward` (1 = ``query_stats`` with the prompt's order
id, 0.5 = ``query_stats`` with another id, 0 = anything else) then raises the mean reward,
both during training and on held-out prompts sampled the same way before and after.
"""

from __future__ import annotations

import pytest
import torch

from knowlyr.agents import ExpertAgent
from knowlyr.errors import ConfigError
from knowlyr.export import export_grpo, export_sft
from knowlyr.rollout import collect
from knowlyr.train.grpo_config import KnowlyrGRPOConfig
from knowlyr.train.grpo_trainer import KnowlyrGRPOTrainer
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.rewards import tool_call_reward
from knowlyr.train.run import train_sft
from knowlyr.train.sft_config import KnowlyrSFTConfig

ENV = "knowlyr/conversation"
SYSTEM = "You answer customers' questions about their orders."
TEMPERATURE = 0.7
SAMPLES = 8


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_tool_call_reward_scores_right_call_right_tool_and_anything_else():
    reward = tool_call_reward("query_stats", arg="order_id", pattern=r"order ([A-Z0-9]{5})")
    prompt = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Is order K3Z9Q here?"},
    ]
    call = '<tool_call>\n{"name": "query_stats", "arguments": {"order_id": "%s"}}\n</tool_call>'
    parsed = {  # the form TRL's parse_response gives a conversational completion
        "role": "assistant",
        "content": "Look up order K3Z9Q.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "query_stats", "arguments": {"order_id": "K3Z9Q"}},
            }
        ],
    }
    completions = [
        call % "K3Z9Q",
        [{"role": "assistant", "content": call % "K3Z9Q"}],
        [parsed],
        call % "K3Z9X",
        '<tool_call>\n{"name": "respond", "arguments": {"text": "K3Z9Q"}}\n</tool_call>',
        '<tool_call>\n{"name": "query_stats", "arguments": {"order_id": "K3Z',
        "Order K3Z9Q has shipped.",
    ]
    assert reward([prompt] * len(completions), completions) == [1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    assert reward.__name__ == "tool_call_reward"
    with pytest.raises(ConfigError, match="pattern"):
        tool_call_reward("query_stats", arg="order_id", pattern="order (")


def _sampled_reward(model, tok, prompts, reward) -> float:
    """Mean reward of SAMPLES completions per prompt, rendered as TRL's GRPOTrainer renders them."""
    model.eval()
    torch.manual_seed(1234)
    scores: list[float] = []
    with torch.no_grad():
        for prompt in prompts:
            enc = tok.apply_chat_template(
                prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            out = model.generate(
                **enc,
                max_new_tokens=48,
                do_sample=True,
                temperature=TEMPERATURE,
                top_k=0,
                top_p=1.0,
                num_return_sequences=SAMPLES,
            )
            texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=False)
            scores += reward([prompt] * SAMPLES, texts)
    model.train()
    return sum(scores) / len(scores)


@pytest.mark.slow
def test_grpo_with_a_verifiable_reward_raises_reward_on_heldout_prompts(tmp_path, one_thread):
    train = collect(
        ENV, ExpertAgent, 300, seed=0, env_kwargs={"family": "order_status", "split": "train"}
    )
    heldout = collect(
        ENV, ExpertAgent, 40, seed=50_000, env_kwargs={"family": "order_status", "split": "heldout"}
    )
    # TRL renders GRPO prompts without a tool list (no environment here): SFT the same way
    sft = export_sft(train, system_prompt=SYSTEM).dataset.remove_columns(["tools"])
    model, tok = build_tiny_model_for(sft, seed=0)
    sft_config = KnowlyrSFTConfig(
        output_dir=str(tmp_path / "sft"),
        learning_rate=3e-3,
        per_device_train_batch_size=16,
        max_steps=90,  # brief on purpose: the format is learned only partly
        logging_steps=100,
        disable_tqdm=True,
        seed=0,
    )
    train_sft(sft, model, tok, sft_config)

    reward = tool_call_reward("query_stats", arg="order_id", pattern=r"order ([A-Z0-9]{5})")
    prompts = export_grpo(train[:200], system_prompt=SYSTEM).dataset.select_columns(["prompt"])
    held_prompts = export_grpo(heldout, system_prompt=SYSTEM).dataset["prompt"]
    before = _sampled_reward(model, tok, held_prompts, reward)

    config = KnowlyrGRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=48,
        temperature=TEMPERATURE,
        max_steps=60,
        learning_rate=1e-3,
        beta=0.0,
        disable_tqdm=True,
        seed=0,
    )
    trainer = KnowlyrGRPOTrainer(
        model=model, args=config, train_dataset=prompts, processing_class=tok, reward_funcs=reward
    )
    trainer.train()
    after = _sampled_reward(model, tok, held_prompts, reward)

    logged = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 60
    assert all(
        h["rewards/tool_call_reward/mean"] == h["reward"]
        for h in trainer.state.log_history
        if "reward" in h
    )
    first, last = sum(logged[:10]) / 10, sum(logged[-10:]) / 10
    print(
        f"\nGRPO tool_call_reward: training {first:.3f} (first 10 steps) -> {last:.3f} "
        f"(last 10); held-out (40 prompts x {SAMPLES} samples) {before:.3f} -> {after:.3f}"
    )
    assert 0.0 < first < 0.45  # the brief SFT left room to improve, but some signal
    assert last > first + 0.08
    assert after > before + 0.04

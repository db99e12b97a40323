"""Done-when: a tiny model trained from scratch by SFT on expert episodes beats the untrained one.

The whole loop with real components: the expert collects ``order_status`` episodes in the
conversation env, export turns them into a conversational SFT dataset, a 2-layer Qwen2 with a
tokenizer built on the fly is trained with KnowlyrSFTTrainer (TRL), saved, reloaded through
the inference bridge and evaluated greedily on held-out tasks against the untrained model.
"""

from __future__ import annotations

import time

import pytest
import torch

from knowlyr.agents import ExpertAgent
from knowlyr.agents.inference import AgentInference
from knowlyr.export import export_sft
from knowlyr.rollout import collect
from knowlyr.train.evaluation import compare_agents, evaluate_agent
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.run import train_sft
from knowlyr.train.sft_config import KnowlyrSFTConfig

ENV = "knowlyr/conversation"
SYSTEM = "You answer customers' questions about their orders."


@pytest.fixture
def one_thread():
    """Tiny models train ~5x faster on one thread when the CPU is shared (no OpenMP spinning)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_sft_from_scratch_beats_untrained_model_on_heldout_tasks(tmp_path, one_thread):
    trajs = collect(
        ENV, ExpertAgent, 2000, seed=0, env_kwargs={"family": "order_status", "split": "train"}
    )
    assert all(t.outcome.success for t in trajs)
    export = export_sft(trajs, system_prompt=SYSTEM)
    assert len(export) == 2000
    model, tok = build_tiny_model_for(export.dataset, seed=0)
    untrained = AgentInference(model, tok, tools=export.dataset[0]["tools"], max_new_tokens=48)
    heldout = {"family": "order_status", "split": "heldout"}
    base = evaluate_agent(
        ENV,
        untrained.create_agent(SYSTEM, name="untrained"),
        n_episodes=30,
        seed=50_000,
        max_steps=3,
        env_kwargs=heldout,
    )

    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path / "sft"),
        learning_rate=3e-3,
        per_device_train_batch_size=16,
        num_train_epochs=10,
        logging_steps=100,
        disable_tqdm=True,
        seed=0,
    )
    started = time.perf_counter()
    result = train_sft(export.dataset, model, tok, config)
    train_s = time.perf_counter() - started

    bridge = AgentInference.from_pretrained(result.path, max_new_tokens=48)
    assert bridge.system_prompt == SYSTEM and bridge.tools == export.dataset[0]["tools"]
    trained = evaluate_agent(
        ENV,
        bridge.create_agent(name="sft"),
        n_episodes=30,
        seed=50_000,
        max_steps=3,
        env_kwargs=heldout,
    )
    report = compare_agents([base, trained])
    cmp = report.comparisons[0]
    print(
        f"\nclosed loop: untrained {base.success_rate:.0%} -> trained {trained.success_rate:.0%} "
        f"held-out success (n=30 each), Fisher p={cmp.fisher_p:.2g}, "
        f"final loss {result.metrics.get('train_loss', float('nan')):.3f}, training {train_s:.0f}s"
    )
    print(report.to_markdown())
    assert cmp.fisher_p < 0.01 and cmp.success_diff > 0
    assert trained.success_rate >= 0.6

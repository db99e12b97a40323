"""Done-when: a tiny model trained from scratch by SFT on expert episodes beats the untrained one.

The whole loop with real components: the expert collects ``order_status`` episodes in the
conversation env, export turns them into a conversational SFT dataset, a 2x128 Qwen2 with a
tokenizer built on the fly is trained with KnowlyrSFTTrainer (TRL) on 90% of the tasks
(restarted with the next seed while the loss on the other 10% says it has not learned; the
flow's recipe), saved, reloaded through the inference bridge and evaluated greedily on
held-out tasks against the untrained model. It is the flow's recipe without induction
pretraining (``knowlyr.train.induction``, which ``make run`` adds before SFT and which
``bench/run_bench.py`` measures): SFT alone on 2,000 rows, which needs the restarts.
"""

from __future__ import annotations

import time

import pytest

from knowlyr.agents import ExpertAgent
from knowlyr.agents.inference import AgentInference
from knowlyr.export import export_sft
from knowlyr.rollout import collect
from knowlyr.train.evaluation import compare_agents, evaluate_agent
from knowlyr.train.models import build_tiny_model_for
from knowlyr.train.run import train_sft
from knowlyr.train.selection import restart, validation_split
from knowlyr.train.sft_config import KnowlyrSFTConfig

ENV = "knowlyr/conversation"
SYSTEM = "You answer customers' questions about their orders."


@pytest.mark.slow
def test_sft_from_scratch_beats_untrained_model_on_heldout_tasks(tmp_path):
    trajs = collect(
        ENV, ExpertAgent, 2000, seed=0, env_kwargs={"family": "order_status", "split": "train"}
    )
    assert all(t.outcome.success for t in trajs)
    export = export_sft(trajs, system_prompt=SYSTEM)
    assert len(export) == 2000
    train_rows, val_rows = validation_split(export.dataset, 0.1)
    heldout = {"family": "order_status", "split": "heldout"}

    def evaluate(agent):
        return evaluate_agent(
            ENV, agent, n_episodes=30, seed=50_000, max_steps=3, env_kwargs=heldout
        )

    untrained: list = []

    def train_one(seed: int):
        # The flow's recipe (tasks.train.TrainParams) but induction pretraining: a 2x128 Qwen2
        # trained from scratch, restarted with the next seed until the validation loss says
        # it learned.
        model, tok = build_tiny_model_for(export.dataset, hidden_size=128, seed=seed)
        if not untrained:
            tools = export.dataset[0]["tools"]
            bare = AgentInference(model, tok, tools=tools, max_new_tokens=48)
            untrained.append(evaluate(bare.create_agent(SYSTEM, name="untrained")))
        config = KnowlyrSFTConfig(
            output_dir=str(tmp_path / f"sft-{seed}"),
            learning_rate=3e-3,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=16,
            num_train_epochs=10,
            logging_steps=100,
            disable_tqdm=True,
            seed=seed,
        )
        return train_sft(train_rows, model, tok, config, eval_dataset=val_rows)

    started = time.perf_counter()
    best, results = restart(train_one, range(3), lambda r: r.metrics, target=0.01)
    train_s = time.perf_counter() - started
    result = results[best]

    bridge = AgentInference.from_pretrained(result.path, max_new_tokens=48)
    assert bridge.system_prompt == SYSTEM and bridge.tools == export.dataset[0]["tools"]
    base, trained = untrained[0], evaluate(bridge.create_agent(name="sft"))
    report = compare_agents([base, trained])
    cmp = report.comparisons[0]
    losses = ", ".join(f"{r.metrics['eval_loss']:.4f}" for r in results)
    print(
        f"\nclosed loop: untrained {base.success_rate:.0%} -> trained {trained.success_rate:.0%} "
        f"held-out success (n=30 each), Fisher p={cmp.fisher_p:.2g}; {len(results)} restart(s), "
        f"validation loss {losses}, kept seed {best}; training {train_s:.0f}s"
    )
    print(report.to_markdown())
    assert cmp.fisher_p < 0.01 and cmp.success_diff > 0
    assert trained.success_rate >= 0.8

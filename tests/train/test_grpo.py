from __future__ import annotations

import torch

from knowlyr.export import export_grpo, step_advantages
from knowlyr.train.grpo_config import KnowlyrGRPOConfig
from knowlyr.train.grpo_trainer import (
    KnowlyrGRPOTrainer,
    environment_factory_for,
    step_level_advantages,
)
from knowlyr.train.models import build_tiny_model_for


def test_grpo_export_groups_per_task_with_step_level_advantages(expert_and_random):
    good, bad = expert_and_random
    ds = export_grpo(good + bad, system_prompt="S").dataset
    assert len(ds) == len(good)
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["rewards"][0] > row["rewards"][1] and row["advantages"][0] > 0 > row["advantages"][1]
    # the expert's reward came on its last step: that step gets all the credit (mix=1)
    assert row["step_rewards"][0] == [0.0, 1.0]
    assert row["step_advantages"][0] == [0.0, 2 * row["advantages"][0]]
    assert step_advantages(1.5, [None, None]) == [1.5, 1.5]  # no step rewards: plain GRPO


def test_step_level_advantages_weight_each_assistant_turn():
    adv = torch.tensor([1.0, -2.0])
    # row 0: turn A (2 tokens), tool result, turn B (1 token), padding; row 1: one turn
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0]])
    out = step_level_advantages(adv, mask, [[0.0, 1.0], []], mix=0.5)
    assert out[0].tolist() == [0.5, 0.5, 1.0, 1.0, 1.5, 1.0]
    assert out[1].tolist() == [-2.0] * 6


def test_environment_factory_runs_episodes_of_our_env():
    from knowlyr.taskset import get_suite

    task = get_suite("conversation").tasks(split="train", family="order_status")[0]
    Env = environment_factory_for("knowlyr/conversation", env_kwargs={"family": "order_status"})
    env = Env()
    assert {"query_stats", "respond", "send_message", "web_search"} <= set(dir(env))
    env.reset(task_id=task.task_id, prompt=[])
    oid = task.data["order_id"]
    assert env.query_stats(order_id=oid).startswith(f"order {oid}:")
    env.respond(text=task.reference_answer)
    assert env.get_reward() == 1.0 and env.step_rewards == [0.0, 1.0]
    from transformers.utils import get_json_schema

    schema = get_json_schema(env.query_stats)
    assert (
        schema["function"]["name"] == "query_stats"
        and "order_id" in schema["function"]["parameters"]["properties"]
    )


def test_online_grpo_runs_in_our_env_from_an_exported_dataset(tmp_path, expert_and_random, caplog):
    good, bad = expert_and_random
    ds = export_grpo(good[:4] + bad[:4], system_prompt="S").dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    Env = environment_factory_for(
        "knowlyr/conversation",
        env_kwargs={"family": "order_status"},
        tools=ds[0]["tools"],
        max_steps=3,
    )
    config = KnowlyrGRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=32,
        max_steps=2,
        learning_rate=1e-3,
        disable_tqdm=True,
        max_tool_calling_iterations=3,
    )
    trainer = KnowlyrGRPOTrainer(
        model=model,
        args=config,
        train_dataset=ds.select_columns(["prompt", "task_id"]),
        processing_class=tok,
        environment_factory=Env,
    )
    with caplog.at_level("WARNING", logger="knowlyr.train.grpo_trainer"):
        trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and all(
        h["rewards/KnowlyrConversationEnvironment/mean"] == h["reward"] for h in logs
    )
    assert all(isinstance(e, Env) for e in trainer.environments)
    # an untrained model never finishes an episode: the logs and a warning say why reward is 0
    assert all(h["env/finished"] == 0 and h["reward"] == 0 for h in logs)
    assert caplog.text.count("no rollout of this batch finished its episode") == 1

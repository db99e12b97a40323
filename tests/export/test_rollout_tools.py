"""Exports of our own rollouts declare the env's real tools (issue #36, "faithful tools").

``collect`` records the env's tool schemas in each trajectory's ``metadata["tools"]``, so
every SFT / DPO / GRPO row made from rollouts declares the tools the agent had, with their
descriptions and every parameter, not schemas inferred from the calls seen.
"""

from __future__ import annotations

import pytest

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.core.registry import make
from knowlyr.export import export_dpo, export_grpo, export_sft
from knowlyr.export.store_io import export_from_store
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.taskset import sample
from knowlyr.trajectory import INVALID_ACTION_TOOL

ENV = "knowlyr/conversation"


def _env_tools(env_id: str = ENV) -> list[dict]:
    env = make(env_id)
    try:
        return env.unwrapped.tool_schemas()
    finally:
        env.close()


@pytest.fixture(scope="module")
def rollouts() -> tuple[list, list]:
    """Expert (successful) and random-agent (failed) episodes on the same tasks."""
    ids = [t.task_id for t in sample("conversation", 4, seed=0, family="order_status")]
    good = collect(ENV, ExpertAgent, len(ids), tasks=ids, seed=0)
    bad = collect(ENV, lambda: RandomAgent(seed=1), len(ids), tasks=ids, seed=1, max_steps=3)
    return good, bad


def _names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def test_the_env_schemas_are_real_ones():
    tools = _env_tools()
    # what the exports must declare: every tool, described, with all its typed parameters
    assert _names(tools) == ["query_stats", "web_search", "send_message", "respond"]
    assert all(t["function"].get("description") for t in tools)
    send = next(t for t in tools if t["function"]["name"] == "send_message")
    assert set(send["function"]["parameters"]["properties"]) >= {"to", "action", "order_id"}


def test_rollouts_record_the_env_tools(rollouts):
    good, bad = rollouts
    tools = _env_tools()
    for t in good + bad:
        assert t.metadata["tools"] == tools
    # the calls alone would not show them all: the expert never searches or messages a team
    called = {s.action.tool for t in good for s in t.steps}
    assert called < set(_names(tools))


def test_sft_rows_declare_the_env_tools(rollouts):
    good, _ = rollouts
    result = export_sft(good)
    rows = result.dataset.to_list()
    assert rows and all(r["tools"] == _env_tools() for r in rows)
    assert result.card.params["tools"] == _names(_env_tools())
    assert result.card.params["tool_sets"] == 1


def test_dpo_and_grpo_rows_declare_the_env_tools(rollouts):
    good, bad = rollouts
    tools = _env_tools()
    dpo = export_dpo(good + bad).dataset.to_list()
    grpo = export_grpo(good + bad, min_group_size=2).dataset.to_list()
    assert dpo and grpo
    for row in dpo + grpo:
        assert row["tools"] == tools
        assert INVALID_ACTION_TOOL not in _names(row["tools"])


def test_stored_rollouts_export_the_env_tools(tmp_path, rollouts):
    good, _ = rollouts
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories(good)
    store.add_trajectories(good)  # the same episodes again: the tools do not change their ids
    assert store.count("trajectories") == len(good)
    out = export_from_store(
        store,
        trajectories_version=None,
        reward_config_hashes=score_unscored(store).config_hashes,
        split=None,
    )
    rows = out.result.dataset.to_list()
    assert rows and all(r["tools"] == _env_tools() for r in rows)


def test_rows_of_two_envs_declare_each_its_own_tools():
    conv = collect(ENV, ExpertAgent, 2, seed=0, env_kwargs={"family": "order_status"})
    disc = collect("knowlyr/discussion", ExpertAgent, 2, seed=0)
    rows = export_sft(conv + disc).dataset.to_list()
    by_task = {t.task.task_id: t.metadata["env_id"] for t in conv + disc}
    for r in rows:
        assert r["tools"] == _env_tools(by_task[r["task_id"]])
    assert {_names(r["tools"])[0] for r in rows} == {"query_stats", "knowledge_base"}

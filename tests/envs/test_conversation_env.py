"""The ConversationEnv family: registration, tools, terminal conditions, outcomes, replay."""

from __future__ import annotations

import pytest

import knowlyr
from knowlyr.core import RecorderWrapper, get_profile
from knowlyr.taskset import sample

FAMILY_ENVS = ["knowlyr/conversation", "knowlyr/advisory", "knowlyr/discussion"]


@pytest.mark.parametrize("env_id", FAMILY_ENVS)
def test_registered_and_tools_follow_the_profile(env_id):
    assert env_id in knowlyr.list_envs("knowlyr")
    env = knowlyr.make(env_id)
    domain = env_id.split("/")[1]
    assert env.domain == domain
    assert set(env.available_tools) <= set(get_profile(domain).tool_names)
    assert "respond" in env.available_tools
    names = [s["function"]["name"] for s in env.unwrapped.tool_schemas()]
    assert names == env.available_tools
    for s in env.unwrapped.tool_schemas():
        assert "state" not in s["function"]["parameters"]["properties"]


@pytest.mark.parametrize("env_id", FAMILY_ENVS)
def test_reset_puts_the_public_task_in_info_and_is_seeded(env_id):
    env = knowlyr.make(env_id, split="heldout")
    ts = env.reset(seed=7)
    task = ts.info["task"]
    assert {"task_id", "domain", "suite", "instruction"} <= set(task)
    assert ts.observation == task["instruction"] and task["metadata"]["split"] == "heldout"
    assert "data" not in task and "reference_answer" not in task
    assert env.reset(seed=7).info["task"]["task_id"] == task["task_id"]
    ids = {env.reset(seed=s).info["task"]["task_id"] for s in range(10)}
    assert len(ids) > 5


def test_order_status_episode_end_to_end():
    env = knowlyr.make("knowlyr/conversation", family="order_status")
    ts = env.reset(seed=3)
    assert ts.info["task"]["metadata"]["family"] == "order_status"
    oid = ts.observation.split()[-1].rstrip("?")
    ts = env.step({"tool": "query_stats", "params": {"order_id": oid}})
    assert ts.info["exit_code"] == 0 and not ts.done
    status = ts.observation.split(": ")[1]
    ts = env.step({"tool": "respond", "params": {"text": f"Order {oid} is {status}."}})
    assert ts.terminated and ts.reward == 1.0
    assert ts.info["outcome"]["success"] is True and ts.info["outcome"]["score"] == 1.0
    after = env.step({"tool": "respond", "params": {"text": "again"}})
    assert after.info["exit_code"] != 0 and "reset" in after.observation


def test_tool_errors_are_observations_with_exit_codes():
    env = knowlyr.make("knowlyr/conversation", family="order_status")
    env.reset(seed=0)
    missing = env.step({"tool": "query_stats", "params": {"order_id": "ZZZZZ"}})
    assert missing.observation.startswith("Error:") and missing.info["exit_code"] == 1
    bad = env.step({"tool": "query_stats", "params": {"oid": "ZZZZZ"}})
    assert bad.info["exit_code"] == 2 and "unknown parameter 'oid'" in bad.observation
    unknown = env.step({"tool": "rm_rf", "params": {}})
    assert unknown.info["exit_code"] != 0 and "query_stats" in unknown.observation
    garbage = env.step("respond please")
    assert garbage.info["exit_code"] != 0 and not garbage.done
    empty = env.step({"tool": "respond", "params": {"text": "  "}})
    assert empty.info["exit_code"] != 0 and not empty.done


def test_wrong_answer_fails_with_partial_score():
    env = knowlyr.make("knowlyr/conversation", family="order_status")
    ts = env.reset(seed=1)
    every = "It is pending, processing, shipped, delivered or cancelled."
    ts = env.step({"tool": "respond", "params": {"text": every}})
    assert ts.terminated and ts.reward == 0.0
    out = ts.info["outcome"]
    assert out["success"] is False and out["score"] < 1


def test_refund_policy_is_enforced_by_the_database():
    task = next(
        t for t in sample("conversation", 50, seed=0, family="refund") if not t.required_actions
    )
    env = knowlyr.make("knowlyr/conversation")
    env.reset(task=task)
    oid = task.data["order_id"]
    ts = env.step(
        {"tool": "send_message", "params": {"to": "billing", "action": "refund", "order_id": oid}}
    )
    assert ts.info["exit_code"] == 1 and "refused" in ts.observation
    ts = env.step(
        {"tool": "send_message", "params": {"to": "shipping", "action": "refund", "order_id": oid}}
    )
    assert ts.info["exit_code"] == 2 and "billing" in ts.observation
    ts = env.step({"tool": "respond", "params": {"text": task.reference_answer}})
    assert ts.info["outcome"]["success"]


def test_refund_without_the_action_fails():
    task = next(
        t for t in sample("conversation", 50, seed=0, family="refund") if t.required_actions
    )
    env = knowlyr.make("knowlyr/conversation")
    env.reset(task=task)
    ts = env.step({"tool": "respond", "params": {"text": task.reference_answer}})
    assert ts.terminated and not ts.info["outcome"]["success"]


def test_episodes_do_not_share_database_state():
    task = next(
        t for t in sample("conversation", 50, seed=0, family="refund") if t.required_actions
    )
    env = knowlyr.make("knowlyr/conversation")
    for _ in range(2):
        env.reset(task=task)
        ts = env.step(task.required_actions[0])
        assert ts.info["exit_code"] == 0, ts.observation


def test_max_steps_truncates():
    env = knowlyr.make("knowlyr/conversation", max_steps=2)
    env.reset(seed=0)
    env.step({"tool": "web_search", "params": {"query": "x"}})
    ts = env.step({"tool": "web_search", "params": {"query": "y"}})
    assert ts.truncated and not ts.terminated


@pytest.mark.parametrize("env_id", FAMILY_ENVS)
def test_replaying_a_recorded_episode_reproduces_observations(env_id):
    from knowlyr.agents import NoisyExpert

    rec = RecorderWrapper(knowlyr.make(env_id), agent=NoisyExpert().agent_info)
    agent = NoisyExpert(noise=0.5, seed=2)
    ts = rec.reset(seed=11)
    agent.reset(ts.info)
    while not ts.done:
        ts = rec.step(agent.act(ts.observation, ts.info))
    traj = rec.trajectory
    assert traj.task.task_id == ts.info.get("task_id", traj.task.task_id)
    fresh = knowlyr.make(env_id)
    fresh.reset(task=traj.task.task_id)
    replayed = [fresh.step({"tool": s.action.tool, "params": s.action.params}) for s in traj.steps]
    assert [r.observation for r in replayed] == [s.observation.output for s in traj.steps]
    assert [r.info.get("exit_code") for r in replayed] == [
        s.observation.exit_code for s in traj.steps
    ]
    assert replayed[-1].info["outcome"]["success"] == traj.outcome.success


def test_bad_family_or_split_fails_at_make():
    from knowlyr.errors import ConfigError

    with pytest.raises(ConfigError, match="families are"):
        knowlyr.make("knowlyr/conversation", family="weather")
    with pytest.raises(ConfigError, match="split must be"):
        knowlyr.make("knowlyr/advisory", split="test")
    with pytest.raises(ConfigError, match="is a 'coding' task"):
        knowlyr.make("knowlyr/conversation").reset(task="coding-gcd-0064")


def test_profile_aliases_reach_their_tools():
    env = knowlyr.make("knowlyr/conversation", family="order_status")
    ts = env.reset(seed=2)
    oid = ts.observation.split()[-1].rstrip("?")
    ts = env.step({"tool": "query_order", "params": {"order_id": oid}})
    assert ts.info["exit_code"] == 0 and ts.info["tool"] == "query_stats"
    status = ts.observation.split(": ")[1]
    ts = env.step({"tool": "reply", "params": {"text": f"It is {status}."}})
    assert ts.terminated and ts.info["outcome"]["success"]

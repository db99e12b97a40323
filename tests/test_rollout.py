"""collect(): ordered, reproducible at any concurrency, failures and truncations recorded."""

from __future__ import annotations

import pytest

from knowlyr.agents import Agent, ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.errors import ConfigError
from knowlyr.rollout import collect
from knowlyr.taskset import sample
from knowlyr.trajectory import Trajectory


def test_collect_returns_trajectories_in_order_with_outcomes():
    trajs = collect("knowlyr/conversation", ExpertAgent, 12, seed=5)
    assert len(trajs) == 12 and all(isinstance(t, Trajectory) for t in trajs)
    assert [t.metadata["episode"] for t in trajs] == list(range(12))
    assert all(t.outcome.success and t.outcome.terminated for t in trajs)
    assert all(t.agent.name == "expert" for t in trajs)
    assert all(
        t.task.suite == "conversation" and t.steps[-1].action.tool == "respond" for t in trajs
    )
    assert all(t.steps[0].thought for t in trajs)


@pytest.mark.parametrize("concurrency", [2, 4])
def test_concurrency_gives_the_same_episodes(concurrency):
    kw = {"seed": 1, "env_kwargs": {"split": "train"}}
    one = collect("knowlyr/conversation", lambda: NoisyExpert(noise=0.3, seed=3), 16, **kw)
    many = collect(
        "knowlyr/conversation",
        lambda: NoisyExpert(noise=0.3, seed=3),
        16,
        concurrency=concurrency,
        **kw,
    )
    assert [t.id for t in one] == [t.id for t in many]
    assert len({t.task.task_id for t in one}) > 10


def test_tasks_are_cycled_and_env_kwargs_passed():
    tasks = sample("conversation", 3, seed=0, family="order_status", split="heldout")
    trajs = collect("knowlyr/conversation", ExpertAgent, 6, tasks=tasks)
    assert [t.task.task_id for t in trajs] == [t.task_id for t in tasks] * 2
    fam = collect("knowlyr/conversation", ExpertAgent, 5, env_kwargs={"family": "order_status"})
    assert {t.task.metadata["family"] for t in fam} == {"order_status"}
    assert all(len(t.steps) == 2 for t in fam)


class _Crashes(Agent):
    name = "crashes"

    def __init__(self):
        self.n = 0

    def reset(self, info=None):
        self.n = 0

    def act(self, observation, info):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("model server went away")
        return {"tool": "web_search", "params": {"query": "returns"}}


def test_a_failing_episode_is_recorded_not_raised():
    trajs = collect("knowlyr/conversation", _Crashes, 3, concurrency=2)
    assert len(trajs) == 3
    for t in trajs:
        assert t.outcome.success is False and t.outcome.reason.startswith("error: RuntimeError")
        assert len(t.steps) == 1 and "model server went away" in t.metadata["traceback"]
        assert t.task.task_id.startswith("conversation-")


def test_truncated_episodes_are_failed_and_scored():
    trajs = collect("knowlyr/discussion", RandomAgent, 4, max_steps=1)
    for t in trajs:
        assert t.outcome.success is False
        if t.outcome.truncated:
            assert len(t.steps) == 1 and t.outcome.score is not None and "checks" in t.metadata


def test_reward_fn_replaces_step_rewards():
    trajs = collect("knowlyr/conversation", ExpertAgent, 2, reward_fn=lambda action, ts: -1.0)
    assert all(s.reward == -1.0 for t in trajs for s in t.steps)


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="factory"):
        collect("knowlyr/conversation", ExpertAgent(), 2, concurrency=2)
    with pytest.raises(ConfigError, match="n_episodes"):
        collect("knowlyr/conversation", ExpertAgent, -1)
    with pytest.raises(ConfigError, match="concurrency"):
        collect("knowlyr/conversation", ExpertAgent, 1, concurrency=0)
    with pytest.raises(ConfigError, match="Did you mean"):
        collect("knowlyr/conversatoin", ExpertAgent, 1)
    assert collect("knowlyr/conversation", ExpertAgent(), 0) == []


def test_cli_lists_samples_shows_and_rolls_out(tmp_path):
    from typer.testing import CliRunner

    from knowlyr.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["tasks"])
    assert r.exit_code == 0 and "coding" in r.output and "order_status" in r.output
    r = runner.invoke(
        app, ["tasks", "conversation", "--family", "order_status", "--split", "heldout", "-n", "2"]
    )
    assert r.exit_code == 0 and r.output.count("heldout") == 2
    r = runner.invoke(app, ["task", "coding-gcd-0064"])
    assert (
        r.exit_code == 0
        and '"task_id": "coding-gcd-0064"' in r.output
        and "fixed_source" not in r.output
    )
    assert "fixed_source" in runner.invoke(app, ["task", "coding-gcd-0064", "--full"]).output
    out = tmp_path / "trajs.jsonl"
    r = runner.invoke(
        app,
        ["rollout", "knowlyr/conversation", "--agent", "noisy:0.5", "-n", "6", "--out", str(out)],
    )
    assert r.exit_code == 0 and "6 episodes" in r.output
    assert len([Trajectory.from_json(line) for line in out.read_bytes().splitlines()]) == 6
    r = runner.invoke(app, ["rollout", "knowlyr/conversatoin"])
    assert r.exit_code == 2 and "Did you mean" in r.output
    assert (
        runner.invoke(app, ["rollout", "knowlyr/conversation", "--agent", "smart"]).exit_code == 2
    )


def test_configuration_errors_are_raised_not_recorded():
    with pytest.raises(ConfigError, match="families are"):
        collect("knowlyr/conversation", ExpertAgent, 2, env_kwargs={"family": "weather"})
    with pytest.raises(ConfigError, match="no task"):
        collect(
            "knowlyr/conversation", ExpertAgent, 1, tasks=["conversation-order_status-99999999"]
        )


def test_on_episode_sees_every_trajectory_once_as_episodes_end():
    from knowlyr.agents import ExpertAgent

    seen = []
    trajs = collect(
        "knowlyr/conversation", ExpertAgent, 5, seed=3, concurrency=2, on_episode=seen.append
    )
    assert sorted(t.metadata["episode"] for t in seen) == [0, 1, 2, 3, 4]
    assert {t.id for t in seen} == {t.id for t in trajs}


def _conversation_tools() -> list[dict]:
    from knowlyr.core.registry import make

    env = make("knowlyr/conversation")
    try:
        return env.unwrapped.tool_schemas()
    finally:
        env.close()


def test_every_trajectory_records_the_tools_its_agent_was_given():
    tools = _conversation_tools()
    trajs = collect("knowlyr/conversation", ExpertAgent, 3, seed=0)
    assert all(t.metadata["tools"] == tools for t in trajs)
    # one list per env, not a copy per episode or step
    assert len({id(t.metadata["tools"]) for t in trajs}) == 1
    # a failed episode too: what the agent had when it failed
    for t in collect("knowlyr/conversation", _Crashes, 2):
        assert t.outcome.reason.startswith("error:") and t.metadata["tools"] == tools


class _ModelGone(_Crashes):
    def act(self, observation, info):
        from knowlyr.agents.api import ModelCallError

        raise ModelCallError("the model API refused", attempts=3)


class _ResetFails:
    """The real conversation env, whose reset fails once (a sandbox that would not start)."""

    def __new__(cls):
        from knowlyr.core.env import EnvWrapper
        from knowlyr.core.registry import make

        class Wrapper(EnvWrapper):
            def reset(self, *, task=None, seed=None, options=None):
                raise RuntimeError("the episode could not start")

        return Wrapper(make("knowlyr/conversation"))


def test_episodes_failing_at_reset_or_on_the_model_record_the_env_tools():
    from knowlyr.core.wrappers import RecorderWrapper
    from knowlyr.rollout import run_episode

    tools = _conversation_tools()
    (gone,) = collect("knowlyr/conversation", _ModelGone, 1)
    assert gone.steps[-1].metadata["model_call_failed"] and gone.metadata["tools"] == tools
    agent = _Crashes()
    traj = run_episode(RecorderWrapper(_ResetFails(), agent=agent.agent_info), agent)
    assert traj.outcome.reason.startswith("error: RuntimeError") and not traj.steps
    assert traj.metadata["tools"] == tools

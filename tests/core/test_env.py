from __future__ import annotations

import pytest

from knowlyr.core import ActionCheckWrapper, TimeStep, parse_action
from knowlyr.errors import ActionError
from tests.core.stub_env import CounterEnv


def test_timestep_done_combines_terminated_and_truncated():
    assert not TimeStep("x").done
    assert TimeStep("x", terminated=True).done
    assert TimeStep("x", truncated=True).done


def test_episode_runs_to_success(env):
    ts = env.reset()
    assert ts.observation == "Count to 3."
    assert ts.info["task"]["task_id"] == "count-3"
    env.step({"tool": "add", "params": {"n": 2}})
    ts = env.step({"tool": "add"})  # params default to {}
    assert ts.observation == "count=3"
    ts = env.step({"tool": "submit", "params": {}})
    assert ts.terminated and not ts.truncated and ts.reward == 1.0
    assert ts.info["outcome"]["success"] is True


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ("add", "must be a dict"),
        ({"params": {}}, 'non-empty string "tool"'),
        ({"tool": "add", "params": [1]}, '"params" must be a dict'),
        ({"tool": "fly", "params": {}}, "unknown tool 'fly'; available tools: add, read, submit"),
        ({"tool": "add", "params": {}, "extra": 1}, "unknown keys ['extra']"),
    ],
)
def test_malformed_action_is_an_error_observation_not_a_crash(env, action, fragment):
    env.reset()
    ts = env.step(action)
    assert ts.observation.startswith("Error:")
    assert fragment in ts.observation
    assert ts.info["exit_code"] != 0 and not ts.done
    with pytest.raises(ActionError, match="tool"):
        parse_action(action if isinstance(action, dict) and "tool" not in action else "nope")


def test_action_check_wrapper_protects_envs_that_do_not_check():
    class Careless(CounterEnv):
        def step(self, action):
            return super().step(action) if action["tool"] else None  # would KeyError on garbage

    env = ActionCheckWrapper(Careless())
    env.reset()
    ts = env.step({"oops": 1})
    assert ts.observation.startswith("Error:") and ts.info["error"]


def test_close_and_context_manager(env):
    with env as e:
        e.reset()
    assert env.closed


def test_agentenv_is_abstract():
    from knowlyr.core import AgentEnv

    with pytest.raises(TypeError):
        AgentEnv()

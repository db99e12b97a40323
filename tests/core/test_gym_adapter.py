from __future__ import annotations

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from knowlyr.core import register
from knowlyr.core.gym_adapter import (
    GymnasiumEnv,
    TextSpace,
    ToolCallSpace,
    make_vec,
    register_gymnasium_envs,
)
from knowlyr.core.registry import registry
from tests.core.stub_env import CounterEnv


@pytest.fixture(autouse=True)
def _counter_registered():
    register("test/counter", "tests.core.stub_env:CounterEnv", override=True)
    yield
    registry.pop("test/counter", None)


def test_gymnasium_env_steps_with_dicts_and_json_strings():
    env = GymnasiumEnv(CounterEnv())
    obs, info = env.reset(seed=1, options={"task": {"target": 2}})
    assert obs == "Count to 2." and info["task"]["task_id"] == "count-2"
    obs, r, term, trunc, _ = env.step('{"tool": "add", "params": {"n": 2}}')
    assert obs == "count=2" and (r, term, trunc) == (0.0, False, False)
    obs, r, term, trunc, info = env.step({"tool": "submit", "params": {}})
    assert (obs, r, term, trunc) == ("correct", 1.0, True, False) and info["outcome"]["success"]


def test_malformed_actions_are_observations():
    env = GymnasiumEnv(CounterEnv())
    env.reset()
    obs, *_ = env.step("not json at all")
    assert obs.startswith("Error:")
    assert not env.action_space.contains("garbage")
    assert env.action_space.contains({"tool": "add", "params": {"n": 1}})
    assert env.action_space.contains('{"tool": "submit"}')
    assert env.observation_space.contains("任何文本 any text")


def test_passes_gymnasiums_env_checker():
    check_env(GymnasiumEnv(CounterEnv()), skip_render_check=True)


def test_spaces_sample_and_compare():
    space = ToolCallSpace(["a", "b"], seed=0)
    assert all(space.contains(space.sample()) for _ in range(20))
    assert space == ToolCallSpace(["a", "b"]) and TextSpace(10) != TextSpace(11)
    with pytest.raises(ValueError, match="max_length must be positive"):
        TextSpace(0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_env_runs_many_episodes_at_once(mode):
    envs = make_vec("test/counter", 3, mode=mode)
    try:
        obs, _ = envs.reset(seed=0)
        assert list(obs) == ["Count to 3."] * 3
        envs.step([{"tool": "add", "params": {"n": n}} for n in (1, 2, 3)])
        _, rewards, term, _, _ = envs.step([{"tool": "submit", "params": {}}] * 3)
        assert list(rewards) == [0.0, 0.0, 1.0] and all(term)
    finally:
        envs.close()
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        make_vec("test/counter", 0)


def test_gymnasium_make_after_registration():
    ids = register_gymnasium_envs()
    assert "test/counter-v0" in ids
    env = gymnasium.make("test/counter-v0")
    obs, _ = env.reset()
    assert obs == "Count to 3."
    env.close()

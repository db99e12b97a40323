from __future__ import annotations

import pytest

import knowlyr
from knowlyr.core import (
    ActionCheckWrapper,
    EnvSpec,
    MaxStepsWrapper,
    list_envs,
    make,
    register,
    spec,
)
from knowlyr.core.registry import registry
from knowlyr.errors import ConfigError, UnknownEnvError
from tests.core.stub_env import CounterEnv


@pytest.fixture(autouse=True)
def _clean_registry():
    before = dict(registry)
    yield
    registry.clear()
    registry.update(before)


def test_user_defined_env_as_in_the_readme():
    class MyEnv(CounterEnv):
        domain = "my_domain"

    register("my-project/my-env", MyEnv, target=5)
    env = knowlyr.make("my-project/my-env")
    assert env.reset().observation == "Count to 5."
    assert env.domain == "my_domain"
    assert isinstance(env, ActionCheckWrapper) and isinstance(env.unwrapped, MyEnv)
    assert "my-project/my-env" in list_envs() and list_envs("my-project") == ["my-project/my-env"]


def test_make_kwargs_override_defaults_and_wrappers_follow_the_spec():
    register("test/counter", CounterEnv, target=5, max_steps=7)
    env = make("test/counter", target=2)
    assert env.unwrapped.target == 2
    assert isinstance(env, MaxStepsWrapper) and env.max_steps == 7
    bare = make("test/counter", check_actions=False, max_steps=None)
    assert not isinstance(bare, ActionCheckWrapper)


def test_string_entry_point_and_json_round_trip():
    s = register(
        "test/str", "tests.core.stub_env:CounterEnv", target=4, max_steps=3, description="stub"
    )
    again = EnvSpec.from_json(s.to_json())
    assert again == s
    assert make("test/str").unwrapped.target == 4
    assert (s.namespace, s.name) == ("test", "str")


def test_callable_entry_point_does_not_serialise():
    s = register("test/callable", CounterEnv)
    with pytest.raises(ConfigError, match="register it as a 'module:Class' string"):
        s.to_json()


def test_unknown_id_suggests_close_matches():
    register("test/counter", CounterEnv)
    with pytest.raises(UnknownEnvError, match=r"Did you mean 'test/counter'"):
        spec("test/countr")
    with pytest.raises(UnknownEnvError, match="no environment registered as 'zzz/qqq'"):
        make("zzz/qqq")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("tests.core.stub_env", "must look like 'module:Class'"),
        ("no_such_module_xyz:Env", "cannot be imported"),
        ("tests.core.stub_env:Nope", "has no 'Nope'"),
    ],
)
def test_bad_entry_points_fail_clearly(entry, message):
    register("test/bad", entry)
    with pytest.raises(ConfigError, match=message):
        make("test/bad")


def test_registration_errors():
    with pytest.raises(ConfigError, match="namespace/name"):
        register("no-namespace", CounterEnv)
    register("test/dup", CounterEnv)
    register("test/dup", CounterEnv)  # same again is harmless
    with pytest.raises(ConfigError, match="already registered"):
        register("test/dup", CounterEnv, target=9)
    register("test/dup", CounterEnv, target=9, override=True)
    with pytest.raises(ConfigError, match="max_steps must be a positive int"):
        register("test/x", CounterEnv, max_steps=0)


def test_entry_point_must_build_an_agentenv():
    register("test/notenv", lambda: object())
    with pytest.raises(ConfigError, match="not an AgentEnv"):
        make("test/notenv")

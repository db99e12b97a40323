from __future__ import annotations

import subprocess
import sys

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import knowlyr
from knowlyr.core import list_envs, register
from knowlyr.core.gym_adapter import (
    GYMNASIUM_ENTRY_POINT,
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


# --- Gymnasium's registry on import (issue #39) -----------------------------------------

_MAKE = (
    "env = gymnasium.make('{id}', max_steps=4)\n"
    "obs, info = env.reset(seed=0)\n"
    "assert isinstance(obs, str) and obs and info['task']['task_id'], (obs, info)\n"
    "print(type(env.unwrapped).__name__, env.unwrapped.env.max_steps)\n"
)


@pytest.mark.parametrize(
    ("imports", "env_id"),
    [
        ("import knowlyr\nimport gymnasium\n", "knowlyr/conversation-v0"),
        ("import gymnasium\nimport knowlyr\n", "knowlyr/conversation-v0"),
        ("import gymnasium\n", "knowlyr:knowlyr/advisory-v0"),  # Gymnasium imports the module
        (
            "from knowlyr.core.gym_adapter import GymnasiumEnv\nimport gymnasium\n",
            "knowlyr/discussion-v0",
        ),
    ],
    ids=["knowlyr-first", "gymnasium-first", "module-prefix", "adapter-first"],
)
def test_gymnasium_make_works_after_import_alone(imports, env_id):
    out = subprocess.run(
        [sys.executable, "-c", imports + _MAKE.format(id=env_id)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["GymnasiumEnv", "4"]


def test_import_knowlyr_imports_neither_gymnasium_nor_numpy():
    code = "import sys, knowlyr\nprint(sorted({'gymnasium', 'numpy', 'knowlyr.core'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_builtin_env_is_in_gymnasiums_registry():
    assert sorted(f"knowlyr/{n}" for n in knowlyr.GYMNASIUM_ENVS) == list_envs("knowlyr")
    for name in knowlyr.GYMNASIUM_ENVS:
        gspec = gymnasium.spec(f"knowlyr/{name}-v0")
        assert gspec.entry_point == GYMNASIUM_ENTRY_POINT
        assert gspec.kwargs == {"env": f"knowlyr/{name}"}


# --- ToolCallSpace.sample() from the tools' JSON schemas ------------------------------------

_SCHEMA_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 3, "maxLength": 5},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 4},
                    "order": {"enum": ["asc", "desc"]},
                    "exact": {"type": "boolean"},
                    "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                    "page": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
                    "filter": {"$ref": "#/$defs/Filter"},
                },
                "required": ["query", "limit", "order", "exact", "filter"],
                "$defs": {
                    "Filter": {
                        "type": "object",
                        "properties": {"field": {"type": "string", "enum": ["a", "b"]}},
                        "required": ["field"],
                    }
                },
            },
        },
    },
    {"name": "submit", "parameters": {"type": "object", "properties": {}, "required": []}},
    "noop",  # a name alone: empty params
]


def _schema_of(tools, name):
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else {"name": t, "parameters": {}}
        if fn["name"] == name:
            return fn["parameters"]
    raise KeyError(name)


def test_tool_call_samples_fill_params_that_validate_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    space = ToolCallSpace(_SCHEMA_TOOLS, seed=3)
    calls = [space.sample() for _ in range(200)]
    assert {c["tool"] for c in calls} == {"search", "submit", "noop"}
    searches = [c["params"] for c in calls if c["tool"] == "search"]
    for params in searches:
        jsonschema.validate(params, _schema_of(_SCHEMA_TOOLS, "search"))
    assert {p["order"] for p in searches} == {"asc", "desc"}
    assert {p["limit"] for p in searches} == {1, 2, 3, 4}
    assert {p["exact"] for p in searches} == {True, False}
    assert any("tags" in p for p in searches) and any("tags" not in p for p in searches)
    assert all(c["params"] == {} for c in calls if c["tool"] != "search")
    assert all(space.contains(c) for c in calls)


def test_tool_call_samples_are_reproducible_with_a_seed():
    a, b, c = (ToolCallSpace(_SCHEMA_TOOLS, seed=s) for s in (7, 7, 8))
    first = [a.sample() for _ in range(20)]
    assert first == [b.sample() for _ in range(20)]
    assert first != [c.sample() for _ in range(20)]
    a.seed(7)
    assert [a.sample() for _ in range(20)] == first


def test_a_real_envs_action_space_samples_calls_its_tools_accept():
    jsonschema = pytest.importorskip("jsonschema")
    env = GymnasiumEnv("knowlyr/conversation")
    env.reset(seed=0)
    env.action_space.seed(0)
    schemas = env.env.unwrapped.tool_schemas()
    for _ in range(30):
        call = env.action_space.sample()
        jsonschema.validate(call["params"], _schema_of(schemas, call["tool"]))
    # web_search, send_message and respond have required parameters: samples carry them
    sampled = [env.action_space.sample() for _ in range(40)]
    assert all(c["params"].get("query") for c in sampled if c["tool"] == "web_search")
    assert all(c["params"].get("text") for c in sampled if c["tool"] == "respond")


def test_a_seeded_action_space_survives_reset():
    env = GymnasiumEnv(CounterEnv())
    env.action_space.seed(5)
    space = ToolCallSpace(["add", "read", "submit"], seed=5)
    expected = [space.sample() for _ in range(12)]
    env.reset(seed=1)
    assert [env.action_space.sample() for _ in range(12)] == expected


def test_bad_tool_schemas_are_errors():
    with pytest.raises(ValueError, match="a name or a function schema"):
        ToolCallSpace([{"parameters": {}}])
    with pytest.raises(ValueError, match="empty range"):
        ToolCallSpace(
            [
                {
                    "name": "t",
                    "parameters": {
                        "type": "object",
                        "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 2}},
                        "required": ["n"],
                    },
                }
            ],
            seed=0,
        ).sample()

"""Scripted experts solve >= 95% of held-out tasks; noisy experts waste steps; random fails."""

from __future__ import annotations

import pytest

import knowlyr
from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.errors import ConfigError
from knowlyr.taskset import sample

# (env id, suite): the suites that need no sandbox; coding and engineering are in tests/envs
SUITES = [
    ("knowlyr/conversation", "conversation"),
    ("knowlyr/advisory", "advisory"),
    ("knowlyr/discussion", "discussion"),
]
N = 150  # per suite: a 95% bar on 150 draws has a standard error of ~2 points


def _run(env, agent, task):
    ts = env.reset(task=task)
    agent.reset(ts.info)
    actions = []
    while not ts.done:
        action = agent.act(ts.observation, ts.info)
        actions.append(action)
        ts = env.step(action)
    return ts.info.get("outcome") or {"success": False}, actions


@pytest.mark.parametrize(("env_id", "suite"), SUITES)
def test_expert_solves_at_least_95_percent_of_heldout(env_id, suite):
    env = knowlyr.make(env_id)
    agent = ExpertAgent()
    results = [_run(env, agent, t) for t in sample(suite, N, seed=0, split="heldout")]
    rate = sum(bool(o["success"]) for o, _ in results) / N
    assert rate >= 0.95, rate
    for _, actions in results[:20]:
        assert all(a.get("thought") for a in actions)


@pytest.mark.parametrize(("env_id", "suite"), SUITES)
def test_random_agent_is_near_zero(env_id, suite):
    env = knowlyr.make(env_id)
    results = [_run(env, RandomAgent(seed=1), t) for t in sample(suite, N, seed=1, split="heldout")]
    assert sum(bool(o["success"]) for o, _ in results) / N <= 0.05


@pytest.mark.parametrize(("env_id", "suite"), SUITES)
def test_noisy_expert_takes_more_steps_and_is_seeded(env_id, suite):
    env = knowlyr.make(env_id)
    tasks = sample(suite, 60, seed=2, split="heldout")
    expert = [_run(env, ExpertAgent(), t) for t in tasks]
    noisy_agent = NoisyExpert(noise=0.4, seed=5)
    noisy, kinds = [], set()
    for t in tasks:
        noisy.append(_run(env, noisy_agent, t))
        kinds.update(noisy_agent.noise_log)
    assert sum(len(a) for _, a in noisy) > sum(len(a) for _, a in expert)
    assert {"reread", "wrong_params"} <= kinds
    again = [_run(env, NoisyExpert(noise=0.4, seed=5), t) for t in tasks[:10]]
    assert [a for _, a in again] == [a for _, a in noisy[:10]]
    other = [_run(env, NoisyExpert(noise=0.4, seed=6), t) for t in tasks[:10]]
    assert [a for _, a in other] != [a for _, a in noisy[:10]]
    assert sum(bool(o["success"]) for o, _ in noisy) / len(tasks) >= 0.8


def test_noisy_wrong_params_produce_error_observations():
    env = knowlyr.make("knowlyr/conversation", family="order_status")
    agent = NoisyExpert(noise=1.0, seed=0, kinds=("wrong_params",), max_noise=1)
    ts = env.reset(seed=4)
    agent.reset(ts.info)
    codes = []
    while not ts.done:
        ts = env.step(agent.act(ts.observation, ts.info))
        codes.append(ts.info["exit_code"])
    assert codes[1] != 0  # the corrupted lookup
    assert ts.info["outcome"]["success"]


def test_noise_arguments_are_validated():
    with pytest.raises(ValueError, match="noise must be in"):
        NoisyExpert(noise=1.5)
    with pytest.raises(ValueError, match="unknown noise kinds"):
        NoisyExpert(kinds=("typo",))


def test_expert_for_unknown_domain_is_a_clear_error():
    with pytest.raises(ConfigError, match="no scripted expert for suite"):
        ExpertAgent().reset({"task": {"task_id": "x", "domain": "browser"}})


def test_random_agent_draws_from_given_tool_schemas():
    env = knowlyr.make("knowlyr/discussion")
    schemas = env.unwrapped.tool_schemas()
    agent = RandomAgent(seed=3, tools=schemas)
    ts = env.reset(seed=0)
    agent.reset(ts.info)
    names = {s["function"]["name"]: set(s["function"]["parameters"]["properties"]) for s in schemas}
    for _ in range(30):
        a = agent.act("", {})
        assert a["tool"] in names and set(a["params"]) == names[a["tool"]]


def test_give_up_noise_fails_a_share_of_episodes():
    from knowlyr.agents import GIVE_UP, NOISE_KINDS

    env = knowlyr.make("knowlyr/conversation")
    tasks = sample("conversation", 60, seed=3, split="heldout")
    agent = NoisyExpert(noise=0.3, seed=0, kinds=(*NOISE_KINDS, GIVE_UP))
    results = [_run(env, agent, t) for t in tasks]
    rate = sum(bool(o["success"]) for o, _ in results) / len(tasks)
    assert 0.5 < rate < 1.0

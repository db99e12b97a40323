"""Policies named by a string (``agent_factory``) run real episodes."""

from __future__ import annotations

import pytest

from knowlyr.agents.spec import agent_factory
from knowlyr.rollout import collect


@pytest.mark.parametrize(
    ("spec", "agent"),
    [("expert", "expert"), ("noisy", "noisy"), ("noisy:0.9", "noisy"), ("random", "random")],
)
def test_agent_specs_make_working_policies(spec: str, agent: str) -> None:
    trajs = collect("knowlyr/conversation", agent_factory(spec, seed=3), 2, seed=0)
    assert len(trajs) == 2 and all(t.agent.name.startswith(agent) for t in trajs)


@pytest.mark.parametrize("spec", ["checkpoint", "checkpoint:", "gpt", "Expert"])
def test_unknown_agent_spec_names_the_choices(spec: str) -> None:
    with pytest.raises(ValueError, match="agent must be 'expert', 'noisy"):
        agent_factory(spec)


def test_noisy_spec_takes_its_flaws_and_names_the_recorded_prefix():
    from knowlyr.agents.noisy import GIVE_UP
    from knowlyr.agents.spec import recorded_prefix
    from knowlyr.rollout import collect

    trajs = collect("knowlyr/conversation", agent_factory("noisy:1:give_up", seed=3), 6)
    # every episode gives up (the only flaw, at every step): none succeeds
    assert not any(t.outcome.success for t in trajs)
    assert all(t.agent.name.startswith(recorded_prefix("noisy:1:give_up")) for t in trajs)
    assert GIVE_UP == "give_up"
    assert recorded_prefix("expert") == "expert"
    assert recorded_prefix("checkpoint:runs/x/final") == "checkpoint:"
    with pytest.raises(ValueError, match="unknown noise kinds"):
        agent_factory("noisy:0.5:sulk")
    with pytest.raises(ValueError, match="agent must be"):
        recorded_prefix("sulky")


def test_a_checkpoint_factory_loads_the_model_once_and_close_frees_it(tmp_path):
    from knowlyr.errors import ConfigError
    from knowlyr.train.models import build_tiny_model, save_model

    model, tok = build_tiny_model(["order K3Z9Q has shipped"], hidden_size=32, seed=0)
    save_model(model, tok, tmp_path / "m")
    factory = agent_factory(f"checkpoint:{tmp_path / 'm'}", seed=3, temperature=1.0)
    a, b = factory(), factory()
    assert a is not b and a.inference is b.inference  # one model, one batched generator
    assert a.name == "checkpoint:m" and a.seed == 3 and a.inference.temperature == 1.0
    factory.close()
    with pytest.raises(ConfigError, match="closed"):
        a.inference.batcher.generate([1, 2], max_new_tokens=2)
    assert factory().inference is not a.inference  # a later call loads it again
    factory.close()

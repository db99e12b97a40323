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

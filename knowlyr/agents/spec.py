"""Policies named by a short string: what CLIs, configs and orchestrators pass around."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["agent_factory"]


def agent_factory(agent: str, *, seed: int = 0) -> Callable[[], Any]:
    """A zero-argument factory for the policy named by ``agent``.

    Args:
        agent: ``expert`` (the suite's scripted expert), ``noisy`` or ``noisy:<p>`` (an expert
            that fumbles a fraction ``p`` of its steps, default 0.3), ``random``, or
            ``checkpoint:<path>`` (a local Hugging Face checkpoint through the inference
            bridge).
        seed: the seed of the noisy / random agents.

    Raises:
        ValueError: ``agent`` names none of these.

    Example:
        >>> from knowlyr.rollout import collect
        >>> trajs = collect("knowlyr/conversation", agent_factory("noisy:0.5", seed=1), 2)
        >>> len(trajs)
        2
    """
    from knowlyr.agents.noisy import NoisyExpert, RandomAgent
    from knowlyr.agents.scripted import ExpertAgent

    kind, _, arg = agent.partition(":")
    if kind == "expert":
        return ExpertAgent
    if kind == "noisy":
        noise = float(arg) if arg else 0.3
        return lambda: NoisyExpert(noise, seed=seed)
    if kind == "random":
        return lambda: RandomAgent(seed=seed)
    if kind == "checkpoint" and arg:
        from knowlyr.agents.inference import AgentInference

        return lambda: AgentInference.from_pretrained(arg, max_new_tokens=96).create_agent()
    raise ValueError(
        f"agent must be 'expert', 'noisy[:p]', 'random' or 'checkpoint:<path>', got {agent!r}"
    )

"""Policies: scripted experts, noisy and random agents, local models (the inference bridge).

Example:
    >>> import knowlyr
    >>> from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
    >>> from knowlyr.rollout import collect
    >>> trajs = collect("knowlyr/conversation", ExpertAgent, 4, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

from knowlyr.agents.base import Agent
from knowlyr.agents.noisy import GIVE_UP, NOISE_KINDS, NoisyExpert, RandomAgent
from knowlyr.agents.scripted import (
    AdvisoryExpert,
    CodingExpert,
    ConversationExpert,
    DiscussionExpert,
    EngineeringExpert,
    ExpertAgent,
    ReferenceExpert,
    ScriptedExpert,
)

__all__ = [
    "GIVE_UP",
    "NOISE_KINDS",
    "AdvisoryExpert",
    "Agent",
    "CodingExpert",
    "ConversationExpert",
    "DiscussionExpert",
    "EngineeringExpert",
    "ExpertAgent",
    "NoisyExpert",
    "RandomAgent",
    "ReferenceExpert",
    "ScriptedExpert",
]

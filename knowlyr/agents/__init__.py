"""Policies: scripted experts, noisy and random agents, API models, local models.

API models: :class:`OpenAIAgent` (Chat Completions: OpenAI and OpenAI-compatible servers) and
:class:`AnthropicAgent` (the Messages API); local models go through the inference bridge
(:mod:`knowlyr.agents.inference`).

Example:
    >>> import knowlyr
    >>> from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
    >>> from knowlyr.rollout import collect
    >>> trajs = collect("knowlyr/conversation", ExpertAgent, 4, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

from knowlyr.agents.anthropic_agent import AnthropicAgent
from knowlyr.agents.api import MODEL_PRICES, ApiAgent, ModelCallError
from knowlyr.agents.base import Agent
from knowlyr.agents.noisy import GIVE_UP, NOISE_KINDS, NoisyExpert, RandomAgent
from knowlyr.agents.openai_agent import OpenAIAgent
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
    "MODEL_PRICES",
    "NOISE_KINDS",
    "AdvisoryExpert",
    "Agent",
    "AnthropicAgent",
    "ApiAgent",
    "CodingExpert",
    "ConversationExpert",
    "DiscussionExpert",
    "EngineeringExpert",
    "ExpertAgent",
    "ModelCallError",
    "NoisyExpert",
    "OpenAIAgent",
    "RandomAgent",
    "ReferenceExpert",
    "ScriptedExpert",
]

"""Shared data for the training tests: real episodes from the conversation env."""

from __future__ import annotations

import pytest

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.rollout import collect
from knowlyr.taskset import get_suite

ENV = "knowlyr/conversation"


@pytest.fixture(scope="session")
def order_tasks():
    return get_suite("conversation").tasks(split="train", family="order_status")[:16]


@pytest.fixture(scope="session")
def expert_and_random(order_tasks):
    """For each task: one expert episode (success) and one random-agent episode (failure)."""
    good = collect(ENV, ExpertAgent, len(order_tasks), tasks=order_tasks, seed=0)
    bad = collect(
        ENV, lambda: RandomAgent(seed=1), len(order_tasks), tasks=order_tasks, seed=0, max_steps=2
    )
    return good, bad

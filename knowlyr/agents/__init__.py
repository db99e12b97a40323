"""Policies: scripted experts, noisy and random agents, local models (the inference bridge)."""

from __future__ import annotations

from knowlyr.agents.base import Agent

__all__ = ["Agent"]

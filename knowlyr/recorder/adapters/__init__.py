"""Built-in log format adapters, one module per format family; importing registers them.

=================  =============================================================
format             what
=================  =============================================================
knowlyr            our Trajectory JSON/JSONL (what ``record convert -o`` writes)
mini_swe_agent     mini-swe-agent ``.traj.json`` (text actions: one fenced bash block a turn)
swe_agent          SWE-agent ``.traj``
knowlyr_legacy     the original knowlyr-agent recorder schema
atif               ATIF v1.x
openhands          OpenHands event log (JSON array, or .jsonl one event per line)
openhands_output   OpenHands resolver / evaluation ``output.jsonl`` rows
claude_code        Claude Code session JSONL (one file = one trajectory)
agentgym           AgentGym AgentTraj (``conversations[{from, value, loss}]``)
anthropic          Anthropic messages with tool_use / tool_result blocks
openai_chat        OpenAI chat messages with tool_calls (SWE-Gym style)
=================  =============================================================
"""

from __future__ import annotations

from knowlyr.recorder.adapters import (
    agentgym,
    atif,
    chat,
    knowlyr,
    mini_swe_agent,
    openhands,
    openhands_output,
    swe_agent,
)

__all__ = [
    "agentgym",
    "atif",
    "chat",
    "knowlyr",
    "mini_swe_agent",
    "openhands",
    "openhands_output",
    "swe_agent",
]

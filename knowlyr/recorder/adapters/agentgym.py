"""AgentGym ``AgentTraj``: ``{"item_id": "webshop_12", "conversations": [{"from", "loss", "value"}]}``.

The conversation alternates ``human`` and ``gpt`` turns. When the first human turn is the
environment's prompt answered by a short ``gpt`` acknowledgement ("OK") with ``loss`` false,
the prompt is kept as ``metadata["system_prompt"]`` and the next human turn is the task.
Each later ``gpt`` turn is a step: a ``Thought: ... Action: ...`` reply is split into the
thought and the action; an action written ``name[argument]`` (WebShop ``search[red shoes]``,
``click[Buy Now]``) or ``name(arguments)`` becomes tool ``name`` with ``{"input": argument}``,
any other action text tool ``action`` with ``{"text": ...}``. The next human turn is the
observation. ``loss`` is kept per step (``metadata["loss"]``).
"""

from __future__ import annotations

import re
from typing import Any

from knowlyr.recorder.base import (
    Adapter,
    agent_info,
    as_str,
    observation,
    outcome,
    register_adapter,
    step,
    task,
    tool_call,
    trajectory,
)
from knowlyr.trajectory import Trajectory

__all__ = ["AgentGymAdapter", "parse_react"]

_REACT = re.compile(r"^\s*(?:Thought:\s*(?P<thought>.*?))?\s*Action:\s*(?P<action>.*)$", re.S)
_SCORE = re.compile(r"Your score \(min 0(?:\.0)?, max 1(?:\.0)?\): ([0-9]*\.?[0-9]+)")
_CALL = re.compile(r"^\s*(?P<name>[A-Za-z_][\w\-]*)\s*(?:\[(?P<br>.*)\]|\((?P<par>.*)\))\s*$", re.S)


def parse_react(text: str) -> tuple[str, str | None, str | None, dict[str, Any]]:
    """``(thought, message, tool, params)`` from a ReAct-style reply.

    Example:
        >>> parse_react("Thought: look for shoes\\nAction: search[red shoes]")
        ('look for shoes', None, 'search', {'input': 'red shoes'})
    """
    m = _REACT.match(text)
    if not m:
        return "", text, None, {}
    thought = (m.group("thought") or "").strip()
    action = m.group("action").strip()
    c = _CALL.match(action)
    if c:
        arg = c.group("br") if c.group("br") is not None else c.group("par")
        return thought, None, c.group("name"), {"input": arg.strip()}
    return thought, None, "action", {"text": action}


class AgentGymAdapter(Adapter):
    """AgentGym AgentTraj records (JSON array or JSONL of ``{item_id, conversations}``)."""

    name = "agentgym"
    description = "AgentGym AgentTraj: {item_id, conversations[{from: human|gpt, loss, value}]}"
    priority = 40

    def sniff(self, obj: Any) -> bool:
        if isinstance(obj, list) and obj:
            obj = obj[0]
        conv = obj.get("conversations") if isinstance(obj, dict) else None
        return (
            isinstance(conv, list)
            and bool(conv)
            and isinstance(conv[0], dict)
            and "from" in conv[0]
        )

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        conv = obj.get("conversations") if isinstance(obj, dict) else None
        if not isinstance(conv, list) or not conv:
            raise self.fail(
                "expected {item_id, conversations: [...]} with at least one turn",
                path=path,
                line=line,
            )
        turns = []
        for i, t in enumerate(conv):
            if not isinstance(t, dict) or t.get("from") not in (
                "human",
                "gpt",
                "system",
                "user",
                "assistant",
            ):
                raise self.fail(
                    f"conversations[{i}] needs 'from' human or gpt", path=path, line=line
                )
            role = (
                "human"
                if t["from"] in ("human", "user")
                else "system"
                if t["from"] == "system"
                else "gpt"
            )
            turns.append((role, as_str(t.get("value")), t.get("loss")))
        system = None
        if turns[0][0] == "system":
            system = turns.pop(0)[1]
        if (
            len(turns) >= 3
            and turns[0][0] == "human"
            and turns[1][0] == "gpt"
            and turns[1][2] is False
        ):
            system = "\n".join(x for x in (system, turns[0][1]) if x)
            turns = turns[2:]
        if not turns or turns[0][0] != "human":
            raise self.fail(
                "the conversation does not start with a human turn (the task)", path=path, line=line
            )
        instruction = turns[0][1]
        steps = []
        for role, value, loss in turns[1:]:
            if role == "gpt":
                thought, message, tool, params = parse_react(value)
                steps.append(
                    step(
                        len(steps),
                        thought=thought,
                        message=message,
                        action=tool_call(tool, params) if tool else None,
                        metadata={"loss": loss} if isinstance(loss, bool) else None,
                    )
                )
            elif steps and steps[-1].observation is None:
                steps[-1].observation = observation(value)
            elif steps:
                steps[-1].metadata["user_message_after"] = value
        item = as_str(obj.get("item_id")) or "agentgym"
        domain = item.rsplit("_", 1)[0] if "_" in item else "generic"
        reward = obj.get("reward")
        if reward is None and steps and steps[-1].observation is not None:
            found = _SCORE.search(steps[-1].observation.output)  # WebShop's final page
            reward = float(found.group(1)) if found else None
        return trajectory(
            task(item, instruction, domain=domain, suite="agentgym"),
            steps,
            agent=agent_info("agentgym"),
            outcome=outcome(
                score=reward,
                success=obj.get("success") if isinstance(obj.get("success"), bool) else None,
            ),
            metadata={"system_prompt": system} if system else None,
        )


register_adapter(AgentGymAdapter)

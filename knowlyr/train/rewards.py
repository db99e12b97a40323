"""Verifiable reward functions for TRL's ``GRPOTrainer`` (``reward_funcs=``).

:func:`tool_call_reward` scores single-turn completions on exported GRPO prompts without an
environment: is the completion a well-formed ``<tool_call>`` to the expected tool, with the
argument the prompt asks for? It gives a dense, checkable signal where an episode's sparse
success reward is still out of reach of a small policy.

Example:
    >>> reward = tool_call_reward("query_stats", arg="order_id", pattern=r"\\b[A-Z0-9]{5}\\b")
    >>> prompt = [{"role": "user", "content": "Where is order K3Z9Q?"}]
    >>> call = '<tool_call>\\n{"name": "query_stats", "arguments": {"order_id": "K3Z9Q"}}\\n</tool_call>'
    >>> reward([prompt], [[{"role": "assistant", "content": call}]])
    [1.0]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from knowlyr.agents.action_format import INVALID_ACTION_TOOL, parse_action_text
from knowlyr.errors import ConfigError

__all__ = ["completion_action", "tool_call_reward"]


def _text(message: Any) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, list):  # a conversational completion: its messages in order
        return "".join(_text(m) for m in message)
    content = message.get("content") or ""
    if isinstance(content, list):  # multimodal-style parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def completion_action(completion: Any) -> dict[str, Any]:
    """The env action of a completion (plain text or TRL's list of assistant messages).

    Tool calls TRL already parsed out of the text (``message["tool_calls"]``) are used as
    they are; otherwise the text is parsed with
    :func:`~knowlyr.agents.action_format.parse_action_text` (an unparseable completion
    becomes an ``invalid_action``).
    """
    messages = completion if isinstance(completion, list) else [completion]
    for m in messages:
        if isinstance(m, dict) and m.get("tool_calls"):
            fn = m["tool_calls"][0].get("function", m["tool_calls"][0])
            args = fn.get("arguments") or {}
            if isinstance(args, dict) and isinstance(fn.get("name"), str):
                return {"tool": fn["name"], "params": args, "thought": _text(m).strip()}
    return parse_action_text(_text(completion))


def tool_call_reward(
    tool: str,
    *,
    arg: str,
    pattern: str,
    wrong_arg: float = 0.5,
) -> Callable[..., list[float]]:
    """A GRPO reward function: 1 for the right call, ``wrong_arg`` for the right tool, else 0.

    The expected argument value is the first match of ``pattern`` in the prompt's last user
    message (e.g. the order id of "What is the status of order 1B4DU?").

    Args:
        tool: the tool the completion should call (e.g. ``"query_stats"``).
        arg: the argument that must carry the value found in the prompt (e.g. ``"order_id"``).
        pattern: regex finding that value in the prompt (group 1 if it has groups, else the
            whole match).
        wrong_arg: reward of a well-formed call to ``tool`` with a missing or wrong ``arg``.

    Returns:
        ``reward(prompts, completions, **kwargs) -> list[float]`` as TRL calls it; it is
        named ``tool_call_reward`` in TRL's logs (``rewards/tool_call_reward/mean``).

    Example:
        >>> r = tool_call_reward("query_stats", arg="order_id", pattern=r"order (\\w+)")
        >>> r([[{"role": "user", "content": "order AB12C?"}]], ["no tool call"])
        [0.0]
    """
    if not 0.0 <= wrong_arg <= 1.0:
        raise ConfigError(f"wrong_arg must be in [0, 1], got {wrong_arg}")
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"pattern is not a valid regex ({e}): {pattern!r}") from e

    def expected(prompt: Any) -> str | None:
        if isinstance(prompt, list):
            users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
            prompt = users[-1] if users else ""
        m = regex.search(_text(prompt))
        if m is None:
            return None
        return m.group(1) if m.groups() else m.group(0)

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        out = []
        for prompt, completion in zip(prompts, completions, strict=True):
            action = completion_action(completion)
            if action["tool"] == INVALID_ACTION_TOOL or action["tool"] != tool:
                out.append(0.0)
                continue
            value = expected(prompt)
            ok = value is not None and str(action["params"].get(arg)) == value
            out.append(1.0 if ok else float(wrong_arg))
        return out

    reward.__name__ = reward.__qualname__ = "tool_call_reward"
    return reward

"""Actions written as text: a command in a fenced block of the model's reply.

Text-action agents (mini-swe-agent, SWE-agent's and OpenHands' older CodeAct prompts) do not
call tools through an API: the model writes its command inside a fenced block and the agent
extracts it with a regex. A reply with exactly one block is a ``bash {"command"}`` action; a
reply with none, several, or an unclosed fence is a *format error*, which the agent answers
with an error message and the run goes on. Such a turn is kept as a step whose action is
:data:`~knowlyr.trajectory.INVALID_ACTION_TOOL` (``params = {"raw": text, "error": why}``),
so format errors stay countable (``step.tool == "invalid_action"``) instead of vanishing.

Example:
    >>> a = parse_text_action("THOUGHT: look around\\n\\n```bash\\nls -la\\n```")
    >>> a.command, a.thought, a.error
    ('ls -la', 'THOUGHT: look around', None)
    >>> parse_text_action("```bash\\nls\\n```\\n```bash\\npwd\\n```").error
    'found 2 bash blocks, expected exactly one'
    >>> parse_command_output("<returncode>1</returncode>\\n<output>\\nboom\\n</output>")
    (1, 'boom')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from re import Pattern

from knowlyr.recorder.base import tool_call
from knowlyr.trajectory import INVALID_ACTION_TOOL, ToolCall

__all__ = [
    "BASH_BLOCK",
    "TextAction",
    "action_pattern",
    "invalid_action",
    "parse_command_output",
    "parse_text_action",
]

#: mini-swe-agent 1.x's own action regex (``DefaultAgent.parse_action``), used with DOTALL.
BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


@lru_cache(maxsize=32)
def action_pattern(regex: str) -> Pattern[str] | None:
    """A log's own action regex (e.g. mini-swe-agent's ``action_regex`` setting), compiled
    with DOTALL as the agent does; ``None`` when it does not compile or has no group."""
    try:
        p = re.compile(regex, re.DOTALL)
    except (re.error, TypeError, ValueError, RecursionError):
        return None
    return p if p.groups >= 1 else None


@dataclass(frozen=True, slots=True)
class TextAction:
    """What one model reply holds.

    Attributes:
        command: the command of the one block (stripped, as the agent runs it), else ``None``.
        thought: the reply without its block(s), trimmed.
        blocks: how many complete blocks the reply holds.
        error: why the reply is not an action (``None`` when it is one).
    """

    command: str | None
    thought: str
    blocks: int
    error: str | None


def parse_text_action(
    text: str, pattern: Pattern[str] = BASH_BLOCK, *, fence: str | None = "```bash"
) -> TextAction:
    """Split a model reply into its command and its thought, the way the agent parses it:
    exactly one block is an action, anything else a format error.

    Args:
        text: the model's reply.
        pattern: the agent's action regex (one group: the command).
        fence: the block's opening; a reply with no complete block but this opening (cut off
            by the token limit, say) is reported as an unclosed fence, not as "found 0".
    """
    found = list(pattern.finditer(text))
    if len(found) == 1:
        m = found[0]
        return TextAction(
            m.group(1).strip(), (text[: m.start()] + text[m.end() :]).strip(), 1, None
        )
    if found:
        parts, last = [], 0
        for m in found:
            parts.append(text[last : m.start()])
            last = m.end()
        parts.append(text[last:])
        thought = "".join(parts).strip()
        return TextAction(
            None, thought, len(found), f"found {len(found)} bash blocks, expected exactly one"
        )
    opening = text.find(fence) if fence else -1
    if opening >= 0:
        return TextAction(None, text[:opening].strip(), 0, f"unclosed {fence} fence")
    return TextAction(None, text.strip(), 0, "found 0 bash blocks, expected exactly one")


def invalid_action(raw: str, error: str) -> ToolCall:
    """The action of a reply that holds no valid command: tool ``invalid_action`` with the
    reply's text and the reason."""
    return tool_call(INVALID_ACTION_TOOL, {"raw": raw, "error": error})


_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_ELIDED = re.compile(
    r"\n?</output_head>\s*<elided_chars>\s*(\d+)\s*characters elided\s*</elided_chars>\s*"
    r"<output_tail>\n?"
)


def _one_newline(s: str) -> str:
    """Drop the newline the observation template puts after the opening and before the
    closing tag (one each side, no more: the command's own blank lines stay)."""
    if s.startswith("\n"):
        s = s[1:]
    if s.endswith("\n"):
        s = s[:-1]
    return s


def parse_command_output(text: str) -> tuple[int | None, str]:
    """``(exit code, output)`` of an observation written with mini-swe-agent's template
    (``<returncode>N</returncode>`` then ``<output>...</output>``).

    A long output, which mini-swe-agent shows as ``<output_head>``, ``<elided_chars>`` and
    ``<output_tail>`` (after a ``<warning>``), becomes head, a one-line ``[N characters
    elided]`` marker, and tail. Text with neither tag is the output as it is.
    """
    m = _RETURNCODE.search(text)
    code = int(m.group(1)) if m else None
    head = text.find("<output_head>")
    if head >= 0:
        e = _ELIDED.search(text, head)
        end = text.rfind("</output_tail>")
        if e is not None and end >= e.end():
            h = text[head + len("<output_head>") : e.start()]
            t = text[e.end() : end]
            if h.startswith("\n"):
                h = h[1:]
            if t.endswith("\n"):
                t = t[:-1]
            return code, f"{h}\n[{e.group(1)} characters elided]\n{t}"
    start = text.find("<output>")
    end = text.rfind("</output>")
    if start >= 0 and end >= start + len("<output>"):
        return code, _one_newline(text[start + len("<output>") : end])
    if m is not None:
        return code, (text[: m.start()] + text[m.end() :]).strip()
    return None, text

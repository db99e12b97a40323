"""mini-swe-agent trajectories (``<instance_id>.traj.json``).

mini-swe-agent 1.x writes ``"trajectory_format": "mini-swe-agent-1"``::

    {"info": {"exit_status": "Submitted", "submission": "diff --git ...",
              "model_stats": {"instance_cost": 0.089, "api_calls": 17}, "mini_version": "1.15.0",
              "config": {"agent": {...}, "model": {"model_name": "google/gemini-3-pro-preview"}}},
     "messages": [{"role": "system", ...}, {"role": "user", "content": "<pr_description>..."},
                  {"role": "assistant", "content": "THOUGHT: ...\\n\\n```bash\\nls\\n```",
                   "extra": {"response": {..., "usage": {"prompt_tokens", "completion_tokens", "cost"}}}},
                  {"role": "user", "content": "<returncode>0</returncode>\\n<output>\\n...</output>"},
                  ...],
     "trajectory_format": "mini-swe-agent-1", "instance_id": "django__django-16255"}

mini-swe-agent 2.x writes ``"mini-swe-agent-1.1"``: the same ``info``; assistant messages
carry the parsed commands in ``extra.actions`` (``[{"command", "tool_call_id"?}]``), results
come as ``user`` or ``tool`` messages with ``extra.returncode``, a format error is a ``user``
message with ``extra.interrupt_type == "FormatError"`` and the model's text in
``extra.model_response`` (the reply itself is not kept as an assistant message), and the run
ends with a ``role: "exit"`` message holding the submission.

Mapping:

* task: ``instance_id`` (else the file name); the instruction is the text inside
  ``<pr_description>`` of the first user message (without its "Consider the following PR
  description:" line), else that whole message. The system message is not a step (it is kept
  as ``metadata["system_prompt"]``).
* each model turn is exactly one step (2.x: one per action of a turn). Its thought is the reply
  without the fenced command; exactly one ```` ```bash ```` block (mini-swe-agent's own regex,
  ``r"```bash\\s*\\n(.*?)\\n```"`` with DOTALL, or the log's configured ``action_regex``) is
  ``bash {"command"}`` (the agent's one tool, :data:`BASH_TOOL`). A reply with no block, several, or an unclosed fence is a step whose
  action is ``invalid_action {"raw", "error"}``: the agent's format-error reply is its
  observation (``error="format_error"``).
* the next user message is the observation: ``exit_code`` from ``<returncode>``, ``output`` from
  ``<output>``; a long output (``<output_head>`` / ``<elided_chars>`` / ``<output_tail>``) is
  head + ``[N characters elided]`` + tail. A timeout message ("The last command <command>...
  </command> timed out and has been killed") is an observation with ``error="timeout"`` and
  the output it shows. The submit command (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` or
  ``MINI_SWE_AGENT_FINAL_OUTPUT``) gets the final message (the diff) as its output.
* usage per step from ``extra.response.usage`` (``prompt_tokens``, ``completion_tokens``,
  ``cost``, else ``extra.cost``); ``model_stats``, ``mini_version`` and ``trajectory_format``
  go to the trajectory's metadata.
* outcome: ``reason = info.exit_status``; ``terminated`` when it is ``Submitted``, whose
  ``info.submission`` is the outcome's ``submission`` (for any other exit mini-swe-agent writes
  the exception's message there, kept as ``metadata["exit_message"]``); ``truncated`` for the
  limit exits (``LimitsExceeded``: the step or cost limit, ``TimeExceeded``, and a context
  window overflow: ``ContextWindowExceeded``, or litellm's ``ContextWindowExceededError`` in 1.x).
  ``success`` stays ``None``: the log does not know whether the evaluation resolved the task.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from knowlyr.recorder.base import (
    Adapter,
    agent_info,
    as_dict,
    as_int,
    as_str,
    observation,
    outcome,
    register_adapter,
    step,
    task,
    tool_call,
    trajectory,
    usage,
)
from knowlyr.recorder.text_actions import (
    BASH_BLOCK,
    action_pattern,
    invalid_action,
    parse_command_output,
    parse_text_action,
)
from knowlyr.trajectory import Step, Trajectory

__all__ = ["BASH_TOOL", "FORMATS", "LIMIT_EXITS", "MiniSWEAgentAdapter"]

#: mini-swe-agent's one tool: every action is a bash command, run in a new subshell.
BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the task's repository and return its exit code "
        "and output. Every command runs in a new subshell: a directory change or an "
        "environment variable does not persist to the next command.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command to run."}
            },
            "required": ["command"],
        },
    },
}

#: ``trajectory_format`` values mini-swe-agent writes -> its default action regex.
FORMATS: dict[str, str] = {
    "mini-swe-agent-1": BASH_BLOCK.pattern,  # 1.x (run/utils/save.py)
    "mini-swe-agent-1.1": r"```mswea_bash_command\s*\n(.*?)\n```",  # 2.x (DefaultAgent.serialize)
}
#: exit statuses of a run cut off by a limit (mini-swe-agent's exception class names).
LIMIT_EXITS = frozenset(
    {"LimitsExceeded", "TimeExceeded", "ContextWindowExceeded", "ContextWindowExceededError"}
)
_FENCES = {
    FORMATS["mini-swe-agent-1"]: "```bash",
    FORMATS["mini-swe-agent-1.1"]: "```mswea_bash_command",
}
_SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_PR = re.compile(r"<pr_description>\s*(.*?)\s*</pr_description>", re.DOTALL)
_PR_LEAD = "Consider the following PR description:"
_TIMEOUT = re.compile(
    r"\s*The last command <command>.*?</command> timed out and has been killed\.", re.DOTALL
)


def _instruction(text: str) -> str:
    m = _PR.search(text)
    if m is None:
        return text.strip()
    body = m.group(1)
    if body.startswith(_PR_LEAD):
        body = body[len(_PR_LEAD) :]
    return body.strip()


def _usage(extra: dict[str, Any]) -> Any:
    resp = extra.get("response")
    u = resp.get("usage") if isinstance(resp, dict) else None
    u = u if isinstance(u, dict) else {}
    return usage(
        u.get("prompt_tokens", u.get("input_tokens")),
        u.get("completion_tokens", u.get("output_tokens")),
        u["cost"] if u.get("cost") is not None else extra.get("cost"),
    )


def _is_submit(command: str) -> bool:
    return any(m in command for m in _SUBMIT_MARKERS)


def _stem(path: str | None) -> str | None:
    if not path:
        return None
    name = Path(path).name
    for suffix in (".gz", ".json", ".traj"):
        name = name.removesuffix(suffix)
    return name or None


class MiniSWEAgentAdapter(Adapter):
    """A mini-swe-agent trajectory file (``*.traj.json``, formats mini-swe-agent-1 and -1.1)."""

    name = "mini_swe_agent"
    description = 'mini-swe-agent .traj.json: {"trajectory_format": "mini-swe-agent-1"|"-1.1", info{exit_status, submission, model_stats}, messages}'
    extensions = (".json",)
    priority = 8  # its trajectory_format is exact: before the generic chat formats
    agent_tools = (BASH_TOOL,)

    def sniff(self, obj: Any) -> bool:
        return isinstance(obj, dict) and obj.get("trajectory_format") in FORMATS

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict):
            raise self.fail(
                f"expected a JSON object, got {type(obj).__name__}", path=path, line=line
            )
        messages = obj.get("messages")
        if not isinstance(messages, list):
            raise self.fail("no 'messages' list", path=path, line=line)
        info = as_dict(obj.get("info"))
        config = as_dict(info.get("config"))
        model_cfg = as_dict(config.get("model"))
        regex = model_cfg.get("action_regex", as_dict(config.get("agent")).get("action_regex"))
        fmt = as_str(obj.get("trajectory_format"))
        pattern = (action_pattern(regex) if isinstance(regex, str) else None) or action_pattern(
            FORMATS.get(fmt, BASH_BLOCK.pattern)
        )
        fence = _FENCES.get(pattern.pattern)
        status = as_str(info.get("exit_status")) or None

        steps: list[Step] = []
        waiting: list[Step] = []  # steps of the last model turn still without an observation
        instruction: str | None = None
        system: str | None = None
        after: list[str] = []  # messages that answer no step
        last = len(messages) - 1
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise self.fail(
                    f"messages[{i}] is {type(m).__name__}, not an object", path=path, line=line
                )
            role = m.get("role")
            if role is None:
                raise self.fail(f"messages[{i}] has no 'role'", path=path, line=line)
            text = as_str(m.get("content"))
            extra = as_dict(m.get("extra"))
            if role in ("system", "developer"):
                system = text if system is None else system
                continue
            if role == "user" and instruction is None:
                instruction = _instruction(text)
                continue
            if role == "assistant":
                waiting = self._turn(text, extra, pattern, fence, steps)
                continue
            if role == "user" and extra.get("interrupt_type") == "FormatError":
                # 2.x: the unparseable reply is not kept as a message, only in this one
                n = as_int(extra.get("n_actions"))
                why = (
                    f"found {n} bash blocks, expected exactly one"
                    if n is not None
                    else "no valid action"
                )
                raw = as_str(extra.get("model_response"))
                s = step(
                    len(steps),
                    thought=raw.strip(),
                    action=invalid_action(raw, why),
                    observation=observation(text, None, "format_error"),
                    usage=_usage(extra),
                )
                steps.append(s)
                waiting = []
                continue
            if role not in ("user", "tool", "exit"):
                continue
            target = None
            call_id = m.get("tool_call_id")
            if call_id is not None:
                target = next(
                    (s for s in waiting if s.action and s.action.call_id == call_id), None
                )
            if target is None and waiting:
                target = waiting[0]
            if target is None:
                if text.strip() and role != "exit":
                    after.append(text)
                continue
            waiting.remove(target)
            final = role == "exit" or (i == last and status == "Submitted")
            target.observation = self._observation(target, text, extra, final)
        if not steps:
            raise self.fail("no assistant turns in 'messages'", path=path, line=line)
        if after:
            steps[-1].metadata["user_message_after"] = "\n".join(after)

        stats = info.get("model_stats")
        md: dict[str, Any] = {"trajectory_format": fmt}
        if isinstance(stats, dict):
            md["model_stats"] = stats
        if info.get("mini_version") is not None:
            md["mini_version"] = as_str(info["mini_version"])
        if system:
            md["system_prompt"] = system
        submitted = status == "Submitted"
        if not submitted and as_str(info.get("submission")):
            md["exit_message"] = as_str(info["submission"])
        return trajectory(
            task(
                obj.get("instance_id") or _stem(path) or "mini-swe-agent",
                instruction or "",
                domain="coding",
            ),
            steps,
            agent=agent_info(
                "mini-swe-agent", model_cfg.get("model_name"), info.get("mini_version")
            ),
            outcome=outcome(
                reason=status,
                submission=info.get("submission") if submitted else None,
                terminated=submitted,
                truncated=status in LIMIT_EXITS,
            ),
            metadata=md,
        )

    @staticmethod
    def _turn(
        text: str,
        extra: dict[str, Any],
        pattern: re.Pattern[str],
        fence: str | None,
        steps: list[Step],
    ) -> list[Step]:
        """The step(s) of one assistant message, appended to ``steps``; returns them."""
        use = _usage(extra)
        ts = extra.get("timestamp")
        parsed = parse_text_action(text, pattern, fence=fence)
        actions = extra.get("actions")
        made: list[Step] = []
        if isinstance(actions, list) and actions and all(isinstance(a, dict) for a in actions):
            # 2.x: the commands the agent parsed (text or tool calls) are in extra.actions
            thought = parsed.thought if parsed.blocks else text.strip()
            for j, a in enumerate(actions):
                command = as_str(a.get("command"))
                made.append(
                    step(
                        len(steps) + j,
                        thought=thought if j == 0 else "",
                        action=tool_call("bash", {"command": command}, a.get("tool_call_id")),
                        usage=use if j == 0 else None,
                        timestamp=ts if j == 0 else None,
                    )
                )
        elif parsed.error is None:
            made.append(
                step(
                    len(steps),
                    thought=parsed.thought,
                    action=tool_call("bash", {"command": parsed.command}),
                    usage=use,
                    timestamp=ts,
                )
            )
        else:
            made.append(
                step(
                    len(steps),
                    thought=parsed.thought,
                    action=invalid_action(text, parsed.error),
                    usage=use,
                    timestamp=ts,
                )
            )
        steps.extend(made)
        return list(made)

    @staticmethod
    def _observation(s: Step, text: str, extra: dict[str, Any], final: bool) -> Any:
        """What the message after step ``s`` says about it; ``final``: the message that ends
        a submitted run (2.x's exit message, or 1.x's last message)."""
        command = s.action.params.get("command") if s.action is not None else None
        if s.action is not None and s.action.tool != "bash":  # the format-error reply
            return observation(text, None, "format_error")
        if final and isinstance(command, str) and _is_submit(command):
            return observation(text)  # the submitted diff, not command output
        code = extra.get("returncode")
        if _TIMEOUT.match(text) or extra.get("exception_type") == "TimeoutExpired":
            _, out = parse_command_output(text)
            return observation(out, code if isinstance(code, int) else None, "timeout")
        parsed_code, out = parse_command_output(text)
        if isinstance(code, int) and not isinstance(code, bool):
            parsed_code = code
        err = extra.get("exception_info")
        return observation(out, parsed_code, as_str(err) if err else None)


register_adapter(MiniSWEAgentAdapter)

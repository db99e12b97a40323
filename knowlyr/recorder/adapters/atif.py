"""ATIF, the Agent Trajectory Interchange Format (v1.x).

::

    {"schema_version": "ATIF-v1.4", "session_id": "...", "agent": {"name", "version", "model_name"},
     "steps": [{"step_id": 1, "timestamp": "...", "source": "user"|"agent"|"system", "message": "...",
                "reasoning_content": "...", "tool_calls": [{"tool_call_id", "function_name", "arguments"}],
                "observation": {"results": [{"source_call_id", "content"}]},
                "metrics": {"prompt_tokens", "completion_tokens", "cost_usd",
                            "prompt_token_ids", "completion_token_ids", "logprobs"}}],
     "final_metrics": {"total_prompt_tokens", "total_completion_tokens", "total_cost_usd", "total_steps"}}

Each agent tool call is a step (reasoning as the thought, the call's result as its
observation); an agent step without calls is a message step. Token ids and logprobs are kept
(on the step of the first call). The first user step is the instruction; system steps
become ``metadata["system_prompt"]``.
"""

from __future__ import annotations

import hashlib
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
    usage,
)
from knowlyr.trajectory import Trajectory

__all__ = ["ATIFAdapter"]


class ATIFAdapter(Adapter):
    """ATIF v1.x trajectories (one JSON document, or one per JSONL line)."""

    name = "atif"
    description = "ATIF v1.x: schema_version, session_id, agent, steps[{source, message, tool_calls, observation, metrics}], final_metrics"
    priority = 15

    def sniff(self, obj: Any) -> bool:
        if not isinstance(obj, dict) or not isinstance(obj.get("steps"), list):
            return False
        sv = obj.get("schema_version")
        if isinstance(sv, str) and sv.upper().startswith("ATIF"):
            return True
        s = obj["steps"]
        return (
            "session_id" in obj
            and bool(s)
            and isinstance(s[0], dict)
            and "step_id" in s[0]
            and "source" in s[0]
        )

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict) or not isinstance(obj.get("steps"), list):
            raise self.fail("expected an object with a 'steps' list", path=path, line=line)
        steps = []
        by_call: dict[str, Any] = {}
        instruction = None
        system = []
        for i, s in enumerate(obj["steps"]):
            if not isinstance(s, dict):
                raise self.fail(
                    f"steps[{i}] is {type(s).__name__}, not an object", path=path, line=line
                )
            src = s.get("source")
            text = as_str(s.get("message"))
            if src == "system":
                system.append(text)
                continue
            if src == "user":
                if instruction is None:
                    instruction = text
                elif steps and steps[-1].action is None and steps[-1].observation is None:
                    steps[-1].observation = observation(text)
                elif steps:
                    steps[-1].metadata["user_message_after"] = text
                continue
            if src != "agent":
                raise self.fail(
                    f"steps[{i}].source is {src!r}; expected user, agent or system",
                    path=path,
                    line=line,
                )
            m = s.get("metrics") if isinstance(s.get("metrics"), dict) else {}
            kw = {
                "usage": usage(
                    m.get("prompt_tokens"), m.get("completion_tokens"), m.get("cost_usd")
                ),
                "token_ids": m.get("completion_token_ids"),
                "logprobs": m.get("logprobs"),
                "timestamp": s.get("timestamp"),
            }
            md = {"step_id": s.get("step_id")}
            if m.get("prompt_token_ids"):
                md["prompt_token_ids"] = m["prompt_token_ids"]
            calls = s.get("tool_calls")
            thought = as_str(s.get("reasoning_content"))
            if not isinstance(calls, list) or not calls:
                steps.append(step(len(steps), thought=thought, message=text, metadata=md, **kw))
            else:
                for j, c in enumerate(calls):
                    if not isinstance(c, dict) or not c.get("function_name"):
                        raise self.fail(
                            f"steps[{i}].tool_calls[{j}] has no function_name", path=path, line=line
                        )
                    args = c.get("arguments")
                    st = step(
                        len(steps),
                        thought="\n".join(x for x in (thought, text) if x) if j == 0 else "",
                        action=tool_call(
                            c["function_name"],
                            args if isinstance(args, dict) else ({} if args is None else args),
                            c.get("tool_call_id"),
                        ),
                        metadata=md if j == 0 else {"step_id": s.get("step_id")},
                        **(kw if j == 0 else {"timestamp": s.get("timestamp")}),
                    )
                    steps.append(st)
                    if c.get("tool_call_id"):
                        by_call[as_str(c["tool_call_id"])] = st
            obs = s.get("observation")
            results = obs.get("results") if isinstance(obs, dict) else None
            for r in results if isinstance(results, list) else ():
                if not isinstance(r, dict):
                    continue
                target = (
                    by_call.get(as_str(r.get("source_call_id")))
                    if r.get("source_call_id")
                    else None
                )
                if target is None:
                    target = next((x for x in reversed(steps) if x.observation is None), None)
                if target is not None:
                    target.observation = observation(r.get("content"))
        agent = obj.get("agent") if isinstance(obj.get("agent"), dict) else {}
        fm = obj.get("final_metrics") if isinstance(obj.get("final_metrics"), dict) else {}
        md2: dict[str, Any] = {"schema_version": as_str(obj.get("schema_version"))}
        if fm:
            md2["final_metrics"] = fm
        if system:
            md2["system_prompt"] = "\n".join(system)
        if obj.get("notes"):
            md2["notes"] = obj["notes"]
        instr = instruction or ""
        tid = (
            obj.get("task_id")
            or obj.get("session_id")
            or hashlib.sha256(instr.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        )
        return trajectory(
            task(tid, instr),
            steps,
            agent=agent_info(
                agent.get("name", "unknown"), agent.get("model_name"), agent.get("version")
            ),
            outcome=outcome(),
            metadata=md2,
        )


register_adapter(ATIFAdapter)

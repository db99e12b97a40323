"""knowlyr's own formats.

* ``knowlyr``: the :class:`~knowlyr.trajectory.Trajectory` JSON that ``knowlyr record convert -o``
  writes (one per JSONL line, or a JSON document / array). Converting it again gives the same
  trajectory (same content hash); the source it was converted from is kept in
  ``metadata["origin"]``.
* ``knowlyr_legacy``: the original knowlyr-agent recorder schema::

    {"task": {"task_id", "description", "domain"}, "agent": "browser-agent", "model": "...",
     "steps": [{"step_id", "thought", "tool_call": {"name", "parameters"},
                "tool_result": {"output", "exit_code"}, "timestamp"}],
     "outcome": {"success", "score", "tests_passed", "tests_failed", "total_steps", "total_tokens"},
     "metadata": {...}}
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

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

__all__ = ["KnowlyrAdapter", "KnowlyrLegacyAdapter"]


class KnowlyrAdapter(Adapter):
    """Our own Trajectory JSON (what ``record convert -o`` writes), validated in full."""

    name = "knowlyr"
    description = "knowlyr Trajectory JSON/JSONL (what `knowlyr record convert -o` writes)"
    priority = 5

    def sniff(self, obj: Any) -> bool:
        if isinstance(obj, list) and obj:
            obj = obj[0]
        return (
            isinstance(obj, dict)
            and "schema_version" in obj
            and isinstance(obj.get("task"), dict)
            and "task_id" in obj["task"]
            and isinstance(obj.get("steps"), list)
        )

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict):
            raise self.fail(
                f"expected a Trajectory object, got {type(obj).__name__}", path=path, line=line
            )
        try:
            t = Trajectory.model_validate(obj)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise self.fail(
                f"not a valid Trajectory: {where}: {first['msg']} ({e.error_count()} error(s); see `knowlyr schema`)",
                path=path,
                line=line,
            ) from None
        stated = t.id
        t.rehash()
        if stated and stated != t.id:
            t.metadata["stated_id"] = stated  # edited after it was written: the hash is recomputed
        if t.source is not None and (t.source.path or t.source.format != "knowlyr"):
            t.metadata["origin"] = t.source.model_dump(exclude_none=True)
        return t


class KnowlyrLegacyAdapter(Adapter):
    """The original knowlyr-agent recorder schema (``examples/browser_trajectory.json``)."""

    name = "knowlyr_legacy"
    description = "original knowlyr-agent schema: task, agent, model, steps[{tool_call, tool_result}], outcome"
    priority = 12

    def sniff(self, obj: Any) -> bool:
        if isinstance(obj, list) and obj:
            obj = obj[0]
        if (
            not isinstance(obj, dict)
            or "schema_version" in obj
            or not isinstance(obj.get("steps"), list)
        ):
            return False
        s = obj["steps"]
        return isinstance(obj.get("task"), dict | str) and (
            not s or (isinstance(s[0], dict) and ("tool_call" in s[0] or "tool_result" in s[0]))
        )

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def convert(self, obj: Any, *, path: str | None = None, line: int | None = None) -> Trajectory:
        if not isinstance(obj, dict) or not isinstance(obj.get("steps"), list):
            raise self.fail(
                "expected an object with 'task' and a 'steps' list", path=path, line=line
            )
        t = obj.get("task")
        t = t if isinstance(t, dict) else {"task_id": as_str(t), "description": as_str(t)}
        if not t.get("task_id"):
            raise self.fail("task has no 'task_id'", path=path, line=line)
        steps = []
        for i, s in enumerate(obj["steps"]):
            if not isinstance(s, dict):
                raise self.fail(
                    f"steps[{i}] is {type(s).__name__}, not an object", path=path, line=line
                )
            call = s.get("tool_call") if isinstance(s.get("tool_call"), dict) else None
            res = s.get("tool_result") if isinstance(s.get("tool_result"), dict) else None
            if call is not None and not call.get("name"):
                raise self.fail(f"steps[{i}].tool_call has no 'name'", path=path, line=line)
            md = {k: s[k] for k in ("step_id", "token_count") if k in s}
            steps.append(
                step(
                    len(steps),
                    thought=s.get("thought", ""),
                    action=tool_call(call["name"], call.get("parameters", call.get("params")))
                    if call
                    else None,
                    observation=observation(
                        res.get("output"), res.get("exit_code"), res.get("error")
                    )
                    if res
                    else None,
                    reward=s.get("reward"),
                    timestamp=s.get("timestamp"),
                    metadata=md,
                )
            )
        o = obj.get("outcome") if isinstance(obj.get("outcome"), dict) else {}
        md = dict(obj["metadata"]) if isinstance(obj.get("metadata"), dict) else {}
        for k in ("total_steps", "total_tokens"):
            if k in o:
                md[k] = o[k]
        agent = obj.get("agent")
        return trajectory(
            task(
                t["task_id"],
                t.get("description", t.get("instruction", "")),
                domain=as_str(t.get("domain")) or "generic",
            ),
            steps,
            agent=agent_info(agent if isinstance(agent, str) else "unknown", obj.get("model")),
            outcome=outcome(
                success=o.get("success"),
                score=o.get("score"),
                terminated=any(
                    s.action is not None and s.action.tool in ("submit", "finish") for s in steps
                ),
                tests_passed=o.get("tests_passed"),
                tests_failed=o.get("tests_failed"),
            ),
            metadata=md,
        )


register_adapter(KnowlyrAdapter)
register_adapter(KnowlyrLegacyAdapter)

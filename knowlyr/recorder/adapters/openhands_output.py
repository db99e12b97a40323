"""OpenHands resolver / evaluation ``output.jsonl`` rows: an event ``history`` plus results.

::

    {"instance_id": ..., "instruction": ..., "history": [events...], "metrics": {...},
     "test_result": {"git_patch", "report": {"resolved", "tests_status"}}, "error": ...,
     "metadata": {"agent_class", "llm_config": {"model"}, "max_iterations", "dataset"}}

The history is converted as an event list (:func:`~knowlyr.recorder.adapters.openhands.
convert_events`); the row adds the task id, the SWE-bench verdict and test counts, the patch,
costs, the model and why the run ended.
"""

from __future__ import annotations

from typing import Any

from knowlyr.recorder.adapters.openhands import (
    _EventsAdapter,
    _finish_outcome,
    _instruction_id,
    _is_event_list,
    convert_events,
)
from knowlyr.recorder.base import (
    agent_info,
    as_float,
    as_list,
    as_str,
    register_adapter,
    task,
)

__all__ = ["OpenHandsOutputAdapter"]


def _tests(test_result: dict[str, Any], row: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(resolved, passed, failed) from an evaluation row's ``test_result`` / ``report``."""
    report = (
        test_result.get("report")
        if isinstance(test_result.get("report"), dict)
        else row.get("report")
    )
    report = report if isinstance(report, dict) else {}
    resolved = row.get("resolved", report.get("resolved", test_result.get("resolved")))
    passed = failed = None
    status = report.get("tests_status")
    if isinstance(status, dict):
        passed = failed = 0
        for group in status.values():
            if isinstance(group, dict):
                passed += len(as_list(group.get("success")))
                failed += len(as_list(group.get("failure")))
    return (resolved if isinstance(resolved, bool) else None), passed, failed


class OpenHandsOutputAdapter(_EventsAdapter):
    """One row of an OpenHands resolver or evaluation ``output.jsonl`` (``history`` + results)."""

    name = "openhands_output"
    description = "OpenHands resolver/evaluation output.jsonl rows: instance_id/issue, instruction, history, metrics, test_result, error"
    extensions = (".jsonl", ".json")
    priority = 20

    def sniff(self, obj: Any) -> bool:
        if isinstance(obj, list) and obj:  # rows saved as one JSON array
            obj = obj[0]
        if not isinstance(obj, dict) or not isinstance(obj.get("history"), list):
            return False
        if "trajectory" in obj or ("info" in obj and "environment" in obj):
            return False  # SWE-agent
        h = obj["history"]
        return (
            not h and any(k in obj for k in ("instance_id", "test_result", "git_patch"))
        ) or _is_event_list(h)

    def split(self, doc: Any) -> list[Any]:
        return doc if isinstance(doc, list) else [doc]

    def _parts(self, obj: Any, path: str | None, line: int | None) -> tuple[Any, list, dict]:
        if not isinstance(obj, dict):
            raise self.fail(
                f"expected a JSON object per row, got {type(obj).__name__}", path=path, line=line
            )
        history = obj.get("history")
        if not isinstance(history, list):
            raise self.fail("row has no 'history' list of events", path=path, line=line)
        metrics = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else {}
        costs = metrics.get("costs")
        if isinstance(costs, list):
            costs = [c.get("cost") if isinstance(c, dict) else c for c in costs]
        instruction = obj.get("instruction")
        steps, info = convert_events(
            history,
            instruction=as_str(instruction) if instruction else None,
            costs=costs if isinstance(costs, list) else None,
        )
        instr = info["instruction"] or ""
        test_result = obj.get("test_result") if isinstance(obj.get("test_result"), dict) else {}
        resolved, passed, failed = _tests(test_result, obj)
        success = obj.get("success") if isinstance(obj.get("success"), bool) else resolved
        if success is None and isinstance(test_result.get("success"), bool):
            success = test_result["success"]  # the field the original knowlyr recorder read
        if passed is None and failed is None:
            passed, failed = test_result.get("tests_passed"), test_result.get("tests_failed")
        issue = obj.get("issue") if isinstance(obj.get("issue"), dict) else {}
        instance = obj.get("instance") if isinstance(obj.get("instance"), dict) else {}
        task_id = (
            obj.get("instance_id")
            or instance.get("instance_id")
            or info.get("task_id")
            or info.get("instance_id")
        )
        if not task_id and issue.get("repo"):
            task_id = f"{as_str(issue.get('owner'))}/{as_str(issue['repo'])}#{as_str(issue.get('number'))}"
        error = obj.get("error")
        md: dict[str, Any] = {}
        patch = test_result.get("git_patch", obj.get("git_patch"))
        if patch:
            md["git_patch"] = as_str(patch)
        for k in ("result_explanation", "comment_success", "issue_type", "base_commit"):
            if obj.get(k) not in (None, ""):
                md[k] = obj[k]
        if "accumulated_cost" in metrics:
            md["cost_usd"] = as_float(metrics["accumulated_cost"])
        if info.get("system_prompt"):
            md["system_prompt"] = info["system_prompt"]
        if info.get("tools"):
            md["tools"] = info["tools"]
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        llm = meta.get("llm_config") if isinstance(meta.get("llm_config"), dict) else {}
        cls = meta.get("agent_class") or info.get("agent_class")
        tmeta = {k: issue[k] for k in ("owner", "repo", "number", "title") if k in issue}
        if instance.get("repo"):
            tmeta["repo"] = instance["repo"]
        if instance.get("base_commit"):
            tmeta["base_commit"] = instance["base_commit"]
        return (
            task(
                task_id or _instruction_id(instr),
                instr,
                domain="coding",
                suite=meta.get("dataset") if meta else None,
                metadata=tmeta,
            ),
            steps,
            {
                "agent": agent_info(
                    f"openhands/{as_str(cls)}" if cls else "openhands",
                    llm.get("model") or info.get("model") or info.get("declared_model"),
                ),
                "outcome": _finish_outcome(
                    info,
                    success=success,
                    resolved=resolved,
                    tests_passed=passed,
                    tests_failed=failed,
                    reason=as_str(error) if error else None,
                ),
                "metadata": md,
            },
        )


register_adapter(OpenHandsOutputAdapter)

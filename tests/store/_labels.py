"""Writers of small evaluation results files and agent logs for the label tests.

The shapes follow the SWE-bench harness: ``report.json`` as ``grading.get_eval_report``
writes it under ``logs/run_evaluation/<run_id>/<model>/<instance_id>/``, and the run summary
as ``reporting.make_run_report`` writes it (``<model>.<run_id>.json``).
"""

from __future__ import annotations

import json
from pathlib import Path


def report(resolved: bool, *, f2p=(1, 0), p2p=(2, 0), applied: bool = True) -> dict:
    """One instance's entry of a report.json; ``f2p`` / ``p2p`` are (passed, failed) counts."""
    entry: dict = {
        "patch_is_None": False,
        "patch_exists": True,
        "patch_successfully_applied": applied,
        "resolved": resolved,
    }
    if applied:

        def cat(ok: int, bad: int, name: str) -> dict:
            return {
                "success": [f"tests/test_{name}.py::ok_{i}" for i in range(ok)],
                "failure": [f"tests/test_{name}.py::bad_{i}" for i in range(bad)],
            }

        entry["tests_status"] = {
            "FAIL_TO_PASS": cat(*f2p, "f2p"),
            "PASS_TO_PASS": cat(*p2p, "p2p"),
            "FAIL_TO_FAIL": cat(0, 0, "f2f"),
            "PASS_TO_FAIL": cat(0, 0, "p2f"),
        }
    return entry


def write_report_tree(root: Path, reports: dict[str, dict], *, run_id: str = "run1") -> Path:
    """``root/logs/run_evaluation/<run_id>/<model>/<instance_id>/report.json`` per instance;
    returns the run's folder."""
    run = root / "logs" / "run_evaluation" / run_id
    for iid, entry in reports.items():
        d = run / "openai__gpt-4o" / iid
        d.mkdir(parents=True, exist_ok=True)
        (d / "report.json").write_text(json.dumps({iid: entry}, indent=4))
    return run


def write_summary(path: Path, **ids: list[str]) -> Path:
    """A run summary as the harness writes it (lists not given are empty)."""
    keys = ("resolved_ids", "unresolved_ids", "error_ids", "empty_patch_ids", "incomplete_ids")
    lists = {k: sorted(ids.get(k, [])) for k in keys}
    done = lists["resolved_ids"] + lists["unresolved_ids"]
    doc = {
        "total_instances": sum(len(v) for v in lists.values()),
        "submitted_instances": len(done) + len(lists["error_ids"]) + len(lists["empty_patch_ids"]),
        "completed_instances": len(done),
        "resolved_instances": len(lists["resolved_ids"]),
        "unresolved_instances": len(lists["unresolved_ids"]),
        "empty_patch_instances": len(lists["empty_patch_ids"]),
        "error_instances": len(lists["error_ids"]),
        "completed_ids": sorted(done),
        "submitted_ids": sorted(done + lists["error_ids"] + lists["empty_patch_ids"]),
        **lists,
        "schema_version": 2,
    }
    path.write_text(json.dumps(doc, indent=4))
    return path


def chat_log(instance_id: str, run: str, *, resolved: bool | None = None) -> dict:
    """One OpenAI-chat log record (SWE-Gym style); ``run`` makes its content distinct."""
    obj: dict = {
        "instance_id": instance_id,
        "run_id": run,
        "messages": [
            {"role": "user", "content": f"Fix the issue in {instance_id}"},
            {
                "role": "assistant",
                "content": "Look at the file first.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"cat src/{run}.py"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": f"x = '{run}'"},
            {"role": "assistant", "content": "Done."},
        ],
    }
    if resolved is not None:
        obj["resolved"] = resolved
    return obj


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path

"""What a client reads off the tools: every result matches its tool's outputSchema (checked
with jsonschema on real calls), the inputSchemas say which arguments each tool needs, results
are compact JSON with ISO 8601 timestamps, bad arguments come back as one line with the fix,
and pipeline_status tells what each run did."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.mcp.conftest import Session

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
SWE = "logs/swe_agent"
ONE_LOG = "logs/swe_agent/swe-agent__test-repo-i1.traj"


def list_tools(session: Session) -> dict[str, Any]:
    return {t.name: t for t in session.portal.call(session.client.list_tools).tools}


def checked(session: Session, schemas: dict[str, dict], name: str, args: dict) -> dict:
    """Call ``name``; its structured result must validate against its outputSchema and its
    text must be the same data as compact JSON."""
    r = session.call(name, args)
    text = r.content[0].text  # type: ignore[union-attr]
    assert not r.is_error, f"{name} failed: {text}"
    errors = list(Draft202012Validator(schemas[name]).iter_errors(r.structured_content))
    assert not errors, f"{name}: {[e.message for e in errors[:3]]}"
    assert json.loads(text) == r.structured_content
    assert "\n" not in text and not re.match(r"^\{\s", text), f"{name}: indented JSON"
    return r.structured_content  # type: ignore[return-value]


def wait_final(session: Session, flow_run_id: str, store: str) -> dict:
    deadline = time.monotonic() + 120
    while True:
        status = session.ok("pipeline_status", {"flow_run_id": flow_run_id, "store": store})
        if status["flow_run"]["final"] or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def test_every_output_schema_describes_the_real_results(session: Session, root: Path):
    tools = list_tools(session)
    schemas = {name: t.output_schema for name, t in tools.items()}
    for name, schema in schemas.items():  # a model's fields, not a generic object
        assert schema and schema["type"] == "object" and schema["properties"], name
        assert schema.get("additionalProperties") is False, name
    seen: set[str] = set()

    def call(name: str, args: dict) -> dict:
        seen.add(name)
        return checked(session, schemas, name, args)

    t = session.transport
    sb = call("create_sandbox", {"files": {"a.txt": "one\n"}})
    call("execute_tool", {"sandbox_id": sb["id"], "tool": "bash", "params": {"command": "exit 3"}})
    ran = call("execute_tool", {"sandbox_id": sb["id"], "tool": "bash",
                                "params": {"command": "cat a.txt"}})  # fmt: skip
    snap = call("sandbox_snapshot", {"sandbox_id": sb["id"]})["snapshot_id"]
    call("reset_sandbox", {"sandbox_id": sb["id"], "snapshot_id": snap})
    traj = {"task": {"task_id": "t"}, "steps": [{"index": 0,
            "action": {"tool": "bash", "params": {"command": "cat a.txt"}},
            "observation": {"output": ran["output"] + "x", "exit_code": 0}}]}  # fmt: skip
    assert call("replay_trajectory", {"sandbox_id": sb["id"], "trajectory": traj})["differing"] == 1

    conv = call("convert_logs", {"paths": [SWE], "output": f"schemas/{t}/trajs.jsonl"})
    call("validate_logs", {"paths": [SWE, "logs/openhands"]})
    call("get_schema", {})
    call("get_schema", {"include_formats": False})
    call("recorder_diff", {"a": ONE_LOG, "b": "logs/swe_agent/pydicom__pydicom-1458.traj"})

    call("list_rubrics", {"domain": "coding"})
    rewards = f"schemas/{t}/rewards.json"
    scored = call("score_trajectory", {"paths": [conv["output"]], "domain": "coding",
                                       "output": rewards})  # fmt: skip
    call("build_preferences", {"rewards": rewards, "min_margin": 0.0})
    call("reward_leaderboard", {"rewards": rewards, "by": ["agent", "model"]})
    ann = root / f"schemas/{t}/human.csv"
    with ann.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trajectory_id", "step_index", "score", "annotator"])
        for rw, human in zip(scored["rewards"], (0.9, 0.2, 0.5), strict=True):
            w.writerow([rw["trajectory_id"], "", human, "alice"])
    call("calibrate_reward", {"rewards": rewards, "annotations": str(ann), "n_boot": 20})

    store = f"stores/schemas-{t}"
    call("process_log", {"path": ONE_LOG, "store": store, "score": False})
    call("process_logs_batch", {"paths": [SWE], "store": store})
    call("export_dataset", {"kind": "grpo", "store": store, "output": f"schemas/{t}/grpo"})
    run = call("run_pipeline", {"pipeline": "ingest", "logs": ["logs/openhands"], "store": store})
    status = wait_final(session, run["flow_run_id"], store)
    assert status["flow_run"]["state"] == "COMPLETED", status
    call("pipeline_status", {"flow_run_id": run["flow_run_id"], "store": store})
    call("pipeline_status", {"store": store})
    assert seen == set(tools), f"not called: {set(tools) - seen}"


def test_results_are_compact_with_iso_timestamps(session: Session):
    r = session.call("create_sandbox", {})
    text = r.content[0].text  # type: ignore[union-attr]
    data = json.loads(text)
    assert text == json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    assert ISO_UTC.match(data["created_at"]) and ISO_UTC.match(data["last_used"]), data
    schema = list_tools(session)["create_sandbox"].output_schema
    assert schema["properties"]["created_at"]["format"] == "date-time"


def test_input_schemas_say_what_each_tool_needs(session: Session, root: Path):
    tools = list_tools(session)
    for name, tool in tools.items():  # the Anthropic API refuses these at the top level
        assert not {"anyOf", "oneOf", "allOf"} & set(tool.input_schema), name

    def valid(name: str, args: dict) -> bool:
        return Draft202012Validator(tools[name].input_schema).is_valid(args)

    # score_trajectory: `paths` when there is no `trajectory`
    assert not valid("score_trajectory", {})
    assert not valid("score_trajectory", {"paths": []})
    assert valid("score_trajectory", {"paths": [SWE]})
    assert valid("score_trajectory", {"trajectory": "{}"})
    # replay_trajectory: exactly one of `trajectory` / `path`
    assert not valid("replay_trajectory", {"sandbox_id": "sb-1"})
    assert not valid("replay_trajectory", {"sandbox_id": "sb-1", "trajectory": "{}", "path": "x"})
    assert valid("replay_trajectory", {"sandbox_id": "sb-1", "path": "x"})
    # run_pipeline: ingest (the default) needs `logs`; the others refuse them
    assert not valid("run_pipeline", {})
    assert valid("run_pipeline", {"logs": [SWE]})
    assert valid("run_pipeline", {"pipeline": "reward"})
    assert not valid("run_pipeline", {"pipeline": "export", "logs": [SWE]})
    assert not valid("run_pipeline", {"logs": [SWE], "parameters": {"store_url": "x"}})
    # export_dataset and pipeline_status need nothing the server's store does not give
    assert tools["export_dataset"].input_schema["required"] == ["output"]
    assert "required" not in tools["pipeline_status"].input_schema

    t = session.transport
    store = root / ".knowlyr" / "store"  # the default store, under the first root
    session.ok("process_logs_batch", {"paths": [SWE], "score": False})
    assert store.is_dir()
    out = session.ok("export_dataset", {"kind": "sft", "include_failed": True,
                                        "output": f"defaults/{t}/sft"})  # fmt: skip
    assert out["store"] == str(store.resolve()) and out["trajectories"] >= 3 and out["rows"] >= 1
    status = session.ok("pipeline_status", {})
    assert status["flow_run"] is None and status["store"] == str(store.resolve())
    assert status["runs"] and status["runs"][0]["stage"] == "ingest"


@pytest.mark.parametrize(
    ("tool", "args", "wanted"),
    [
        ("execute_tool", {"sandbox_id": "sb-1", "tool": "rm -rf"},
         "`tool` must be one of 'bash', 'read_file'"),
        ("export_dataset", {"kind": "csv", "output": "x"}, "`kind` must be one of 'sft', 'dpo' or 'grpo', got 'csv'"),
        ("reward_leaderboard", {"rewards": "r.json", "by": ["team"]},
         "`by.0` must be one of 'agent' or 'model', got 'team'"),
        ("calibrate_reward", {"rewards": "r", "annotations": "a", "n_boot": 3},
         "`n_boot`: input should be greater than or equal to 10, got 3"),
        ("convert_logs", {"paths": [SWE]}, "`output` is required (Trajectory JSONL file to write"),
        ("replay_trajectory", {"sandbox_id": "sb-1"}, "give exactly one of `trajectory`"),
        ("convert_logs", {"path": SWE, "output": "x.jsonl"},
         "`path` is not an argument of this tool (did you mean `paths`? it takes paths, output"),
        ("run_pipeline", {"logs": [SWE], "parameters": {"reward": {"layers": 5}}},
         "parameters of the ingest pipeline"),
    ],
    ids=lambda x: x if isinstance(x, str) and " " not in x else "",
)  # fmt: skip
def test_bad_arguments_are_one_line_with_the_fix(session: Session, tool: str, args: dict,
                                                 wanted: str):  # fmt: skip
    msg = session.error(tool, args)
    assert wanted in msg, msg
    assert "\n" not in msg and "pydantic.dev" not in msg and "For further information" not in msg
    assert "validation error for" not in msg and "type=" not in msg, msg


def test_pipeline_status_tells_what_each_run_did(session: Session, root: Path):
    t = session.transport
    store = f"stores/status-{t}"
    run = session.ok("run_pipeline", {"logs": ["logs/openhands"], "store": store})
    assert run["store"] == str((root / store).resolve())
    status = wait_final(session, run["flow_run_id"], store)
    flow_run = status["flow_run"]
    assert flow_run["state"] == "COMPLETED" and flow_run["error"] is None, flow_run
    assert ISO_UTC.match(flow_run["start_time"]) and ISO_UTC.match(flow_run["end_time"])
    runs = status["runs"]
    ingest = [r for r in runs if r["stage"] == "ingest"]
    assert len(ingest) == 1 and ingest[0]["status"] == "completed", runs
    assert ingest[0]["tables"]["trajectories"]["rows"] == 4  # the four OpenHands runs
    assert ingest[0]["tables"]["trajectories"]["added"] == 4
    assert ISO_UTC.match(ingest[0]["started_at"]) and ingest[0]["seconds"] >= 0
    assert ingest[0]["params"]["paths"] and ingest[0]["error"] is None
    assert runs == sorted(runs, key=lambda r: r["started_at"], reverse=True)
    lone = session.ok("pipeline_status", {"store": store, "limit": 1})
    assert lone["flow_run"] is None and len(lone["runs"]) == 1

    # a run that fails says why
    failed = session.ok("run_pipeline", {"pipeline": "export", "store": f"stores/empty-{t}"})
    status = wait_final(session, failed["flow_run_id"], f"stores/empty-{t}")
    assert status["flow_run"]["state"] == "FAILED", status
    assert status["flow_run"]["error"], status
    assert status["runs"] == []

"""Every MCP tool through the SDK's own client, over stdio and over streamable HTTP (one real
server process per transport, see conftest), on the real agent logs of tests/data/fixtures."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import orjson

from knowlyr.store import Store
from knowlyr.trajectory import Trajectory
from tests.mcp.conftest import Session

TOOLS = {
    "create_sandbox", "execute_tool", "reset_sandbox", "replay_trajectory", "sandbox_snapshot",
    "convert_logs", "validate_logs", "get_schema", "recorder_diff",
    "score_trajectory", "build_preferences", "calibrate_reward", "list_rubrics", "reward_leaderboard",
    "run_pipeline", "export_dataset", "process_log", "process_logs_batch", "pipeline_status",
}  # fmt: skip


def test_lists_the_19_tools_with_their_input_schemas(session: Session):
    tools = {t.name: t for t in session.portal.call(session.client.list_tools).tools}
    assert set(tools) == TOOLS
    schema = tools["execute_tool"].input_schema
    assert schema["required"] == ["sandbox_id", "tool"]
    assert "bash" in schema["properties"]["tool"]["enum"]
    assert tools["get_schema"].annotations.read_only_hint is True


def test_sandbox_tools(session: Session, root: Path):
    sb = session.ok("create_sandbox", {"files": {"app.py": "print(6 * 7)\n"}})
    sid = sb["id"]
    run = session.ok(
        "execute_tool", {"sandbox_id": sid, "tool": "bash", "params": {"command": "python3 app.py"}}
    )
    assert (run["output"], run["exit_code"]) == ("42\n", 0)
    failed = session.ok(
        "execute_tool", {"sandbox_id": sid, "tool": "bash", "params": {"command": "exit 3"}}
    )
    assert failed["exit_code"] == 3  # a failing command is a result, not a tool error
    session.ok("execute_tool", {"sandbox_id": sid, "tool": "write_file",
                                "params": {"path": "notes.txt", "content": "v1\n"}})  # fmt: skip
    snap = session.ok("sandbox_snapshot", {"sandbox_id": sid})["snapshot_id"]
    session.ok("execute_tool", {"sandbox_id": sid, "tool": "edit_file",
                                "params": {"path": "notes.txt", "old_str": "v1", "new_str": "v2"}})  # fmt: skip

    def ls() -> str:
        return session.ok("execute_tool", {"sandbox_id": sid, "tool": "bash",
                                           "params": {"command": "ls; cat notes.txt 2>/dev/null"}})["output"]  # fmt: skip

    assert ls() == "app.py\nnotes.txt\nv2\n"
    assert session.ok("reset_sandbox", {"sandbox_id": sid, "snapshot_id": snap})["restored"] == snap
    assert ls() == "app.py\nnotes.txt\nv1\n"
    session.ok("reset_sandbox", {"sandbox_id": sid})  # the creation snapshot
    assert ls() == "app.py\n"

    # replay: a trajectory recorded from this sandbox, with step 2's observation altered
    steps = []
    for i, cmd in enumerate(["echo one > f.txt", "cat f.txt", "wc -c < f.txt"]):
        out = session.ok(
            "execute_tool", {"sandbox_id": sid, "tool": "bash", "params": {"command": cmd}}
        )
        steps.append({"index": i, "action": {"tool": "bash", "params": {"command": cmd}},
                      "observation": {"output": out["output"], "exit_code": out["exit_code"]}})  # fmt: skip
    steps[2]["observation"]["output"] = "999\n"
    traj = {"task": {"task_id": "replay-me"}, "steps": steps}
    progress: list = []
    rep = session.ok(
        "replay_trajectory", {"sandbox_id": sid, "trajectory": traj}, progress=progress
    )
    assert (rep["replayed"], rep["differing"], rep["first_divergence"]) == (3, 1, 2)
    assert [s["matches"] for s in rep["steps"]] == [True, True, False]
    assert "-999" in rep["steps"][2]["diff"] and "+4" in rep["steps"][2]["diff"]
    assert [p[:2] for p in progress] == [(1, 3), (2, 3), (3, 3)]  # MCP progress notifications
    # the same trajectory from a file inside the root
    (root / "replay.jsonl").write_bytes(Trajectory.model_validate(traj).to_json() + b"\n")
    rep2 = session.ok("replay_trajectory", {"sandbox_id": sid, "path": "replay.jsonl"})
    assert rep2["first_divergence"] == 2


def test_recorder_tools(session: Session, root: Path):
    schema = session.ok("get_schema", {})
    assert "steps" in schema["trajectory"]["properties"]
    assert "swe_agent" in {f["name"] for f in schema["formats"]}

    out = f"out/{session.transport}/trajectories.jsonl"
    progress: list = []
    conv = session.ok("convert_logs", {"paths": ["logs/swe_agent", "logs/openhands"], "output": out},
                      progress=progress)  # fmt: skip
    assert (conv["read"], conv["converted"], conv["rejected"]) == (7, 7, 0)
    assert conv["formats"] == {"swe_agent": 3, "openhands": 2, "openhands_output": 2}
    lines = (root / out).read_bytes().splitlines()
    assert len(lines) == 7 and all(orjson.loads(x)["steps"] for x in lines)
    assert progress and progress[-1][:2] == (6, 6)  # one notification per file

    val = session.ok("validate_logs", {"paths": ["logs/swe_agent"]})
    assert val["records"] == 3 and val["ok"] + val["with_problems"] == 3

    d = session.ok("recorder_diff", {"a": "logs/swe_agent/swe-agent__test-repo-i1.traj",
                                     "b": "logs/swe_agent/pydicom__pydicom-1458.traj"})  # fmt: skip
    assert d["steps"] == [5, 12] and d["same_content"] is False and d["first_divergence"] == 0
    same = session.ok("recorder_diff", {"a": "logs/swe_agent/swe-agent__test-repo-i1.traj",
                                        "b": "logs/swe_agent/swe-agent__test-repo-i1.traj"})  # fmt: skip
    assert same["same_content"] is True


def test_reward_and_export_tools(session: Session, root: Path):
    rubrics = session.ok("list_rubrics", {"domain": "coding"})
    assert rubrics["domain"] == "coding" and {r["layer"] for r in rubrics["rubrics"]} >= {"rules"}

    # two runs of one task: the full SWE-agent run, and the same run cut after 2 steps
    src = root / "logs/swe_agent/swe-agent__test-repo-i1.traj"
    conv = session.ok(
        "convert_logs", {"paths": [str(src)], "output": f"pairs/{session.transport}/full.jsonl"}
    )
    assert conv["converted"] == 1
    full = orjson.loads((root / f"pairs/{session.transport}/full.jsonl").read_bytes())
    cut = {**full, "id": "", "steps": full["steps"][:2], "agent": {"name": "cut-agent"},
           "outcome": {"success": False}}  # fmt: skip
    full["outcome"] = {**full["outcome"], "success": True}
    runs = root / f"pairs/{session.transport}/runs.jsonl"
    runs.write_bytes(orjson.dumps(full) + b"\n" + orjson.dumps(cut) + b"\n")

    one = session.ok("score_trajectory", {"trajectory": json.dumps(full), "domain": "coding"})
    assert len(one["rewards"]) == 1 and one["rewards"][0]["total"] is not None
    rewards_file = f"pairs/{session.transport}/rewards.json"
    scored = session.ok("score_trajectory", {"paths": [str(runs)], "domain": "coding", "output": rewards_file,
                                             "store": f"stores/{session.transport}"})  # fmt: skip
    totals = [r["total"] for r in scored["rewards"]]
    assert len(totals) == 2 and totals[0] != totals[1]

    pairs = session.ok("build_preferences", {"rewards": rewards_file, "min_margin": 0.0})["pairs"]
    assert len(pairs) == 1 and pairs[0]["task_id"] == full["task"]["task_id"]
    board = session.ok("reward_leaderboard", {"rewards": rewards_file})["rows"]
    assert {tuple(r["key"].values()) for r in board} == {("swe-agent",), ("cut-agent",)}

    ann = root / f"pairs/{session.transport}/human.csv"
    with ann.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trajectory_id", "step_index", "score", "annotator"])
        for r, human in zip(scored["rewards"], (0.9, 0.2), strict=True):
            w.writerow([r["trajectory_id"], "", human, "alice"])
    cal = session.ok("calibrate_reward", {"rewards": rewards_file, "annotations": str(ann),
                                          "output": f"pairs/{session.transport}/cal.json"})  # fmt: skip
    assert cal["n_matched"] == 2 and (root / f"pairs/{session.transport}/cal.json").is_file()

    exp = session.ok("export_dataset", {"kind": "sft", "paths": [str(runs)], "include_failed": True,
                                        "output": f"datasets/{session.transport}/sft"})  # fmt: skip
    assert exp["rows"] >= 1 and (root / exp["output"]).is_dir()


def test_pipeline_tools(session: Session, root: Path):
    store = f"stores/pipeline-{session.transport}"
    one = session.ok(
        "process_log", {"path": "logs/swe_agent/pydicom__pydicom-1458.traj", "store": store}
    )
    assert (one["new"], one["duplicates"], len(one["rewards"])) == (1, 0, 1)
    progress: list = []
    batch = session.ok(
        "process_logs_batch", {"paths": ["logs/swe_agent"], "store": store}, progress=progress
    )
    assert (batch["files"], batch["new"], batch["duplicates"]) == (3, 2, 1)  # dedup on content
    assert len(batch["rewards"]) == 2 and [p[0] for p in progress] == [1, 2, 3, 4]
    grpo = session.ok("export_dataset", {"kind": "grpo", "store": store,
                                         "output": f"datasets/{session.transport}/grpo"})  # fmt: skip
    assert (grpo["kind"], grpo["trajectories"]) == ("grpo", 3) and grpo["rows"] >= 1

    run = session.ok("run_pipeline", {"pipeline": "ingest", "logs": ["logs/openhands"],
                                      "store": f"stores/flow-{session.transport}"})  # fmt: skip
    assert run["how"] == "in-process"
    deadline = time.monotonic() + 120
    while True:
        status = session.ok("pipeline_status", {"flow_run_id": run["flow_run_id"]})["flow_run"]
        if status["final"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status["state"] == "COMPLETED", status
    assert [t["state"] for t in status["task_runs"]] == ["COMPLETED"] * len(status["task_runs"])
    assert any(t["name"].startswith("record-") for t in status["task_runs"])
    flow_store = Store.open(str(root / f"stores/flow-{session.transport}"))
    assert flow_store.count("trajectories") == 4  # the four OpenHands runs, recorded by the flow

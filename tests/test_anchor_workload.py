"""The anchor bench's workload: deterministic, and both recorders read the same runs from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import _anchor_workload as workload  # noqa: E402
from anchor_bench import check_same_runs  # noqa: E402

from knowlyr.recorder import Converted, iter_records  # noqa: E402

ORIGINAL_PY = ROOT / ".bench" / "anchor-venv" / "bin" / "python"


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert workload.write_logs(a, 0, 5, seed=3) == workload.write_logs(b, 0, 5, seed=3)
    for i in range(5):
        name = workload.log_name(i)
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert workload.log_bytes(2, seed=3) != workload.log_bytes(2, seed=4)
    assert workload.log_bytes(2, seed=3) != workload.log_bytes(3, seed=3)


def test_our_converter_reads_20_step_runs_of_the_stated_size(tmp_path: Path) -> None:
    workload.write_logs(tmp_path, 0, 8)
    got = [r for r in iter_records([tmp_path], format="openhands", workers=1)]
    assert all(isinstance(r, Converted) for r in got), [getattr(r, "reason", r) for r in got]
    trajs = [r.trajectory for r in got]
    assert len(trajs) == 8
    for i, t in enumerate(trajs):
        *tools, finish = t.steps
        assert len(tools) == workload.STEPS and finish.action.tool == "finish"
        assert {len(s.observation.output) for s in tools} == {workload.OUTPUT_CHARS}
        assert all(s.thought for s in tools)
        assert t.task.task_id == f"task-{i % workload.TASKS:04d}"
        assert t.outcome.success is (i % 4 != 0)
        assert t.agent.model == workload.MODEL
        steps_kb = len(json.dumps([s.model_dump(mode="json") for s in t.steps])) / 1000
        assert 12 < steps_kb < 20, steps_kb
    tools = {s.action.tool for t in trajs for s in t.steps}
    assert {"bash", "finish"} <= tools and len(tools) >= 4, tools


def _recorder_line(task_id: str, success: bool, steps: int) -> str:
    return json.dumps(
        {"task": {"task_id": task_id}, "outcome": {"success": success}, "steps": [{}] * steps}
    )


def test_check_same_runs_stops_on_different_work(tmp_path: Path) -> None:
    orig, ours = tmp_path / "o.jsonl", tmp_path / "u.jsonl"
    orig.write_text(_recorder_line("t1", True, 20) + "\n" + _recorder_line("t2", False, 20) + "\n")
    ours.write_text(_recorder_line("t1", True, 21) + "\n" + _recorder_line("t2", False, 21) + "\n")
    assert check_same_runs(orig, ours, 2) == {
        "original_steps": 40,
        "ours_steps": 42,
        "successes": 1,
    }
    ours.write_text(_recorder_line("t1", True, 21) + "\n" + _recorder_line("t2", True, 21) + "\n")
    with pytest.raises(SystemExit, match="trajectory 1 differs"):
        check_same_runs(orig, ours, 2)
    with pytest.raises(SystemExit, match="fewer than 3"):
        check_same_runs(orig, orig, 3)


@pytest.mark.skipif(
    not ORIGINAL_PY.exists(), reason="the original's venv (.bench/anchor-venv) is absent"
)
def test_the_original_recorder_reads_the_same_runs(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    workload.write_logs(logs, 0, 8)
    out = tmp_path / "original.jsonl"
    runner = ROOT / "bench" / "_anchor_run.py"
    subprocess.run(
        [str(ORIGINAL_PY), str(runner), "original", "prep-convert", str(out), str(logs)],
        check=True,
        capture_output=True,
    )
    ours = tmp_path / "ours.jsonl"
    with open(ours, "wb") as f:
        for r in iter_records([logs], format="openhands", workers=1):
            f.write(r.trajectory.to_json() + b"\n")
    counts = check_same_runs(out, ours, 8)
    assert counts["original_steps"] == 8 * workload.STEPS
    assert counts["ours_steps"] == 8 * (workload.STEPS + 1)
    first = json.loads(out.read_text().splitlines()[1])
    assert first["model"] == workload.MODEL and first["outcome"]["success"] is True
    assert {len(s["tool_result"]["output"]) for s in first["steps"]} == {workload.OUTPUT_CHARS}

"""The command line fails with one line that names the input and the fix, and a failed or
empty piece of work exits non-zero (issue #17)."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.trajectory import AgentInfo, Outcome, Step, TaskInfo, ToolCall, Trajectory

runner = CliRunner()


def _no_traceback(r) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output


def _traj(i: int, *, success: bool) -> Trajectory:
    return Trajectory(
        task=TaskInfo(task_id=f"t-{i}", domain="conversation", instruction=f"question {i}"),
        agent=AgentInfo(name="a"),
        steps=[Step(index=0, action=ToolCall(tool="respond", params={"text": f"answer {i}"}))],
        outcome=Outcome(success=success, score=float(success)),
    ).rehash()


@pytest.mark.parametrize("cmd", ["sft", "dpo", "grpo"])
def test_train_of_a_missing_dataset_names_it_and_the_export_command(cmd, tmp_path) -> None:
    extra = ["--env", "knowlyr/conversation"] if cmd == "grpo" else []
    r = runner.invoke(app, ["train", cmd, str(tmp_path / "nope"), *extra])
    _no_traceback(r)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "nope does not exist" in r.output and "knowlyr export" in r.output


def test_train_of_a_folder_that_is_no_export_says_so(tmp_path) -> None:
    pytest.importorskip("datasets")
    r = runner.invoke(app, ["train", "sft", str(tmp_path)])
    _no_traceback(r)
    assert r.exit_code == 2 and "is not an exported dataset" in r.output


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
@pytest.mark.parametrize("option", ["--store", "--to-store"])
def test_an_s3_store_without_s3fs_names_the_package_to_install(option, tmp_path) -> None:
    src = tmp_path / "ok.jsonl"
    src.write_bytes(_traj(0, success=True).to_json() + b"\n")
    r = runner.invoke(
        app, ["export", "sft", str(src), "-o", str(tmp_path / "o"), option, "s3://bucket/x"]
    )
    _no_traceback(r)
    assert r.exit_code == 1
    assert "s3://bucket/x" in r.output and "pip install s3fs" in r.output


def test_an_export_of_no_rows_exits_1_and_writes_nothing(tmp_path) -> None:
    src = tmp_path / "failed.jsonl"
    src.write_bytes(b"\n".join(_traj(i, success=False).to_json() for i in range(3)) + b"\n")
    out = tmp_path / "sft"
    r = runner.invoke(app, ["export", "sft", str(src), "-o", str(out)])
    _no_traceback(r)
    assert r.exit_code == 1, r.output
    assert "rejected 3: not successful" in r.output
    assert "sft export of 3 trajectories has no rows" in r.output
    assert "--include-failed" in r.output and not out.exists()
    # the same file exports once failed trajectories are allowed
    r = runner.invoke(app, ["export", "sft", str(src), "-o", str(out), "--include-failed"])
    assert r.exit_code == 0 and out.is_dir()


@pytest.mark.parametrize("cmd", [["dpo"], ["grpo", "--min-group-size", "2"]])
def test_pair_and_group_exports_of_no_rows_exit_1(cmd, tmp_path) -> None:
    src = tmp_path / "one.jsonl"
    src.write_bytes(_traj(0, success=True).to_json() + b"\n")
    r = runner.invoke(app, ["export", cmd[0], str(src), "-o", str(tmp_path / "o"), *cmd[1:]])
    _no_traceback(r)
    assert r.exit_code == 1 and "has no rows" in r.output, r.output


def test_a_line_that_is_no_trajectory_names_file_line_and_field(tmp_path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text("{}\n")
    r = runner.invoke(app, ["export", "sft", str(src), "-o", str(tmp_path / "o")])
    _no_traceback(r)
    assert r.exit_code == 2
    assert "error: INPUT: " in r.output and "bad.jsonl:1: not a trajectory (task: Field" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_an_unknown_profile_is_one_line_listing_the_known_ones() -> None:
    r = runner.invoke(app, ["profiles", "nosuch"])
    _no_traceback(r)
    assert r.exit_code == 2 and "unknown domain profile 'nosuch'" in r.output
    assert "conversation" in r.output and len(r.output.strip().splitlines()) == 1

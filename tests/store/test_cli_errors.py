"""`knowlyr store` errors are one line with the fix; `store lineage` takes a checkpoint folder;
`store show` lists every sighting (issue #17)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.store import Store
from knowlyr.trajectory import AgentInfo, Outcome, Source, Step, TaskInfo, ToolCall, Trajectory

runner = CliRunner()


def _no_traceback(r) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output


def _traj(i: int, *, agent: str = "a", path: str | None = None) -> Trajectory:
    return Trajectory(
        task=TaskInfo(task_id=f"t-{i}", domain="conversation", instruction=f"question {i}"),
        agent=AgentInfo(name=agent, model=f"{agent}-model"),
        steps=[Step(index=0, action=ToolCall(tool="respond", params={"text": f"answer {i}"}))],
        outcome=Outcome(success=True, score=1.0),
        source=Source(path=path),
    ).rehash()


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
@pytest.mark.parametrize(
    "args",
    [
        ["store", "ls"],
        ["store", "lineage", "trajectories"],
        ["store", "show", "0123456789"],
        ["store", "gc", "--dry-run"],
    ],
)
def test_an_s3_store_without_s3fs_names_the_package_to_install(args, tmp_path) -> None:
    r = runner.invoke(app, [*args, "--store", "s3://bucket/x"])
    _no_traceback(r)
    assert r.exit_code == 1
    assert "s3://bucket/x" in r.output and "pip install s3fs" in r.output


def test_an_unknown_store_protocol_is_a_config_error() -> None:
    r = runner.invoke(app, ["store", "ls", "--store", "nosuch://bucket/x"])
    _no_traceback(r)
    assert r.exit_code == 1 and "no protocol 'nosuch'" in r.output


def test_store_lineage_accepts_the_checkpoint_folder_a_run_prints(tmp_path, monkeypatch) -> None:
    from knowlyr.train.checkpoints import archive_checkpoint

    url = str(tmp_path / "store")
    store = Store.open(url)
    folder = tmp_path / "store" / "checkpoints" / "sft-abc" / "final"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    blob = archive_checkpoint(store, folder)
    t = store.add_trajectories([_traj(0)])
    d = store.append("datasets", [{"dataset": "d", "row_id": "0", "trajectory_id": _traj(0).id}])
    store.record_run("export", inputs={"trajectories": t}, outputs={"datasets": d})
    store.record_run("train", inputs={"datasets": d}, outputs={"checkpoint": blob})
    monkeypatch.chdir(tmp_path)
    for ref in (str(folder), "store/checkpoints/sft-abc/final"):
        r = runner.invoke(app, ["store", "lineage", ref, "--store", url])
        _no_traceback(r)
        assert r.exit_code == 0, r.output
        assert f"lineage of {blob}" in r.output and " train " in r.output
        assert " export " in r.output and "trajectories: 1" in r.output
    # a folder the store never archived is named, with the fix
    (folder / "model.safetensors").write_bytes(b"other weights")
    r = runner.invoke(app, ["store", "lineage", str(folder), "--store", url])
    _no_traceback(r)
    assert r.exit_code == 1 and "is not a checkpoint archived in" in r.output


def test_store_show_lists_every_agent_and_run_that_produced_a_trajectory(tmp_path) -> None:
    url = str(tmp_path / "store")
    store = Store.open(url)
    store.add_trajectories([_traj(0, agent="claude", path="logs/a.jsonl")], run_id="run-one")
    store.add_trajectories([_traj(0, agent="gpt", path="logs/b.jsonl")], run_id="run-two")
    r = runner.invoke(app, ["store", "show", _traj(0).id[:12], "--store", url])
    assert r.exit_code == 0, r.output
    assert "agent    claude" in r.output and "seen     2x" in r.output
    assert "gpt gpt-model  run run-two  logs/b.jsonl" in r.output


def test_a_store_path_with_a_percent_sign_is_refused_before_anything_is_written(tmp_path) -> None:
    from knowlyr.errors import ConfigError

    root = tmp_path / "runs%20nightly" / "store"
    with pytest.raises(ConfigError, match=r"contains '%'.*without '%'"):
        Store.open(root)
    assert not root.exists()
    r = runner.invoke(app, ["store", "ls", "--store", str(root)])
    _no_traceback(r)
    assert r.exit_code == 1 and "contains '%'" in r.output

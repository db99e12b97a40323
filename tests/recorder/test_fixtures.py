"""Every real agent log in tests/data/fixtures converts, with the values the log holds."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from knowlyr.recorder import Converted, convert, detect_format, iter_records
from knowlyr.trajectory import Trajectory


def _one(path: Path) -> Trajectory:
    results = list(iter_records([path]))
    assert len(results) == 1, results
    assert isinstance(results[0], Converted), results[0]
    return results[0].trajectory


def test_every_fixture_log_converts(fixtures_dir: Path) -> None:
    report = convert([fixtures_dir])
    assert report.read == report.converted + report.rejected
    assert report.formats == {
        "openhands": 2,
        "openhands_output": 2,
        "swe_agent": 3,
        "knowlyr_legacy": 1,
    }
    # The only file that is not an agent log is a DomainProfile; it is quarantined, with the reason.
    assert [Path(r.path).name for r in report.rejected_records] == ["browser_profile.json"]
    assert "no adapter recognises" in report.rejected_records[0].reason
    assert "openhands" in report.rejected_records[0].reason  # lists the known formats
    for t in report.trajectories:
        # builders skip validation: the result must be exactly what validation gives
        assert Trajectory.model_validate(t.model_dump()) == t
        assert t.id == t.content_hash()
        assert t.source.blob and len(t.source.blob) == 64


@pytest.mark.parametrize(
    ("rel", "fmt"),
    [
        ("openhands/basic.json", "openhands"),
        ("openhands/basic_interactions.json", "openhands"),
        ("openhands/resolver_output.jsonl", "openhands_output"),
        ("swe_agent/pydicom__pydicom-1458.traj", "swe_agent"),
        ("swe_agent/6e44b9__sweagenttestrepo-1c2844.traj", "swe_agent"),
        ("knowlyr/browser_trajectory.json", "knowlyr_legacy"),
    ],
)
def test_detect_format(fixtures_dir: Path, rel: str, fmt: str) -> None:
    assert detect_format(fixtures_dir / rel) == fmt


def test_openhands_basic_str_replace_editor_and_finish(fixtures_dir: Path) -> None:
    path = fixtures_dir / "openhands/basic.json"
    t = _one(path)
    assert t.task.instruction.startswith("Please create a simple 2048 game. No need to run it.")
    assert t.tools_used() == ["str_replace_editor", "finish"]
    edit = t.steps[0]
    assert edit.action.params["command"] == "create"
    assert edit.action.params["path"] == "/workspace/game_2048.py"
    assert edit.action.params["file_text"].startswith("import random\nimport keyboard\n")
    assert edit.action.call_id == "toolu_017nBp7UfiGqyrA7j77HgtFP"
    assert edit.thought.startswith("I'll help you create a simple 2048 game in Python.")
    assert edit.observation.output.startswith(
        "--- /workspace/game_2048.py\n+++ /workspace/game_2048.py"
    )
    assert (edit.usage.prompt_tokens, edit.usage.completion_tokens) == (3486, 1135)
    assert edit.timestamp.isoformat() == "2025-01-27T22:45:13.764487"
    assert edit.duration_s == pytest.approx(0.036897)
    assert t.agent.model == "claude-3-5-sonnet-20241022"
    fin = t.steps[1]
    assert fin.action.params["message"].startswith(
        "I've created a simple implementation of the 2048 game"
    )
    assert t.outcome.terminated and t.outcome.reason == "finish"
    assert t.source.blob == __import__("hashlib").sha256(path.read_bytes()).hexdigest()


def test_openhands_conversation_user_replies_are_observations(fixtures_dir: Path) -> None:
    t = _one(fixtures_dir / "openhands/basic_interactions.json")
    assert t.task.instruction == "what's 1+1?"
    assert t.steps[0].message == "1 + 1 equals 2."
    assert t.steps[0].observation.output == "No, I mean by Goldbach's conjecture!"
    assert t.steps[1].message.startswith("Goldbach's conjecture is an unsolved problem")
    assert t.steps[1].observation.output == "Finish please"
    assert t.steps[2].action.tool == "finish"
    assert t.steps[2].action.params == {"message": "All done! What's next on the agenda?"}
    assert t.agent.model == "gpt-4o-2024-08-06"


def test_openhands_resolver_output_rows(fixtures_dir: Path) -> None:
    path = fixtures_dir / "openhands/resolver_output.jsonl"
    results = list(iter_records([path]))
    assert [r.trajectory.source.line for r in results] == [1, 2]
    lines = path.read_bytes().split(b"\n")
    a, b = (r.trajectory for r in results)
    assert results[0].raw == lines[0]  # each line is its own record, with its own bytes
    assert a.task.task_id == "neubig/pr-viewer#5"
    assert a.tools_used() == ["bash", "run_ipython", "bash", "finish"]
    assert a.steps[0].action.params == {"command": "touch LICENSE"}
    assert a.steps[0].observation.exit_code == 0
    assert a.steps[2].action.params == {"command": "cat LICENSE"}
    assert a.steps[2].observation.output.startswith("MIT License\r\n")
    assert a.steps[1].action.params["code"].startswith('mit_license = """MIT License')
    assert a.outcome.success is True and a.outcome.terminated
    assert a.metadata["git_patch"].startswith("diff --git a/LICENSE b/LICENSE")
    assert a.metadata["cost_usd"] == pytest.approx(0.070713)
    # one LLM call per action: metrics.costs is spread over the steps
    assert [s.usage.cost_usd for s in a.steps] == pytest.approx(
        [0.015396, 0.019719, 0.016743, 0.018855]
    )
    assert b.task.task_id == "neubig/pr-viewer#1"
    assert len(b.steps) == 22 and b.steps[0].action.params == {"command": "ls -R /workspace"}
    assert b.steps[12].action.params == {
        "code": "open_file('/workspace/src/PullRequestViewer.tsx')"
    }
    assert b.steps[-1].action.tool == "finish"


def test_swe_agent_commands_parsed(fixtures_dir: Path) -> None:
    t = _one(fixtures_dir / "swe_agent/pydicom__pydicom-1458.traj")
    assert t.task.task_id == "pydicom__pydicom-1458"
    assert t.task.instruction.startswith("Pixel Representation attribute should be optional")
    assert len(t.steps) == 12
    assert t.steps[0].action.model_dump() == {
        "tool": "create",
        "params": {"path": "reproduce_bug.py"},
        "call_id": None,
    }
    assert t.steps[3].action.params == {"file_name": "numpy_handler.py"}
    assert t.steps[4].action.tool == "open"
    assert t.steps[4].action.params == {
        "path": "pydicom/pixel_data_handlers/numpy_handler.py",
        "line_number": 293,
    }
    edit = t.steps[8].action
    assert edit.tool == "edit" and (edit.params["start_line"], edit.params["end_line"]) == (
        287,
        296,
    )
    assert "end_of_edit" not in edit.params["replacement"]
    assert "required_elements.append('PixelRepresentation')" in edit.params["replacement"]
    assert t.steps[9].observation.output.startswith(
        "Script completed successfully, no errors. Result: True"
    )
    assert t.steps[10].action.params == {"command": "rm reproduce_bug.py"}
    assert t.steps[11].action.tool == "submit"
    assert t.outcome.reason == "submitted" and t.outcome.terminated
    assert (
        t.metadata["submission"]
        .lstrip()
        .startswith("diff --git a/pydicom/pixel_data_handlers/numpy_handler.py")
    )
    assert t.metadata["model_stats"]["instance_cost"] == pytest.approx(1.26719)


def test_swe_agent_function_calling_keeps_model_arguments(fixtures_dir: Path) -> None:
    t = _one(fixtures_dir / "swe_agent/6e44b9__sweagenttestrepo-1c2844.traj")
    assert t.task.task_id == "SWE-agent__test-repo-i1"  # replay_config.problem_statement.id
    assert t.tools_used() == ["find_file", "open", "edit", "bash", "submit"]
    assert t.steps[1].action.params == {"path": "/SWE-agent__test-repo/tests/missing_colon.py"}
    assert t.steps[2].action.params == {
        "search": "def division(a: float, b: float) -> float",
        "replace": "def division(a: float, b: float) -> float:",
        "replace-all": False,
    }
    assert t.steps[3].observation.output == "8.2"
    assert t.steps[0].duration_s == pytest.approx(0.2814128329991945)
    assert t.agent.model == "gpt-4o"
    assert t.metadata["usage"] == {
        "prompt_tokens": 7141,
        "completion_tokens": 243,
        "cost_usd": pytest.approx(0.01952),
    }


def test_swe_agent_range_edit_and_history_fallback(fixtures_dir: Path, tmp_path: Path) -> None:
    src = fixtures_dir / "swe_agent/swe-agent__test-repo-i1.traj"
    t = _one(src)
    assert t.steps[2].action.params == {
        "start_line": 4,
        "end_line": 4,
        "replacement": "def division(a: float, b: float) -> float:",
    }
    doc = orjson.loads(src.read_bytes())
    del doc["trajectory"]
    copy = tmp_path / "no_trajectory.traj"
    copy.write_bytes(orjson.dumps(doc))
    h = _one(copy)
    assert h.tools_used() == t.tools_used()
    assert [s.action.params for s in h.steps] == [s.action.params for s in t.steps]
    assert h.steps[3].observation.output.startswith("8.2")


def test_knowlyr_legacy_browser_trajectory(fixtures_dir: Path) -> None:
    t = _one(fixtures_dir / "knowlyr/browser_trajectory.json")
    assert t.task.task_id == "browser-001" and t.task.domain == "browser"
    assert t.task.instruction == "在 GitHub 上搜索 knowlyr-agent 仓库并打开 README"
    assert t.tools_used() == ["navigate", "type_text", "click", "screenshot", "click", "submit"]
    assert t.steps[1].action.params == {"element_id": "search-input", "text": "knowlyr-agent"}
    assert t.steps[0].observation.output == "页面加载完成: GitHub"
    assert t.steps[0].observation.exit_code == 0
    assert t.agent.name == "browser-agent" and t.agent.model == "claude-sonnet-4-20250514"
    assert t.outcome.success is True and t.outcome.score == 1.0
    assert t.metadata["total_tokens"] == 2500 and t.metadata["browser"] == "chromium"

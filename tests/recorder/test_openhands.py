"""OpenHands logs: the outcome and model they carry, event logs written one event per line,
and runs whose agent acts through text (CodeAct's ``<execute_bash>``, fenced ```` ```bash ````
blocks). The logs are generated here in the shapes OpenHands writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from knowlyr.recorder import (
    Converted,
    Rejected,
    detect_format,
    get_adapter,
    iter_bytes,
    iter_records,
)
from knowlyr.store.tables import document_row
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

TASK = {
    "id": 0,
    "source": "user",
    "action": "message",
    "args": {"content": "Fix the failing test in calc.py"},
}


def _run(i: int, command: str, output: str, code: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "timestamp": f"2025-01-27T22:45:{i:02d}",
            "source": "agent",
            "action": "run",
            "args": {"command": command, "thought": f"step {i}"},
        },
        {
            "id": i + 1,
            "timestamp": f"2025-01-27T22:45:{i + 1:02d}",
            "source": "agent",
            "cause": i,
            "observation": "run",
            "content": output,
            "extras": {"command": command, "exit_code": code},
        },
    ]


def _finish(i: int, outputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": i,
        "source": "agent",
        "action": "finish",
        "args": {"outputs": outputs, "thought": "All tests pass."},
    }


def _say(i: int, text: str, source: str = "agent") -> dict[str, Any]:
    return {"id": i, "source": source, "action": "message", "args": {"content": text}}


def _convert(events: list[dict[str, Any]]) -> Trajectory:
    """Convert ``events`` as a JSON array file would be (detection included)."""
    (r,) = list(iter_bytes(orjson.dumps(events), path="run.json", redact=False))
    assert isinstance(r, Converted), r
    t = r.trajectory
    assert Trajectory.model_validate(orjson.loads(t.to_json())) == t
    # the document written without the models is what the models serialise to
    d = get_adapter(t.source.format).document(events, path="run.json")
    d["source"] = t.source.model_dump(exclude_none=True)
    assert document_row(d)[-1] == t.to_json()
    return t


def test_event_log_keeps_the_test_result_and_model_it_declares() -> None:
    events = [
        TASK,
        *_run(1, "pytest -q", "1 failed", 1),
        *_run(3, "pytest -q", "3 passed"),
        _finish(5, {"test_result": {"success": True, "tests_passed": 3, "tests_failed": 0}}),
        {
            "id": 6,
            "source": "environment",
            "observation": "agent_state_changed",
            "content": "",
            "extras": {
                "agent_state": "finished",
                "model": "gpt-4o-2024-08-06",
                "agent_class": "CodeActAgent",
                "instance_id": "calc__calc-7",
                "max_iterations": 30,
            },
        },
    ]
    t = _convert(events)
    o = t.outcome
    assert (o.success, o.tests_passed, o.tests_failed) == (True, 3, 0)
    assert o.terminated and o.reason == "finish"
    assert t.agent.model == "gpt-4o-2024-08-06" and t.agent.name == "openhands/CodeActAgent"
    assert t.task.task_id == "calc__calc-7"
    assert t.metadata["max_iterations"] == 30
    assert [s.observation.exit_code for s in t.steps[:2]] == [1, 0]


@pytest.mark.parametrize(
    ("outputs", "success"),
    [
        ({"success": False}, False),
        ({"test_result": {"success": False, "tests_passed": 2, "tests_failed": 1}}, False),
        ({"test_result": {"tests_passed": 2}}, None),  # says nothing about success
        ({}, None),
    ],
)
def test_finish_outputs_decide_success(outputs: dict[str, Any], success: bool | None) -> None:
    t = _convert([TASK, *_run(1, "ls", "calc.py"), _finish(3, outputs)])
    assert t.outcome.success is success


def test_model_of_an_event_itself() -> None:
    events = [TASK, *_run(1, "ls", "calc.py"), _finish(3, {})]
    events[1] = {**events[1], "model": "claude-3-5-sonnet-20241022"}
    assert _convert(events).agent.model == "claude-3-5-sonnet-20241022"


def test_output_row_keeps_its_test_result_and_model(tmp_path: Path) -> None:
    row = {
        "instance_id": "calc__calc-7",
        "instruction": "Fix the failing test in calc.py",
        "history": [TASK, *_run(1, "pytest -q", "3 passed"), _finish(3, {})],
        "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "gpt-4o"}},
        "test_result": {"success": True, "tests_passed": 3, "tests_failed": 0},
    }
    p = tmp_path / "output.jsonl"
    p.write_bytes(orjson.dumps(row) + b"\n")
    (r,) = iter_records([p])
    o = r.trajectory.outcome
    assert (o.success, o.tests_passed, o.tests_failed, o.resolved) == (True, 3, 0, None)
    assert r.trajectory.agent.model == "gpt-4o"
    del row["metadata"]
    row["history"][1] = {**row["history"][1], "extras": {"model": "gpt-4o-mini"}}
    row["test_result"] = {"report": {"resolved": False}}  # the SWE-bench harness's verdict
    p.write_bytes(orjson.dumps(row) + b"\n")
    (r,) = iter_records([p])
    assert r.trajectory.agent.model == "gpt-4o-mini"
    assert (r.trajectory.outcome.success, r.trajectory.outcome.resolved) == (False, False)


def test_event_log_written_one_event_per_line_is_one_trajectory(tmp_path: Path) -> None:
    events = [TASK, *_run(1, "ls", "calc.py"), *_run(3, "cat calc.py", "def add(a, b): ...")]
    events.append(_finish(5, {"success": True}))
    as_json = _convert(events)
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    assert detect_format(lines) == "openhands"
    (r,) = list(iter_records([lines]))
    assert isinstance(r, Converted) and r.raw == lines.read_bytes()
    t = r.trajectory
    assert t.id == as_json.id and t.steps == as_json.steps and t.outcome == as_json.outcome
    assert t.tools_used() == ["bash", "bash", "finish"] and t.source.line is None
    # a corrupt line is quarantined; the rest of the run is kept
    body = lines.read_bytes().splitlines()
    body.insert(2, b'{"id": 9, "action": "ru')
    lines.write_bytes(b"\n".join(body))
    results = list(iter_records([lines]))
    assert [type(r) for r in results] == [Rejected, Converted]
    assert results[0].line == 3 and "not valid JSON" in results[0].reason
    assert results[1].trajectory.tools_used() == ["bash", "bash", "finish"]


def test_codeact_text_actions_become_steps() -> None:
    events = [
        TASK,
        _say(1, "Let me look at the file.\n<execute_bash>\ncat calc.py\n</execute_bash>"),
        _say(
            2,
            "OBSERVATION:\ndef add(a, b): return a - b\n[Command finished with exit code 0]",
            "user",
        ),
        _say(3, "Fix it.\n<execute_ipython>\nprint(1)\n</execute_ipython>"),
        _say(4, "OBSERVATION:\n1", "user"),
        _say(
            5,
            "Two at once:\n<execute_bash>\nls\n</execute_bash>\n<execute_bash>\npwd\n</execute_bash>",
        ),
        _say(6, "Please continue working on the task.", "user"),
        _say(7, "Run the tests.\n<execute_bash>\npytest -q"),  # cut at the stop sequence
        _say(8, "OBSERVATION:\n1 passed\n[Command finished with exit code 0]", "user"),
        _say(9, "The bug is fixed."),
        _finish(10, {}),
    ]
    t = _convert(events)
    assert t.tools_used() == ["bash", "run_ipython", INVALID_ACTION_TOOL, "bash", "finish"]
    cat, ipy, two, tests, msg, fin = t.steps
    assert cat.action.params == {"command": "cat calc.py"}
    assert cat.thought == "Let me look at the file."
    assert cat.observation.exit_code == 0
    assert cat.observation.output.startswith("OBSERVATION:\ndef add(a, b)")
    assert ipy.action.params == {"code": "print(1)"} and ipy.observation.output == "OBSERVATION:\n1"
    assert two.action.params["error"] == "found 2 execute blocks, expected exactly one"
    assert two.observation.output == "Please continue working on the task."
    assert tests.action.params == {"command": "pytest -q"} and tests.thought == "Run the tests."
    assert msg.message == "The bug is fixed." and msg.action is None
    assert fin.action.tool == "finish"


def test_fenced_bash_blocks_count_only_where_the_agent_acts_through_text() -> None:
    text_run = [
        TASK,
        _say(1, "THOUGHT: list.\n\n```bash\nls\n```"),
        _say(2, "<returncode>0</returncode>\n<output>\ncalc.py\n</output>", "user"),
        _say(3, "```bash\nls\n```\n```bash\npwd\n```"),
        _say(4, "Please always provide EXACTLY ONE action in triple backticks.", "user"),
        _finish(5, {}),
    ]
    t = _convert(text_run)
    ls, bad, _ = t.steps
    assert (ls.action.params, ls.thought) == ({"command": "ls"}, "THOUGHT: list.")
    assert (ls.observation.output, ls.observation.exit_code) == ("calc.py", 0)
    assert bad.action.tool == INVALID_ACTION_TOOL
    assert bad.action.params["error"] == "found 2 bash blocks, expected exactly one"
    # in a run that acts through tools, a fenced block in a message is text shown to the user
    tool_run = [
        TASK,
        *_run(1, "ls", "calc.py"),
        _say(3, "Run it with:\n```bash\npython calc.py\n```"),
    ]
    t = _convert(tool_run)
    assert t.tools_used() == ["bash"]
    assert t.steps[1].message == "Run it with:\n```bash\npython calc.py\n```"

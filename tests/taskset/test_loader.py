"""Your own tasks from JSONL: validated line by line, graded by the same envs, replayable."""

from __future__ import annotations

import orjson
import pytest

from knowlyr.agents import Agent, ExpertAgent
from knowlyr.errors import ConfigError
from knowlyr.rollout import collect
from knowlyr.taskset import get_task, load_tasks
from knowlyr.taskset.testrunner import parse_summary, runner_source

BUGGY = "def double(x):\n    return x + x + 1\n"
FIXED = "def double(x):\n    return x + x\n"
HIDDEN = "from mylib.core import double\n\n\ndef test_double():\n    assert double(4) == 8\n"

CODING = {
    "task_id": "mine-double-1",
    "domain": "coding",
    "suite": "mine",
    "instruction": "double() in mylib/core.py is off by one. Fix it and submit.",
    "files": {"mylib/__init__.py": "", "mylib/core.py": BUGGY},
    "hidden_tests": {
        ".knowlyr_hidden/test_core.py": HIDDEN,
        ".knowlyr_hidden/run_tests.py": runner_source(),
    },
    "test_command": "python3 .knowlyr_hidden/run_tests.py .knowlyr_hidden",
    "reference_solution": [
        {
            "tool": "edit_file",
            "params": {"path": "mylib/core.py", "old_str": " + 1", "new_str": ""},
        },
        {"tool": "submit", "params": {}},
    ],
}
CONVERSATION = {
    "task_id": "mine-status-1",
    "domain": "conversation",
    "suite": "mine",
    "instruction": "What is the status of order AB12C?",
    "expected_facts": ["shipped"],
    "forbidden_facts": ["pending"],
    "data": {"orders": {"AB12C": {"status": "shipped"}}},
    "reference_solution": [
        {"tool": "query_stats", "params": {"order_id": "AB12C"}},
        {"tool": "respond", "params": {"text": "Order AB12C has shipped."}},
    ],
}


@pytest.fixture
def task_file(tmp_path):
    lines = [
        orjson.dumps(CODING),
        b"{broken",
        orjson.dumps({"domain": "coding"}),
        orjson.dumps(CONVERSATION | {"files": ["not", "a", "dict"], "task_id": "bad-files"}),
        orjson.dumps(CONVERSATION),
        orjson.dumps(CONVERSATION),
        orjson.dumps(CODING | {"task_id": "no-command", "test_command": ""}),
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_good_lines_load_and_bad_ones_say_why(task_file):
    loaded = load_tasks(task_file)
    assert [t.task_id for t in loaded.tasks] == ["mine-double-1", "mine-status-1"]
    reasons = {r.line: r.reason for r in loaded.rejected}
    assert set(reasons) == {2, 3, 4, 6, 7}
    assert "task_id" in reasons[3] and "files" in reasons[4]
    assert "twice" in reasons[6] and "test_command" in reasons[7]
    assert get_task("mine-status-1").split in ("train", "heldout")
    with pytest.raises(ConfigError, match="cannot read"):
        load_tasks(task_file.parent / "missing.jsonl")


def test_loaded_tasks_run_and_are_graded_by_the_envs(task_file):
    coding, conv = load_tasks(task_file).tasks

    class SubmitNow(Agent):
        def act(self, observation, info):
            return {"tool": "submit", "params": {}}

    solved = collect("knowlyr/sandbox", ExpertAgent, 1, tasks=[coding])[0]
    assert solved.outcome.success and (
        solved.outcome.tests_passed,
        solved.outcome.tests_failed,
    ) == (1, 0)
    assert [s.action.tool for s in solved.steps] == ["edit_file", "submit"]
    unsolved = collect("knowlyr/sandbox", SubmitNow, 1, tasks=[coding])[0]
    assert unsolved.outcome.success is False and unsolved.outcome.tests_failed == 1
    answered = collect("knowlyr/conversation", ExpertAgent, 1, tasks=[conv])[0]
    assert (
        answered.outcome.success and answered.steps[0].observation.output == "order AB12C: shipped"
    )


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("==== 1 failed, 4 passed in 0.05s ====", (4, 1)),
        ("======= 5 passed in 0.01s =======", (5, 0)),
        ("== 2 failed, 1 error in 1.2s ==", (0, 3)),
        ("=== no tests ran in 0.01s ===", None),
    ],
)
def test_pytest_summaries_are_understood(text, counts):
    assert parse_summary(f"collected 5 items\n\n{text}\n") == counts


def test_cli_rollout_runs_a_task_file(tmp_path):
    from typer.testing import CliRunner

    from knowlyr.cli import app

    path = tmp_path / "conv.jsonl"
    path.write_bytes(orjson.dumps(CONVERSATION) + b"\n{broken\n")
    args = ["rollout", "knowlyr/conversation", "--tasks", str(path), "-n", "2"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "rejected" in r.output and "2 episodes, 2 successful" in r.output

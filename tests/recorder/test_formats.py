"""Formats without a public fixture: samples in tests/recorder/data written from the documented fields."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from knowlyr.recorder import Converted, detect_format, iter_records
from knowlyr.recorder.adapters.agentgym import parse_react
from knowlyr.recorder.adapters.swe_agent import parse_command
from knowlyr.trajectory import Outcome, TaskInfo, Trajectory, to_chat_messages

DATA = Path(__file__).parent / "data"


def _all(name: str) -> list[Trajectory]:
    out = list(iter_records([DATA / name]))
    assert all(isinstance(r, Converted) for r in out), out
    for r in out:
        assert Trajectory.model_validate(r.trajectory.model_dump()) == r.trajectory
    return [r.trajectory for r in out]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("swe_gym_chat.jsonl", "openai_chat"),
        ("anthropic_messages.json", "anthropic"),
        ("claude_code_session.jsonl", "claude_code"),
        ("agentgym_webshop.json", "agentgym"),
        ("atif_session.json", "atif"),
        ("openhands_eval_output.jsonl", "openhands_output"),
    ],
)
def test_detect(name: str, fmt: str) -> None:
    assert detect_format(DATA / name) == fmt


def test_openai_chat_swe_gym_rows() -> None:
    a, b = _all("swe_gym_chat.jsonl")
    assert a.task.task_id == "getmoto__moto-5752" and a.outcome.success is True
    assert a.tools_used() == ["str_replace_editor", "str_replace_editor", "execute_bash", "finish"]
    assert a.steps[0].action.params["view_range"] == [1800, 1830]
    assert a.steps[1].action.params["new_str"] == "self._parameters.get(path, [])"
    assert a.steps[1].thought == "I'll fix the lookup to use .get()."
    assert a.steps[2].thought == ""  # second call of the same message
    assert a.steps[2].observation.output.startswith(
        "........ 412 passed"
    )  # matched by tool_call_id
    assert a.steps[2].observation.exit_code == 0
    assert a.metadata["run_id"] == "run_3"
    assert a.metadata["system_prompt"].startswith("You are OpenHands agent")
    assert b.outcome.success is False
    assert b.steps[-1].message == "I could not reproduce the crash."


def test_openai_chat_round_trips_to_chat_messages() -> None:
    (a, _) = _all("swe_gym_chat.jsonl")
    msgs = to_chat_messages(a)
    from knowlyr.recorder.adapters.chat import OpenAIChatAdapter

    back = OpenAIChatAdapter().convert(
        {"messages": msgs, "instance_id": a.task.task_id, "resolved": True}
    )
    assert [s.action.model_dump() for s in back.steps] == [s.action.model_dump() for s in a.steps]
    assert [s.observation.output if s.observation else None for s in back.steps] == [
        s.observation.output if s.observation else None for s in a.steps
    ]


def test_anthropic_messages() -> None:
    (t,) = _all("anthropic_messages.json")
    assert t.tools_used() == ["bash", "str_replace_based_edit_tool"]
    s0 = t.steps[0]
    assert s0.thought == "I should run the failing test first.\nLet me run the test."
    assert s0.action.params == {"command": "pytest tests/test_math.py::test_div -q"}
    assert s0.observation.error.startswith("E   ZeroDivisionError")  # is_error tool_result
    assert (s0.usage.prompt_tokens, s0.usage.completion_tokens) == (812, 96)
    assert t.steps[1].observation.output == "The file /repo/mathlib.py has been edited."
    assert t.steps[2].message == "Fixed: division by zero now returns 0.0."
    assert t.agent.model == "claude-sonnet-4-20250514"


def test_claude_code_session_is_one_trajectory() -> None:
    results = list(iter_records([DATA / "claude_code_session.jsonl"]))
    assert len(results) == 1
    t = results[0].trajectory
    assert results[0].raw == (DATA / "claude_code_session.jsonl").read_bytes()
    assert t.task.task_id == "6f1c2b9e-4d0a-4c51-9a55-0c1f2f6b2a11"
    assert t.task.instruction == "add a --version flag to cli.py"
    assert t.tools_used() == ["Read", "Edit", "Bash"]
    assert (
        t.steps[0].thought == "I'll read cli.py first."
    )  # text block on an earlier line, same message id
    assert t.steps[0].action.params == {"file_path": "/home/dev/proj/cli.py"}
    assert t.steps[0].usage.completion_tokens == 8  # counted once per message id
    assert t.steps[2].observation.output == "1.2.0"
    assert t.steps[3].message.startswith("Added `--version`")
    assert t.metadata["summary"] == "Add a --version flag to the CLI"


def test_agentgym() -> None:
    web, alf = _all("agentgym_webshop.json")
    assert web.task.task_id == "webshop_17" and web.task.domain == "webshop"
    assert web.task.instruction.startswith("WebShop [SEP] Instruction:")
    assert web.metadata["system_prompt"].startswith("You are web shopping.")
    assert [(s.action.tool, s.action.params["input"]) for s in web.steps] == [
        ("search", "long clip-in hair extension natural looking"),
        ("click", "B09QQLDJ93"),
        ("click", "Buy Now"),
    ]
    assert (
        web.steps[0].thought
        == "I think I should search for long clip-in hair extensions that look natural."
    )
    assert web.steps[2].observation.output.endswith("Your score (min 0.0, max 1.0): 0.75")
    assert web.steps[0].metadata == {"loss": True}
    assert web.outcome.score == 0.75  # read from WebShop's final page
    assert alf.steps[0].action.model_dump()["params"] == {"text": "go to cabinet 1"}
    assert parse_react("just words") == ("", "just words", None, {})


def test_atif_keeps_token_ids_and_logprobs() -> None:
    (t,) = _all("atif_session.json")
    assert t.task.instruction == "Count the lines of /data/log.txt"
    assert (
        t.agent.name == "terminus"
        and t.agent.model == "Qwen/Qwen3-8B"
        and t.agent.version == "2.0.1"
    )
    s0, s1 = t.steps
    assert s0.action.tool == "bash" and s0.action.params == {"command": "wc -l /data/log.txt"}
    assert s0.action.call_id == "c1"
    assert s0.observation.output == "1043 /data/log.txt"
    assert s0.token_ids == [40, 3278, 990, 26078, 13]
    assert s0.logprobs == [-0.11, -0.52, -0.003, -1.2, -0.04]
    assert s0.metadata["prompt_token_ids"] == [151644, 8948, 198]
    assert s0.usage.cost_usd == pytest.approx(0.00012)
    assert s1.message == "The file has 1043 lines." and s1.token_ids[:2] == [785, 1034]
    assert t.metadata["system_prompt"] == "You are a terminal agent."
    assert t.metadata["final_metrics"]["total_steps"] == 4


def test_openhands_evaluation_output() -> None:
    (t,) = _all("openhands_eval_output.jsonl")
    assert t.task.task_id == "astropy__astropy-12907"
    assert t.task.suite == "princeton-nlp/SWE-bench_Verified"
    assert t.agent.name == "openhands/CodeActAgent"
    assert t.tools_used() == ["bash", "str_replace_editor", "bash", "finish"]
    assert t.steps[0].observation.exit_code == 0 and t.steps[2].observation.exit_code == 1
    assert t.steps[1].action.params == {
        "command": "str_replace",
        "path": "/workspace/astropy__astropy__5.1/astropy/modeling/separable.py",
        "old_str": "cright[-right.shape[0]:, -right.shape[1]:] = 1",
        "new_str": "cright[-right.shape[0]:, -right.shape[1]:] = right",
    }
    assert t.steps[2].duration_s == pytest.approx(12.5)
    assert [s.usage.cost_usd for s in t.steps] == pytest.approx([0.021, 0.019, 0.022, 0.0192])
    assert t.steps[3].action.params["task_completed"] == "true"
    o = t.outcome
    assert (o.success, o.tests_passed, o.tests_failed, o.terminated) == (True, 5, 1, True)
    assert t.metadata["git_patch"].startswith("diff --git a/astropy/modeling/separable.py")
    assert t.metadata["system_prompt"] == "You are OpenHands agent."


@pytest.mark.parametrize(
    ("command", "tool", "params"),
    [
        ("open file.py 10", "open", {"path": "file.py", "line_number": 10}),
        ('open "a b.py"', "open", {"path": "a b.py"}),
        ("goto 583\n", "goto", {"line_number": 583}),
        ("scroll_down", "scroll_down", {}),
        ("create reproduce.py", "create", {"path": "reproduce.py"}),
        (
            "edit 5:7\n    return x\nend_of_edit",
            "edit",
            {"start_line": 5, "end_line": 7, "replacement": "    return x"},
        ),
        ('search_dir "def foo" src', "search_dir", {"search_term": "def foo", "dir": "src"}),
        ('search_file "bar"', "search_file", {"search_term": "bar"}),
        ('find_file "x.py" .', "find_file", {"file_name": "x.py", "dir": "."}),
        ("submit\n", "submit", {}),
        (
            "str_replace_editor str_replace /r/a.py --old_str 'x = 1' --new_str 'x = 2'",
            "str_replace_editor",
            {"command": "str_replace", "path": "/r/a.py", "old_str": "x = 1", "new_str": "x = 2"},
        ),
        ("python -m pytest -q", "bash", {"command": "python -m pytest -q"}),
        ("ls -la | grep 'x", "bash", {"command": "ls -la | grep 'x"}),
    ],
)
def test_parse_swe_agent_command(command: str, tool: str, params: dict) -> None:
    assert parse_command(command) == (tool, params)


def test_knowlyr_output_round_trips(tmp_path: Path) -> None:
    src = list(iter_records([DATA]))
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"".join(r.trajectory.to_json() + b"\n" for r in src))
    back = list(iter_records([out]))
    assert [r.trajectory.source.format for r in back] == ["knowlyr"] * len(src)
    for a, b in zip(src, back, strict=True):
        ta, tb = a.trajectory, b.trajectory
        assert tb.id == ta.id
        assert tb.steps == ta.steps and tb.task == ta.task and tb.outcome == ta.outcome
        assert tb.metadata["origin"]["path"] == ta.source.path


def test_knowlyr_native_rejects_invalid_with_field_name(tmp_path: Path) -> None:
    t = Trajectory(task=TaskInfo(task_id="x"), outcome=Outcome())
    doc = orjson.loads(t.to_json())
    doc["steps"] = [{"index": "not-an-int"}]
    p = tmp_path / "bad.json"
    p.write_bytes(orjson.dumps(doc))
    (r,) = iter_records([p])
    assert "steps.0.index" in r.reason and "knowlyr schema" in r.reason


def test_openhands_output_row_that_errored() -> None:
    row = orjson.loads((DATA / "openhands_eval_output.jsonl").read_bytes())
    row["history"] = [e for e in row["history"] if e.get("action") != "finish"]
    row["error"] = (
        "RuntimeError: Agent reached maximum iteration in headless mode. Current iteration: 100"
    )
    del row["test_result"]["report"]
    from knowlyr.recorder import iter_bytes

    (r,) = iter_bytes(orjson.dumps(row), path="x.jsonl")
    o = r.trajectory.outcome
    assert o.reason.startswith("RuntimeError: Agent reached maximum iteration")
    assert (o.terminated, o.truncated, o.success) == (False, True, None)
    assert r.trajectory.tools_used() == ["bash", "str_replace_editor", "bash"]

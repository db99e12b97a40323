"""mini-swe-agent trajectories: three real runs (tests/recorder/data/mini_swe_agent, see its
README for their origin) and small generated logs for what those runs do not show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from knowlyr.recorder import Converted, Rejected, convert, detect_format, get_adapter, iter_bytes
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

RUNS = Path(__file__).parent / "data" / "mini_swe_agent"
FILES = sorted(RUNS.glob("*.traj.json"))


def _one(path: Path) -> Trajectory:
    (r,) = list(iter_bytes(path.read_bytes(), path=str(path), redact=False))
    assert isinstance(r, Converted), r
    return r.trajectory


def _log(*turns: dict[str, Any], **info: Any) -> dict[str, Any]:
    """A mini-swe-agent-1 log: system, task, then ``turns``."""
    return {
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": "demo__demo-1",
        "info": {
            "exit_status": "Submitted",
            "submission": "diff --git a/x b/x\n",
            "model_stats": {"instance_cost": 0.5, "api_calls": 3},
            "mini_version": "1.15.0",
            "config": {"model": {"model_name": "openai/gpt-5"}},
            **info,
        },
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {
                "role": "user",
                "content": "<pr_description>\nConsider the following PR description:\n"
                "Fix the crash\n</pr_description>\n\n<instructions>...</instructions>",
            },
            *turns,
        ],
    }


def _me(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _env(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _convert(doc: dict[str, Any]) -> Trajectory:
    (r,) = list(iter_bytes(orjson.dumps(doc), path="demo__demo-1.traj.json", redact=False))
    assert isinstance(r, Converted), r
    return r.trajectory


DIFF = "diff --git a/x.py b/x.py\n+    return '<returncode>0</returncode><output>' + x\n"
FORMAT_ERROR = "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_real_runs_are_detected_and_give_one_step_per_assistant_message(path: Path) -> None:
    doc = orjson.loads(path.read_bytes())
    assert get_adapter("openai_chat").sniff(doc)  # it would pass for plain chat ...
    assert detect_format(path) == "mini_swe_agent"  # ... but mini-swe-agent comes first
    t = _one(path)
    assert t.source.format == "mini_swe_agent"
    n_assistant = sum(m["role"] == "assistant" for m in doc["messages"])
    assert len(t.steps) == n_assistant == doc["info"]["model_stats"]["api_calls"]
    assert t.task.task_id == doc["instance_id"] and t.task.domain == "coding"
    assert "Consider the following PR description" not in t.task.instruction
    assert t.agent.model_dump() == {
        "name": "mini-swe-agent",
        "model": "google/gemini-3-pro-preview",
        "version": "1.15.0",
    }
    o = t.outcome
    assert (o.reason, o.terminated, o.truncated) == ("Submitted", True, False)
    assert o.success is None and o.resolved is None  # the log does not know the verdict
    assert o.submission == doc["info"]["submission"]
    last = t.steps[-1]
    assert last.action.params == {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
    }
    assert last.observation.output == doc["info"]["submission"]  # the diff the submit printed
    assert t.metadata["model_stats"] == doc["info"]["model_stats"]
    assert t.metadata["mini_version"] == "1.15.0"
    assert t.metadata["system_prompt"].startswith("You are a helpful assistant that can interact")
    # the document written without the models is what the models serialise to
    d = get_adapter("mini_swe_agent").document(doc, path=str(path))
    d["source"] = t.source.model_dump(exclude_none=True)
    assert d == orjson.loads(t.to_json())


def test_long_output_keeps_head_and_tail_with_an_elided_marker() -> None:
    t = _one(RUNS / "django__django-11163.traj.json")
    assert t.task.instruction.startswith(
        "model_to_dict() should return an empty dict for an empty list of fields."
    )
    s0 = t.steps[0]
    assert s0.action.params == {
        "command": 'ls -R | grep ":$" | head -n 5 && grep -r "def model_to_dict" .'
    }
    assert s0.thought.startswith("THOUGHT:") and "```" not in s0.thought
    assert s0.observation.exit_code == 0
    assert s0.observation.output.startswith(".:\n./Django.egg-info:\n./django:\n")
    assert (s0.usage.prompt_tokens, s0.usage.completion_tokens) == (1397, 219)
    assert s0.usage.cost_usd == pytest.approx(0.005422)
    cat = t.steps[1]
    assert cat.action.params == {"command": "cat django/forms/models.py"}
    head, marker, tail = cat.observation.output.partition("\n[46018 characters elided]\n")
    assert marker and len(head) == len(tail) == 5000  # what the agent was shown of 56,018
    assert head.startswith('"""\nHelper functions for creating Form classes from Django models')
    assert tail.endswith("form_class._meta.exclude is not None\n    )\n")
    assert "<output_tail>" not in cat.observation.output and "<warning>" not in head
    assert t.steps[2].observation.output == "" and t.steps[2].observation.exit_code == 0


def test_a_reply_with_three_blocks_is_a_countable_invalid_action() -> None:
    path = RUNS / "django__django-15277.traj.json"
    doc = orjson.loads(path.read_bytes())
    t = _one(path)
    invalid = [s for s in t.steps if s.tool == INVALID_ACTION_TOOL]
    assert [s.index for s in invalid] == [6]
    s = invalid[0]
    reply = [m for m in doc["messages"] if m["role"] == "assistant"][6]["content"]
    assert s.action.params == {"raw": reply, "error": "found 3 bash blocks, expected exactly one"}
    assert s.thought.startswith("THOUGHT: I will modify `django/db/models/fields/__init__.py`.")
    assert "```bash" not in s.thought
    assert s.observation.error == "format_error" and s.observation.exit_code is None
    assert s.observation.output.startswith(
        "Please always provide EXACTLY ONE action in triple backticks, found 3 actions."
    )
    assert s.usage is not None  # the model call was paid for all the same
    assert t.steps[7].tool == "bash" and t.steps[7].observation.error is None
    assert t.steps[1].action.params == {
        "command": 'grep -n "class CharField" django/db/models/fields/__init__.py'
    }
    assert t.steps[1].observation.output == "1007:class CharField(Field):"


def test_a_failed_run_reads_like_any_other() -> None:
    t = _one(RUNS / "astropy__astropy-7606.traj.json")
    assert len(t.steps) == 31 and t.tools_used() == ["bash"] * 31
    assert t.steps[0].action.params == {"command": "ls -la"}
    assert t.steps[2].observation.output.startswith("724:    def __eq__(self, other):\n1712:")
    assert t.outcome.submission.startswith("diff --git a/astropy/units/core.py")
    assert t.metadata["model_stats"]["instance_cost"] == pytest.approx(0.2286122)


def test_exit_codes_outputs_and_timeouts() -> None:
    t = _convert(
        _log(
            _me("THOUGHT: run the tests.\n\n```bash\npytest -q tests/\n```"),
            _env("<returncode>1</returncode>\n<output>\nE   AssertionError\n\n1 failed\n</output>"),
            _me("THOUGHT: the full suite.\n\n```bash\npytest\n```"),
            _env(
                "The last command <command>pytest</command> timed out and has been killed.\n"
                "The output of the command was:\n <output>\ncollected 852 items\n....\n</output>\n"
                "Please try another command and make sure to avoid those requiring interactive input."
            ),
            _me(
                "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\n```"
            ),
            _env(DIFF),
        )
    )
    a, b, c = t.steps
    assert a.thought == "THOUGHT: run the tests."
    assert a.action.params == {"command": "pytest -q tests/"}
    assert (a.observation.exit_code, a.observation.output) == (1, "E   AssertionError\n\n1 failed")
    assert a.observation.error is None
    assert b.observation.error == "timeout" and b.observation.exit_code is None
    assert b.observation.output == "collected 852 items\n...."
    assert c.observation.output == DIFF  # kept whole, tags and all: it is not command output
    assert t.task.instruction == "Fix the crash" and t.task.task_id == "demo__demo-1"
    assert t.agent.model == "openai/gpt-5"


def test_unclosed_fence_and_two_blocks_are_invalid_actions() -> None:
    cut = "THOUGHT: edit the file.\n\n```bash\nsed -i 's/a/b/' x.py"
    two = "THOUGHT: two things.\n\n```bash\nls\n```\n\nthen\n\n```bash\npwd\n```"
    none = "THOUGHT: I am not sure what to do."
    t = _convert(
        _log(
            _me(cut),
            _env(FORMAT_ERROR),
            _me(two),
            _env(FORMAT_ERROR),
            _me(none),
            _env(FORMAT_ERROR),
            _me("```bash\nls\n```"),
            _env("<returncode>0</returncode>\n<output>\nx.py\n</output>"),
        )
    )
    assert t.tools_used() == [INVALID_ACTION_TOOL] * 3 + ["bash"]
    s0, s1, s2, s3 = t.steps
    assert s0.action.params == {"raw": cut, "error": "unclosed ```bash fence"}
    assert s0.thought == "THOUGHT: edit the file."
    assert s1.action.params == {"raw": two, "error": "found 2 bash blocks, expected exactly one"}
    assert s1.thought == "THOUGHT: two things.\n\n\n\nthen"
    assert s2.action.params["error"] == "found 0 bash blocks, expected exactly one"
    for s in (s0, s1, s2):
        assert (s.observation.output, s.observation.error) == (FORMAT_ERROR, "format_error")
    assert (s3.action.params, s3.observation.output) == ({"command": "ls"}, "x.py")
    assert s3.thought == ""


def test_limit_exits_are_truncated_and_carry_no_submission() -> None:
    t = _convert(
        _log(
            _me("```bash\nls\n```"),
            _env("<returncode>0</returncode>\n<output>\na\n</output>"),
            _env(""),  # str(LimitsExceeded()): answers no step
            exit_status="LimitsExceeded",
            submission="",
        )
    )
    o = t.outcome
    assert (o.reason, o.terminated, o.truncated, o.submission) == (
        "LimitsExceeded",
        False,
        True,
        None,
    )
    assert len(t.steps) == 1 and t.steps[0].observation.output == "a"
    t = _convert(
        _log(
            _me("```bash\nls\n```"),
            _env("<returncode>0</returncode>\n<output>\na\n</output>"),
            _env("litellm.ContextWindowExceededError: too long"),
            exit_status="ContextWindowExceededError",
            submission="litellm.ContextWindowExceededError: too long",
        )
    )
    assert t.outcome.truncated and t.outcome.submission is None
    assert t.metadata["exit_message"] == "litellm.ContextWindowExceededError: too long"
    assert t.steps[-1].metadata["user_message_after"].startswith("litellm.ContextWindow")
    crashed = _convert(_log(_me("```bash\nls\n```"), exit_status="RuntimeError"))
    o = crashed.outcome
    assert (o.reason, o.terminated, o.truncated) == ("RuntimeError", False, False)
    assert crashed.steps[0].observation is None  # the command never answered


def test_no_assistant_turn_is_rejected_and_counted(tmp_path: Path) -> None:
    (tmp_path / "good.traj.json").write_bytes(
        (RUNS / "django__django-11163.traj.json").read_bytes()
    )
    (tmp_path / "empty.traj.json").write_bytes(orjson.dumps(_log()))
    report = convert([tmp_path])
    assert (report.read, report.converted, report.rejected) == (2, 1, 1)
    (bad,) = report.rejected_records
    assert isinstance(bad, Rejected) and Path(bad.path).name == "empty.traj.json"
    assert bad.reason == "mini_swe_agent: no assistant turns in 'messages'"
    assert report.summary()["formats"] == {"mini_swe_agent": 1}


def test_task_id_falls_back_to_the_file_name() -> None:
    doc = _log(_me("```bash\nls\n```"))
    del doc["instance_id"]
    (r,) = iter_bytes(orjson.dumps(doc), path="/runs/astropy__astropy-1.traj.json")
    assert r.trajectory.task.task_id == "astropy__astropy-1"


def test_mini_swe_agent_2_messages() -> None:
    """The 2.x format: commands in extra.actions, results with extra.returncode, a format
    error as its own user message, tool calls answered by id, an exit message."""
    doc = {
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "demo__demo-2",
        "info": {
            "exit_status": "Submitted",
            "submission": "diff --git a/y b/y\n",
            "model_stats": {"instance_cost": 0.1, "api_calls": 4},
            "mini_version": "2.1.0",
            "config": {"model": {"model_name": "anthropic/claude-sonnet-4-5"}},
        },
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Please solve this issue: make y"},
            {
                "role": "assistant",
                "content": "Look first.\n\n```mswea_bash_command\nls\n```",
                "extra": {
                    "actions": [{"command": "ls"}],
                    "cost": 0.01,
                    "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 5}},
                    "timestamp": 1763509960.0,
                },
            },
            {
                "role": "user",
                "content": "<returncode>0</returncode>\n<output>\ny.txt\n</output>",
                "extra": {"returncode": 0, "raw_output": "y.txt\n"},
            },
            {
                "role": "user",
                "content": "Please always provide EXACTLY ONE action in triple backticks, found 0 actions.",
                "extra": {
                    "interrupt_type": "FormatError",
                    "n_actions": 0,
                    "model_response": "Hmm.",
                },
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_1"}, {"id": "call_2"}],
                "extra": {
                    "actions": [
                        {"command": "cat y.txt", "tool_call_id": "call_1"},
                        {"command": "sleep 100", "tool_call_id": "call_2"},
                    ]
                },
            },
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": "<returncode>-1</returncode>\n<output>\n</output>",
                "extra": {"returncode": -1, "exception_type": "TimeoutExpired"},
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "<returncode>0</returncode>\n<output>\nhello\n</output>",
                "extra": {"returncode": 0},
            },
            {
                "role": "assistant",
                "content": "```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
                "extra": {"actions": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]},
            },
            {
                "role": "exit",
                "content": "diff --git a/y b/y\n",
                "extra": {"exit_status": "Submitted", "submission": "diff --git a/y b/y\n"},
            },
        ],
    }
    assert get_adapter("mini_swe_agent").sniff(doc)
    t = _convert(doc)
    assert t.tools_used() == ["bash", INVALID_ACTION_TOOL, "bash", "bash", "bash"]
    ls, bad, cat, sleep, submit = t.steps
    assert ls.thought == "Look first." and ls.action.params == {"command": "ls"}
    assert (ls.observation.output, ls.observation.exit_code) == ("y.txt", 0)
    assert ls.usage.cost_usd == pytest.approx(0.01) and ls.usage.prompt_tokens == 10
    assert ls.timestamp is not None
    assert bad.action.params == {
        "raw": "Hmm.",
        "error": "found 0 bash blocks, expected exactly one",
    }
    assert bad.observation.error == "format_error"
    assert (cat.action.call_id, cat.observation.output) == ("call_1", "hello")  # by call id
    assert (sleep.observation.error, sleep.observation.exit_code) == ("timeout", -1)
    assert submit.observation.output == "diff --git a/y b/y\n"
    assert t.outcome.submission == "diff --git a/y b/y\n" and t.outcome.terminated
    assert t.agent.version == "2.1.0" and t.metadata["trajectory_format"] == "mini-swe-agent-1.1"


def test_other_trajectory_formats_are_not_claimed() -> None:
    adapter = get_adapter("mini_swe_agent")
    assert not adapter.sniff({"trajectory_format": "mini-swe-agent-9", "messages": []})
    assert not adapter.sniff({"messages": [{"role": "user", "content": "hi"}]})
    assert not adapter.sniff([{"trajectory_format": "mini-swe-agent-1"}])

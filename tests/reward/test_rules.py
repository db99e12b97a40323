"""Layer-1 rules on the real fixture logs and on small built trajectories."""

from __future__ import annotations

import pytest

from knowlyr.core import get_profile
from knowlyr.reward.actions import action_facets
from knowlyr.reward.rules import (
    efficiency_reward,
    info_utilization_reward,
    redundancy_reward,
    regression_reward,
    score_rules,
    step_table,
)
from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory
from tests.reward.helpers import call, load_fixture, traj


def _fired(df, column: str, traj_i: int = 0) -> list[int]:
    rows = df.filter((df["traj"] == traj_i) & (df[column] == 0.0))
    return rows["step"].to_list()


def _step_of(t: Trajectory, needle: str, nth: int = 0) -> int:
    """Index of the nth step whose parameters contain ``needle`` (so tests survive re-indexing)."""
    hits = [s.index for s in t.steps if s.action and needle in str(s.action.params)]
    return hits[nth]


def test_redundancy_fires_on_openhands_resolver_repeats():
    trajs = load_fixture("openhands/resolver_output.jsonl")
    dark = trajs[1]  # the dark-mode issue
    df = score_rules(trajs, "coding")
    # open_file(PullRequestViewer.tsx) twice with only a *failed* edit ("No exact match") between
    first_open = _step_of(dark, "open_file('/workspace/src/PullRequestViewer.tsx')")
    reopen = _step_of(dark, "open_file('/workspace/src/PullRequestViewer.tsx')", 1)
    assert (first_open, reopen) == (12, 14)
    fired = _fired(df, "non_redundancy", 1)
    # 8: the same failing App.tsx edit as step 6; 14: the re-open; 16: same failing edit as 15
    assert fired == [8, 14, 16]
    # step 20 re-opens App.css, but step 2 edited it successfully in between: not redundant
    assert _step_of(dark, "open_file('/workspace/src/App.css')", 1) == 20
    assert 20 not in fired
    assert _fired(df, "non_redundancy", 0) == []


def test_redundancy_fires_on_swe_agent_repeated_failed_edit():
    trajs = load_fixture("swe_agent/pydicom__pydicom-1458.traj")
    df = score_rules(trajs, "coding")
    t = trajs[0]
    assert t.steps[6].action.params == t.steps[7].action.params  # the same failing edit twice
    assert _fired(df, "non_redundancy") == [7]
    # step 9 reruns `python reproduce_bug.py` (step 2) after the successful edit at step 8
    assert t.steps[9].action.params == t.steps[2].action.params
    assert df.filter(df["step"] == 9)["non_redundancy"].item() == 1.0


@pytest.mark.parametrize(
    "name",
    [
        "swe_agent/swe-agent__test-repo-i1.traj",
        "swe_agent/6e44b9__sweagenttestrepo-1c2844.traj",
        "openhands/basic.json",
        "openhands/basic_interactions.json",
    ],
)
def test_clean_fixture_logs_fire_no_redundancy_or_regression(name):
    df = score_rules(load_fixture(name), "coding")
    assert df.height > 0
    assert df["non_redundancy"].min() == 1.0
    assert df["non_regression"].min() == 1.0


def test_fixture_categories_come_from_profile_aliases():
    t = load_fixture("swe_agent/pydicom__pydicom-1458.traj")
    table = step_table(t, "coding")
    assert table["cat"].to_list()[:5] == ["write", "write", "execute", "search", "read"]
    # SWE-agent `edit 287:295` applies to the file opened at step 4
    assert table["target"][5] == "pydicom/pixel_data_handlers/numpy_handler.py"


def test_regression_fires_when_swe_agent_edit_restores_region():
    """The real pydicom log plus an edit that puts the region back the way step 1 wrote it."""
    t = load_fixture("swe_agent/pydicom__pydicom-1458.traj")[0]
    steps = list(t.steps[:2])  # create reproduce_bug.py, edit 1:1 with the script
    first_body = steps[1].action.params
    other = call("edit", start_line=1, end_line=1, replacement="print('other')", output="[File]")
    steps.append(other)
    steps.append(
        Step(
            index=3,
            action=ToolCall(tool=steps[1].action.tool, params=first_body),
            observation=Observation(output="[File: /pydicom__pydicom/reproduce_bug.py]"),
        )
    )
    df = score_rules([traj(steps)], "coding")
    assert _fired(df, "non_regression") == [3]


def test_regression_fires_on_openhands_str_replace_editor_undo():
    steps = [
        call("str_replace_editor", command="view", path="/w/a.py", output="x = 1"),
        call(
            "str_replace_editor",
            command="str_replace",
            path="/w/a.py",
            old_str="x = 1",
            new_str="x = 2",
        ),
        call(
            "str_replace_editor",
            command="str_replace",
            path="/w/b.py",
            old_str="x = 2",
            new_str="x = 1",
        ),
        call(
            "str_replace_editor",
            command="str_replace",
            path="/w/a.py",
            old_str="x = 2",
            new_str="x = 1",
        ),
        call("str_replace_editor", command="undo_edit", path="/w/a.py"),
    ]
    df = score_rules([traj(steps)], "coding")
    assert _fired(df, "non_regression") == [3, 4]  # step 2 edits another file: not a regression


def test_regression_our_edit_file_and_failed_edits_do_not_count():
    steps = [
        call("edit_file", path="a.py", old="foo", new="bar"),
        call(
            "edit_file",
            path="a.py",
            old="bar",
            new="foo",
            output="Error: old not found",
            exit_code=1,
        ),
        call("edit_file", path="a.py", old="bar", new="foo"),
    ]
    assert regression_reward(steps, profile="coding") == [1.0, 1.0, 0.0]
    failed_first = [call("edit_file", path="a.py", old="foo", new="bar", exit_code=1),
                    call("edit_file", path="a.py", old="bar", new="foo")]  # fmt: skip
    assert regression_reward(failed_first, profile="coding") == [1.0, 1.0]


def test_redundancy_identical_call_and_reread():
    steps = [
        call("read_file", path="a.py", output="def f(): pass"),
        call("read_file", path="a.py", output="def f(): pass"),  # re-read, nothing changed
        call("edit_file", path="b.py", old="1", new="2"),  # another file
        call("read_file", path="a.py"),  # still redundant: a.py untouched
        call("edit_file", path="a.py", old="f", new="g"),
        call("read_file", path="a.py"),  # a.py changed: fine
        call("bash", command="pytest -q"),
        call("bash", command="pytest -q"),  # nothing changed since the last run
        call("edit_file", path="a.py", old="g", new="h"),
        call("bash", command="pytest -q"),  # re-run after an edit: fine
    ]
    assert redundancy_reward(steps, profile="coding") == [1, 0, 1, 0, 1, 1, 1, 0, 1, 1]


def test_unknown_tools_fall_back_to_generic_heuristic():
    f = action_facets(get_profile("coding"), "view_document", {"path": "x.md"})
    assert (f.tool, f.category, f.target) == ("view_document", "read", "x.md")
    steps = [call("view_document", path="x.md"), call("view_document", path="x.md")]
    assert redundancy_reward(steps, profile="generic") == [1.0, 0.0]


def test_info_utilization_uses_revealed_tokens():
    steps = [
        call("grep", pattern="division", output="tests/missing_colon.py:4: def division"),
        call("read_file", path="tests/missing_colon.py"),  # uses the revealed file name
        call("read_file", path="src/made_up.py"),  # ignores what was revealed
        call("bash", command="ls"),  # nothing salient
    ]
    assert info_utilization_reward(steps, profile="coding") == [None, 1.0, 0.0, None]


def test_info_utilization_on_swe_agent_log():
    t = load_fixture("swe_agent/swe-agent__test-repo-i1.traj")
    df = score_rules(t, "coding")
    # step 1 opens tests/missing_colon.py, the path find_file revealed at step 0
    assert df["info_utilization"][1] == 1.0
    if t[0].task.instruction:  # the issue text names missing_colon.py: step 0 uses it
        assert df["info_utilization"][0] == 1.0


def test_info_utilization_counts_the_instruction_as_revealed():
    t = traj([call("grep", pattern="parse_date"), call("read_file", path="utils/dates.py")])
    t.task.instruction = "Fix parse_date in the utils package"
    # step 0 uses the instruction's identifier; step 1 guesses a path nothing revealed
    assert score_rules([t], "coding")["info_utilization"].to_list() == [1.0, 0.0]


def test_efficiency_reference_and_batch_median():
    steps = [call("bash", command=f"echo {i}") for i in range(4)]
    assert efficiency_reward(steps, reference_steps=2) == [1.0, 1.0, 2 / 3, 0.5]
    with pytest.raises(ValueError, match="reference_steps must be positive"):
        efficiency_reward(steps, reference_steps=0)
    short = traj([call("bash", command="a"), call("bash", command="b")], task_id="same")
    long = traj([call("bash", command=str(i)) for i in range(6)], task_id="same")
    alone = traj([call("bash", command="x")], task_id="other")
    df = score_rules([short, long, alone], "coding")
    assert df.filter(df["traj"] == 0)["efficiency"].to_list() == [1.0, 1.0]
    assert df.filter(df["traj"] == 1)["efficiency"].to_list() == [1, 1, 1, 1, 4 / 5, 4 / 6]
    # alone on its task: the coding profile's typical run length is the reference
    assert df.filter(df["traj"] == 2)["reference"].to_list() == [30.0]
    df = score_rules([short, long, alone], "generic")
    assert df.filter(df["traj"] == 2)["efficiency"].to_list() == [None]  # no reference at all


def test_task_field_reference_steps():
    t = Trajectory(task=TaskInfo(task_id="r", reference_steps=1),
                   steps=[call("bash", command="a"), call("bash", command="b", index=1)])  # fmt: skip
    assert score_rules([t], "coding")["efficiency"].to_list() == [1.0, 0.5]


def test_an_openhands_run_stopped_at_its_iteration_cap_with_failing_commands_scores_low():
    """The case the rules used to score 1.000: an OpenHands evaluation row whose agent ran
    12 failing commands after an edit and was stopped at its iteration cap."""
    import orjson

    from knowlyr.recorder import get_adapter
    from knowlyr.reward.engine import RewardEngine

    events = [{"id": 0, "source": "user", "action": "message",
               "args": {"content": "Fix the bug in app.py"}}]  # fmt: skip

    def run(i: int, cmd: str, out: str, code: int) -> None:  # an action and its observation
        events.append(
            {
                "id": 2 * i + 1,
                "source": "agent",
                "action": "run",
                "args": {"command": cmd, "thought": "try again"},
            }
        )
        events.append({"id": 2 * i + 2, "source": "agent", "observation": "run", "cause": 2 * i + 1,
                       "content": out, "extras": {"command": cmd, "metadata": {"exit_code": code}}})  # fmt: skip

    run(0, "sed -i 's/a/b/' app.py", "", 0)
    for i in range(1, 13):
        run(i, f"python -m pytest -q tests/test_app.py -k case{i}", "1 failed", 1)
    row = {"instance_id": "x__y-1", "instruction": "Fix the bug in app.py", "history": events,
           "error": "RuntimeError: Agent reached maximum iteration in headless mode. "
                    "Current iteration: 13, max iteration: 13",
           "metadata": {"agent_class": "CodeActAgent", "max_iterations": 13}}  # fmt: skip
    traj = get_adapter("openhands_output").convert(orjson.loads(orjson.dumps(row)))
    assert len(traj.steps) == 13
    (r,) = RewardEngine("coding").score([traj])
    rubrics = r.step_rubrics
    assert [d["command_success"] for d in rubrics[1:]] == [0.0] * 12
    assert rubrics[-1]["within_limits"] == 0.0  # stopped by the cap, not by itself
    assert all(d["efficiency"] == 1.0 for d in rubrics)  # 13 steps: within the typical 30
    assert r.total < 0.9
    # the same run with its tests passing and a finish of its own scores at the top
    for e in events:
        if e.get("observation") == "run" and e["content"] == "1 failed":
            e.update(content="3 passed", extras={**e["extras"], "metadata": {"exit_code": 0}})
    events.append({"id": 99, "source": "agent", "action": "finish", "args": {}})
    del row["error"]
    clean = get_adapter("openhands_output").convert(orjson.loads(orjson.dumps(row)))
    (good,) = RewardEngine("coding").score([clean])
    assert good.total > 0.93 and good.total - r.total > 0.05

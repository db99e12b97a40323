"""File edits as diffs, whatever tool the agent edited with (real logs and our own tools)."""

from __future__ import annotations

import polars as pl

from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory
from knowlyr.view.pages import step_diffs


def stored(demo, task_id: str) -> Trajectory:
    (tid,) = demo.store.read("trajectories", filter=pl.col("task_id") == task_id)["id"]
    return demo.store.get_trajectory(tid)


def test_real_logs_edits(demo):
    # SWE-agent `edit 4:4` on the open file: the new line of that region
    swe = step_diffs(stored(demo, "swe-agent__test-repo-i1"))
    (edit,) = swe[2]
    assert edit.path == "tests/missing_colon.py" and edit.title == "replace lines 4:4"
    assert edit.lines == [("add", "+def division(a: float, b: float) -> float:")]
    assert all(d == [] for i, d in enumerate(swe) if i != 2)
    # OpenHands str_replace_editor create: the whole new file
    (create,) = step_diffs(stored(demo, "2469bd16b6be094f"))[0]
    assert create.title == "create" and create.lines[0] == ("head", "--- a/workspace/game_2048.py")
    assert sum(kind == "add" for kind, _ in create.lines) == 117
    # typing into a web page is not a file edit
    assert all(d == [] for d in step_diffs(stored(demo, "browser-001")))


def _traj(*actions: tuple[str, dict]) -> Trajectory:
    return Trajectory(
        task=TaskInfo(task_id="t", domain="coding"),
        steps=[
            Step(index=i, action=ToolCall(tool=tool, params=params), observation=Observation())
            for i, (tool, params) in enumerate(actions)
        ],
    )


def test_whole_file_writes_diff_against_what_the_trajectory_wrote_before():
    diffs = step_diffs(
        _traj(
            ("write_file", {"path": "m.py", "content": "a = 1\nb = 2\nc = 3\n"}),
            ("edit_file", {"path": "m.py", "old_str": "b = 2", "new_str": "b = 20"}),
            ("bash", {"command": "cat > m.py <<'EOF'\na = 1\nb = 20\nc = 30\nEOF"}),
            ("bash", {"command": "python m.py"}),
        )
    )
    assert diffs[0][0].title == "create"
    assert [t for k, t in diffs[1][0].lines if k in ("add", "del")] == ["-b = 2", "+b = 20"]
    # the heredoc rewrite is diffed against the content after the replacement: only c changed
    (rewrite,) = diffs[2]
    assert rewrite.title == "write (whole file)" and rewrite.path == "m.py"
    assert [t for k, t in rewrite.lines if k in ("add", "del")] == ["-c = 3", "+c = 30"]
    assert diffs[3] == []

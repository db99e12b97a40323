"""A generated corpus exercising every action shape the rule layer understands.

Small pools of files, texts and commands so that repeats, reverted edits, re-reads and
revealed tokens happen often: our tools, OpenHands ``str_replace_editor`` / ``edit`` /
agentskills cells, SWE-agent tools (as the recorder converts them) and SWE-agent command
lines inside shell calls, unknown tools, message steps, missing observations, failed writes,
non-string parameter values, key orders, empty trajectories and non-ASCII text.
"""

from __future__ import annotations

import random

from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory

_FILES = ["a.py", "src/b.py", "pkg/mod_1/c.py", "/w/app/d_2.ts", "über.py"]
_TEXTS = ["x = 1", "x = 2", "return self.value", "def f_1(): pass", "", "ünïcode 42"]
_OUTPUTS = [
    "ok",
    "",
    "ERROR: file not found",
    "Error: No exact match found for old",
    "[Error] something",
    "No replacement was performed.",
    "Your proposed edit has introduced new syntax error(s)",
    "cat: x: No such file or directory",
    "The path /w/app is not a valid file",
    "tests/test_a.py:12: AssertionError value_3 mod_1.c",
    "found 3 matches in pkg/mod_1/c.py and src/b.py",
    "line 1234 of über.py: ident_7 x.y.z",
    "end_of_edit",
    "===== 2 failed, 3 passed in 0.1s =====",
    "Ran 4 tests\n\nOK",
    'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad',
    "FAILED (failures=1)",
]
_THOUGHTS = [
    "",
    "Let me look at the file.",
    "The test still fails after the edit.",
    "Wait, that is not the right file.",
    "That was a mistake; I'll undo it.",
    "Unexpectedly, the output changed.",
    "The await keyword is fine here.",  # 'wait' inside a word is no setback
]


def _action(rng: random.Random) -> ToolCall | None:
    f, g = rng.choice(_FILES), rng.choice(_FILES)
    old, new = rng.choice(_TEXTS), rng.choice(_TEXTS)
    n = rng.randrange(1, 6)
    shapes = [
        lambda: ("read_file", {"path": f}),
        lambda: ("edit_file", {"path": f, "old": old, "new": new}),
        lambda: ("edit_file", {"new": new, "path": f, "old": old}),  # same call, other key order
        lambda: ("write_file", {"path": f, "content": new}),
        lambda: ("bash", {"command": rng.choice(["pytest -q", "ls", f"python {f}"])}),
        lambda: ("grep", {"pattern": rng.choice(["value", "f_1"]), "path": "src"}),
        lambda: ("submit", {}),
        lambda: ("str_replace_editor", {"command": "view", "path": f}),
        lambda: ("str_replace_editor", {"command": "view", "path": f, "view_range": [1, n]}),
        lambda: ("str_replace_editor",
                 {"command": "str_replace", "path": f, "old_str": old, "new_str": new}),
        lambda: ("str_replace_editor", {"command": "create", "path": f, "file_text": new}),
        lambda: ("str_replace_editor",
                 {"command": "insert", "path": f, "insert_line": n, "new_str": new}),
        lambda: ("str_replace_editor", {"command": "undo_edit", "path": f}),
        lambda: ("edit", {"path": f, "content": new, "start": n, "end": n + 1}),
        lambda: ("run_ipython", {"code": f"open_file('{f}')"}),
        lambda: ("run_ipython", {"code": f"edit_file_by_replace('{f}', {old!r}, {new!r})"}),
        lambda: ("run_ipython",
                 {"code": f"edit_file_by_replace('{f}', to_replace={old!r}, new_content={new!r})"}),
        lambda: ("run_ipython", {"code": f"create_file('{g}')"}),
        lambda: ("run_ipython", {"code": f"search_dir('f_1', '{g}')"}),
        lambda: ("run_ipython", {"code": "print(1)"}),
        lambda: ("open", {"path": f}),
        lambda: ("open", {"path": f, "line_number": n}),
        lambda: ("edit", {"start_line": n, "end_line": n, "replacement": new}),
        lambda: ("edit", {"search": old, "replace": new, "replace-all": rng.random() < 0.5}),
        lambda: ("create", {"path": g}),
        lambda: ("goto", {"line_number": n}),
        lambda: ("scroll_down", {}),
        lambda: ("scroll_up", {}),
        lambda: ("find_file", {"file_name": g}),
        lambda: ("search_dir", {"search_term": "value_3", "dir": "src"}),
        lambda: ("bash", {"command": f"open {f}"}),
        lambda: ("bash", {"command": f"edit {n}:{n}\n{new}\nend_of_edit"}),
        lambda: ("bash", {"command": f"edit '{old}' '{new}'"}),
        lambda: ("bash", {"command": f"cat {f}"}),
        lambda: ("bash", {"command": f"head -n 5 {f}"}),
        lambda: ("bash", {"command": "goto 10"}),
        lambda: ("bash", {"command": f"create {g}"}),
        lambda: ("swe-agent", {"command": "scroll_down"}),
        lambda: ("bash", {"command": rng.choice(["  \n open " + f, "\tcat " + f, "", "exit", "ls -la"])}),
        lambda: ("bash", {"command": "ls", "path": f}),
        lambda: ("execute_bash", {"command": f"pytest {f}", "timeout": "30"}),
        lambda: ("bash", {"command": rng.choice([f"python reproduce_{n}.py", "python -m pytest -q tests", "./runtests.py x", f"python -c 'import {n}'"])}),
        lambda: ("bash", {"command": rng.choice([f"sed -i 's/a/b/' {f}", f"cat <<'EOF' > {f}\n{new}\nEOF", f"echo '{new}' >> {f}", "git apply fix.patch", f"cat {f} > /dev/null"])}),
        lambda: ("invalid_action", {"raw": "two blocks", "error": "found 2 bash blocks, expected exactly one"}),
        lambda: ("view_document", {"path": f}),
        lambda: ("query_db", {"id": n, "table": "orders", "strict": True, "limit": None}),
        lambda: ("query_db", {"id": float(n), "table": "orders", "strict": True, "limit": None}),
        lambda: ("call_api", {"payload": {"k": [n, "v"]}, "tags": ["a", f]}),
        lambda: ("finish", {"message": f"done with {f}"}),
    ]  # fmt: skip
    if rng.random() < 0.05:
        return None  # a message step
    tool, params = rng.choice(shapes)()
    return ToolCall(tool=tool, params=params)


def make_corpus(n_traj: int, *, seed: int = 0) -> list[Trajectory]:
    """``n_traj`` trajectories of 0 to 24 steps over a few task ids."""
    rng = random.Random(seed)
    out = []
    for t in range(n_traj):
        steps = []
        for i in range(rng.choice([0, 1, 3, 8, 12, 20, 24])):
            action = _action(rng)
            r = rng.random()
            if r < 0.05:
                obs = None
            else:
                code = rng.choice([0, 0, 0, 0, 1, None, 2])
                error = "boom" if rng.random() < 0.03 else None
                obs = Observation(output=rng.choice(_OUTPUTS), exit_code=code, error=error)
            message = "thinking about it" if action is None else None
            thought = rng.choice(_THOUGHTS)
            steps.append(
                Step(index=i, thought=thought, action=action, message=message, observation=obs)
            )
        meta = {"reference_steps": rng.choice([3, 12, 0, "x"])} if t % 3 == 0 else {}
        extra = {"reference_steps": 5} if t % 7 == 0 else {}
        instruction = rng.choice(
            ["", "Fix f_1 in pkg/mod_1/c.py", "Make value_3 work (issue 1234)"]
        )
        task = TaskInfo(task_id=f"task{t % 5}", instruction=instruction, metadata=meta, **extra)
        outcome = rng.choice(
            [Outcome(), Outcome(truncated=True), Outcome(reason="LimitsExceeded"),
             Outcome(reason="Submitted"), Outcome(success=True, reason="cost limit")]
        )  # fmt: skip
        out.append(Trajectory(id=f"c{t}", task=task, steps=steps, outcome=outcome))
    return out

"""SWE-agent ``.traj`` files that kept only their ``history`` (generated here in SWE-agent's
shape: every history message has a ``role`` and the ``agent`` that wrote it)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from knowlyr.errors import UnknownFormatError
from knowlyr.recorder import Converted, detect_format, iter_records

HISTORY = [
    {"role": "system", "content": "SETTING: You are an autonomous programmer.", "agent": "primary"},
    {
        "role": "user",
        "content": "We're currently solving the following issue within our repository.\n"
        "ISSUE:\nDivision by zero crashes calc\n\nINSTRUCTIONS:\nEdit the code.",
        "agent": "primary",
    },
    {
        "role": "assistant",
        "content": 'Let me find the file.\n```\nfind_file "calc.py"\n```',
        "thought": "Let me find the file.",
        "action": 'find_file "calc.py"\n',
        "agent": "primary",
    },
    {
        "role": "user",
        "content": 'Found 1 matches for "calc.py":\n/repo/calc.py',
        "agent": "primary",
    },
    {
        "role": "assistant",
        "content": "Open it.\n```\nopen calc.py 10\n```",
        "thought": "Open it.",
        "action": "open calc.py 10\n",
        "agent": "primary",
    },
    {"role": "user", "content": "[File: /repo/calc.py (20 lines total)]", "agent": "primary"},
]


@pytest.mark.parametrize("with_info", [False, True])
def test_a_traj_with_only_history_is_detected_and_converted(
    tmp_path: Path, with_info: bool
) -> None:
    doc: dict = {"history": HISTORY}
    if with_info:
        doc["info"] = {"exit_status": "submitted", "submission": "diff --git a/calc.py"}
    p = tmp_path / "calc__calc-3.traj"
    p.write_bytes(orjson.dumps(doc))
    assert detect_format(p) == "swe_agent"
    (r,) = iter_records([p])
    assert isinstance(r, Converted), r
    t = r.trajectory
    assert t.task.task_id == "calc__calc-3"
    assert t.task.instruction == "Division by zero crashes calc"
    assert [s.action.model_dump(exclude_none=True) for s in t.steps] == [
        {"tool": "find_file", "params": {"file_name": "calc.py"}},
        {"tool": "open", "params": {"path": "calc.py", "line_number": 10}},
    ]
    assert t.steps[0].observation.output.startswith('Found 1 matches for "calc.py"')
    assert t.outcome.reason == ("submitted" if with_info else None)


@pytest.mark.parametrize(
    "doc",
    [
        # chat-like history without SWE-agent's agent tag
        {"history": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        # an OpenHands output row: its history is events, not messages
        {"instance_id": "x", "history": [{"id": 1, "action": "run", "args": {"command": "ls"}}]},
    ],
)
def test_other_history_files_are_not_taken_for_swe_agent(tmp_path: Path, doc: dict) -> None:
    p = tmp_path / "log.json"
    p.write_bytes(orjson.dumps(doc))
    try:
        fmt = detect_format(p)
    except UnknownFormatError:
        fmt = None
    assert fmt != "swe_agent"

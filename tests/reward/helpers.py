"""Shared helpers: the real fixture logs as Trajectories, and small trajectory builders."""

from __future__ import annotations

import json
from pathlib import Path

from knowlyr.trajectory import AgentInfo, Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
_SWE_COMMANDS = {"open", "edit", "create", "find_file", "search_dir", "search_file", "goto",
                 "scroll_up", "scroll_down", "submit"}  # fmt: skip
_OH_META = {"action", "thought", "is_confirmed", "action_risk", "keep_prompt", "kernel_init_code",
            "confirmation_state", "security_risk", "blocking", "hidden", "impl_source"}  # fmt: skip


def load_fixture(name: str) -> list[Trajectory]:
    """Read a fixture log with ``knowlyr.recorder`` when it exists, else with a small reader."""
    path = FIXTURES / name
    try:
        from knowlyr.recorder import Converted, iter_records
    except ImportError:
        return _read(path)
    converted = [r.trajectory for r in iter_records([path]) if isinstance(r, Converted)]
    return converted or _read(path)  # formats the recorder does not read yet


def _read(path: Path) -> list[Trajectory]:
    if path.suffix == ".traj":
        d = json.loads(path.read_text())
        steps = []
        for i, t in enumerate(d["trajectory"]):
            action = t["action"].strip()
            word, _, rest = action.partition(" ")
            if word in _SWE_COMMANDS:
                call = ToolCall(tool=word, params={"args": rest} if rest else {})
            else:
                call = ToolCall(tool="bash", params={"command": action})
            steps.append(
                Step(
                    index=i,
                    thought=t.get("thought", ""),
                    action=call,
                    observation=Observation(output=t["observation"]),
                )
            )
        task = TaskInfo(task_id=path.stem, domain="coding", instruction="")
        ok = d["info"].get("exit_status") == "submitted"
        return [
            Trajectory(
                task=task,
                agent=AgentInfo(name="swe-agent"),
                steps=steps,
                outcome=Outcome(success=ok),
            )
        ]
    if path.suffix == ".jsonl":
        out = []
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            out.append(_openhands(rec["history"], rec["instruction"], f"{path.stem}-{len(out)}"))
        return out
    return [_openhands(json.loads(path.read_text()), "", path.stem)]


def _openhands(events: list[dict], instruction: str, task_id: str) -> Trajectory:
    steps: list[Step] = []
    for e in events:
        if "action" in e:
            if e["action"] == "message" and e.get("source", "user") == "user" and not steps:
                instruction = instruction or (e.get("args") or e).get("content", "")
                continue
            args = e.get("args") or {k: v for k, v in e.items() if k not in _OH_META}
            params = {k: v for k, v in args.items() if k not in _OH_META}
            steps.append(
                Step(
                    index=len(steps),
                    thought=(e.get("args") or e).get("thought", ""),
                    action=ToolCall(tool=e["action"], params=params),
                )
            )
        elif steps and steps[-1].observation is None:
            extras = e.get("extras") or e
            code = extras.get("exit_code")
            steps[-1].observation = Observation(
                output=e.get("content", ""), exit_code=code if code not in (-1,) else None
            )
    return Trajectory(
        task=TaskInfo(task_id=task_id, domain="coding", instruction=instruction),
        agent=AgentInfo(name="openhands"),
        steps=steps,
    )


def call(tool: str, index: int = 0, output: str = "", exit_code: int | None = 0, **params) -> Step:
    return Step(
        index=index,
        action=ToolCall(tool=tool, params=params),
        observation=Observation(output=output, exit_code=exit_code),
    )


def traj(steps: list[Step], task_id: str = "t", **kw) -> Trajectory:
    for i, s in enumerate(steps):
        s.index = i
    return Trajectory(task=TaskInfo(task_id=task_id, domain="coding"), steps=steps, **kw)

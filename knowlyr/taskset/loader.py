"""Load your own tasks: one :class:`~knowlyr.taskset.Task` as JSON per line.

A coding task needs ``files``, ``hidden_tests`` and a ``test_command`` that prints a summary
(the bundled runner's ``N passed, M failed`` line or pytest's ``== 3 passed, 1 failed in
0.1s ==``); a conversation or knowledge task needs ``expected_facts`` (and ``data`` the env
reads: a ``kb`` list for knowledge tasks, ``users`` / ``orders`` for conversation). A
``reference_solution`` lets :class:`~knowlyr.agents.ExpertAgent` replay it. Bad lines are
returned with the reason, never dropped silently, and never stop the good ones.

Example:
    >>> loaded = load_tasks("my_tasks.jsonl")  # doctest: +SKIP
    >>> env = knowlyr.make("knowlyr/sandbox", tasks=loaded.tasks)  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import ValidationError

from knowlyr.taskset.suite import register_tasks, split_of
from knowlyr.taskset.swebench import Rejected, SWEBenchLoad, jsonl_lines
from knowlyr.taskset.task import Task

__all__ = ["TaskLoad", "load_tasks"]

TaskLoad = SWEBenchLoad  # the same shape: ``tasks`` and ``rejected``


def load_tasks(path: str | Path, *, register: bool = True) -> TaskLoad:
    """Read Task JSON lines; the split is recomputed from each id unless the line sets one.

    Args:
        path: the JSONL file.
        register: make the tasks findable by id (:func:`knowlyr.taskset.get_task`).

    Returns:
        ``tasks`` and ``rejected`` (line number, task id, reason naming the field).

    Raises:
        ConfigError: the file cannot be read.
    """
    out = TaskLoad()
    seen: set[str] = set()
    for n, raw in jsonl_lines(path, "task file"):
        tid = None
        try:
            rec = orjson.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("line is not a JSON object")
            tid = rec.get("task_id")
            task = Task.model_validate(rec)
            if task.task_id in seen:
                raise ValueError(f"task_id {task.task_id!r} appears twice in {path}")
            if "split" not in rec:
                task.split = split_of(task.task_id)
            if task.domain == "coding" and task.hidden_tests and not task.test_command:
                raise ValueError("a coding task with hidden_tests needs a test_command")
        except ValidationError as e:
            errs = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or '<root>'}: {err['msg']}" for err in e.errors()
            )
            out.rejected.append(Rejected(n, tid, errs))
            continue
        except (ValueError, orjson.JSONDecodeError) as e:
            out.rejected.append(Rejected(n, tid, str(e)))
            continue
        seen.add(task.task_id)
        out.tasks.append(task)
    if register:
        register_tasks(out.tasks)
    return out

"""Task definitions, built-in suites, the SWE-bench loader, seeded sampling and splits.

Built-in suites (outcomes are checked by code, never by string luck):

- ``coding``: 264 generated Python repair / implementation tasks; hidden tests run in the
  sandbox after ``submit``.
- ``conversation``: customer service over a seeded order / account database (families
  ``order_status``, ``latest_order``, ``refund``, ``address_change``, ``return_policy``,
  ``cancel_order``, ``item_order``).
- ``engineering``, ``advisory``, ``discussion``: questions grounded in a generated knowledge
  base (and, for engineering, a small repository with a git history).

Example:
    >>> from knowlyr.taskset import get_suite, sample, split_of
    >>> tasks = sample("coding", 5, seed=0, split="heldout")
    >>> all(split_of(t.task_id) == "heldout" for t in tasks)
    True
    >>> len(get_suite("coding")) >= 200
    True
"""

from __future__ import annotations

from knowlyr.taskset.suite import (
    HELDOUT_FRACTION,
    Suite,
    get_suite,
    get_task,
    list_suites,
    register_suite,
    register_tasks,
    sample,
    split_of,
)
from knowlyr.taskset.task import Split, Task

__all__ = [
    "HELDOUT_FRACTION",
    "Split",
    "Suite",
    "Task",
    "get_suite",
    "get_task",
    "list_suites",
    "load_swebench",
    "load_tasks",
    "register_suite",
    "register_tasks",
    "sample",
    "split_of",
]


def __getattr__(name: str):
    if name == "load_swebench":
        from knowlyr.taskset.swebench import load_swebench

        return load_swebench
    if name == "load_tasks":
        from knowlyr.taskset.loader import load_tasks

        return load_tasks
    raise AttributeError(f"module 'knowlyr.taskset' has no attribute {name!r}")


from knowlyr import envs as _envs  # noqa: E402, F401  registers the browser suite (knowlyr.envs)

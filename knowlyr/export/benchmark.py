"""Benchmark export and task splits.

:func:`export_benchmark` writes held-out tasks with their reference outcome (what the expert
or reference solution achieved), so an evaluation can be re-run and compared later.
:func:`split_by_task` splits any exported dataset by task id, with the task suites' own
rule (:func:`knowlyr.taskset.split_of`: by instruction text), so no task is in two splits and
a suite's held-out tasks stay held out.

Example:
    >>> from knowlyr.taskset import get_suite
    >>> tasks = get_suite("conversation").tasks(split="heldout", family="order_status")[:5]
    >>> export_benchmark(tasks).dataset.num_rows
    5
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from knowlyr.export.common import (
    DatasetCard,
    ExportResult,
    as_trajectories,
    reward_stats,
    trajectory_reward,
)
from knowlyr.trajectory import TaskInfo, Trajectory

__all__ = ["export_benchmark", "split_by_task"]


def export_benchmark(
    tasks: Iterable[TaskInfo],
    *,
    references: Iterable[Trajectory | Mapping[str, Any]] | None = None,
    only_heldout: bool = False,
) -> ExportResult:
    """Held-out tasks with reference outcomes as a ``datasets.Dataset``.

    Args:
        tasks: tasks (:class:`knowlyr.taskset.Task` or any :class:`TaskInfo`).
        references: reference trajectories (e.g. the expert's); the best one per task gives
            ``reference_success`` / ``reference_reward`` / ``reference_steps``.
        only_heldout: keep only tasks in the ``heldout`` split (others are listed in
            ``rejected``).

    Tasks carrying a ``reference_solution`` / ``reference_answer`` (the built-in suites) keep
    them in the row.
    """
    from datasets import Dataset

    from knowlyr.taskset import split_of

    best: dict[str, Trajectory] = {}
    for t in as_trajectories(references or []):
        cur = best.get(t.task.task_id)
        if cur is None or (bool(t.outcome.success), trajectory_reward(t)) > (
            bool(cur.outcome.success),
            trajectory_reward(cur),
        ):
            best[t.task.task_id] = t
    rows: list[dict[str, Any]] = []
    rejected: list[tuple[str, str]] = []
    for task in tasks:
        split = getattr(task, "split", None) or split_of(task.task_id)
        if only_heldout and split != "heldout":
            rejected.append((task.task_id, f"in split {split!r}, not heldout"))
            continue
        ref = best.get(task.task_id)
        extra = task.model_dump(mode="json")
        rows.append(
            {
                "task_id": task.task_id,
                "domain": task.domain,
                "suite": task.suite,
                "family": extra.get("family"),
                "split": split,
                "instruction": task.instruction,
                "reference_solution": orjson.dumps(extra.get("reference_solution") or []).decode(),
                "reference_answer": extra.get("reference_answer"),
                "reference_trajectory_id": ref.id if ref else None,
                "reference_success": bool(ref.outcome.success) if ref else None,
                "reference_reward": trajectory_reward(ref) if ref else None,
                "reference_steps": len(ref.steps) if ref else None,
                "task": orjson.dumps(extra).decode(),
            }
        )
    ds = Dataset.from_list(rows) if rows else Dataset.from_dict({"task_id": []})
    refs = [r["reference_reward"] for r in rows if r["reference_reward"] is not None]
    card = DatasetCard(
        kind="benchmark",
        rows=len(ds),
        trajectories=len(refs),
        tasks=len(ds),
        rejected={"not heldout": len(rejected)} if rejected else {},
        reward=reward_stats(refs),
        params={"only_heldout": only_heldout},
    )
    return ExportResult(dataset=ds, card=card, rejected=rejected)


def split_by_task(
    result: ExportResult | Any,
    *,
    heldout_fraction: float = 0.2,
    names: tuple[str, str] = ("train", "test"),
) -> Any:
    """Split an export (or a dataset with a ``task_id`` column) into a ``DatasetDict`` by task.

    A task lands in ``names[1]`` when :func:`knowlyr.taskset.split_of` puts it in ``heldout``;
    every row of a task goes to the same split. The card (when given an
    :class:`ExportResult`) records the split sizes.
    """
    from datasets import DatasetDict

    from knowlyr.taskset import split_of

    ds = result.dataset if isinstance(result, ExportResult) else result
    if "task_id" not in ds.column_names:
        raise ValueError("split_by_task needs a `task_id` column; export with knowlyr.export")
    held = [split_of(t, heldout_fraction=heldout_fraction) == "heldout" for t in ds["task_id"]]
    out = DatasetDict(
        {
            names[0]: ds.select([i for i, h in enumerate(held) if not h]),
            names[1]: ds.select([i for i, h in enumerate(held) if h]),
        }
    )
    if isinstance(result, ExportResult):
        result.card.splits = {k: v.num_rows for k, v in out.items()}
    return out

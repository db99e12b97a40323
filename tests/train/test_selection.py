"""Restart selection: the validation split by task and the lowest-validation-loss pick."""

from __future__ import annotations

import math

import pytest
from datasets import Dataset

from knowlyr.errors import ConfigError
from knowlyr.taskset import split_of
from knowlyr.train.selection import restart, select_best, validation_split


def _rows(n_tasks: int, per_task: int = 2) -> Dataset:
    ids = [f"conversation-order_status-{i:05d}" for i in range(n_tasks) for _ in range(per_task)]
    return Dataset.from_dict({"task_id": ids, "row": list(range(len(ids)))})


def test_validation_split_keeps_tasks_whole_and_is_deterministic() -> None:
    ds = _rows(1000)
    train, val = validation_split(ds, 0.1)
    assert len(train) + len(val) == len(ds)
    assert not set(train["task_id"]) & set(val["task_id"])
    assert 70 <= len(set(val["task_id"])) <= 130  # ~10% of 1000 tasks
    again_train, again_val = validation_split(ds, 0.1)
    assert again_val["row"] == val["row"] and again_train["row"] == train["row"]


def test_validation_split_is_not_the_suites_heldout_split() -> None:
    # An SFT export only holds train-split tasks: the validation split must still find some.
    train_tasks = [f"conversation-order_status-{i:05d}" for i in range(3000)]
    train_tasks = [t for t in train_tasks if split_of(t) == "train"][:500]
    _, val = validation_split(Dataset.from_dict({"task_id": train_tasks}), 0.1)
    assert 25 <= len(val) <= 75


def test_validation_split_rejects_bad_input_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"in \[0, 1\)"):
        validation_split(_rows(10), 1.0)
    with pytest.raises(ConfigError, match="task_id"):
        validation_split(Dataset.from_dict({"x": [1, 2]}), 0.1)
    with pytest.raises(ConfigError, match="export more tasks or set validation_fraction=0"):
        validation_split(_rows(1), 0.1)
    train, val = validation_split(_rows(3), 0.0)
    assert len(train) == 6 and len(val) == 0


def test_select_best_takes_the_lowest_finite_metric() -> None:
    runs = [{"eval_loss": 0.045}, {"eval_loss": 0.003}, {"eval_loss": 0.003}, {"train_loss": 0.0}]
    assert select_best(runs) == 1  # ties go to the earliest restart
    assert select_best([{"eval_loss": math.nan}, {"eval_loss": 0.5}]) == 1
    assert select_best([{"acc": 0.2}, {"acc": 0.1}], key="acc") == 1
    with pytest.raises(ConfigError, match="validation_fraction > 0"):
        select_best([{"train_loss": 0.1}, {"eval_loss": math.inf}])


def test_restart_stops_at_the_target_and_otherwise_keeps_the_lowest() -> None:
    losses = {0: 0.046, 1: 0.02, 2: 0.003, 3: 0.001}
    ran: list[int] = []

    def run(seed: int) -> dict[str, float]:
        ran.append(seed)
        return {"eval_loss": losses[seed]}

    best, results = restart(run, range(4), lambda m: m, target=0.01)
    assert ran == [0, 1, 2] and best == 2 and len(results) == 3  # seed 3 never trained
    ran.clear()
    best, results = restart(run, range(4), lambda m: m, target=None)
    assert ran == [0, 1, 2, 3] and best == 3
    ran.clear()
    assert restart(run, [1, 0], lambda m: m, target=0.0001) == (
        0,
        [{"eval_loss": 0.02}, {"eval_loss": 0.046}],
    )
    with pytest.raises(ConfigError, match="at least one seed"):
        restart(run, [], lambda m: m)

"""Model selection over restarts: a validation split by task and the best-by-validation pick.

Training a tiny model from scratch is partly a matter of seeds: on the conversation suite a
tiny Qwen2 either learns to read the tool's answer or settles on a plateau that copies the ids
and guesses the rest (most seeds at 2x64, a few at 2x128). Training seeds until the loss on
held-back tasks says one has learned, and keeping the lowest, makes the result dependable
without touching the test tasks.

Example:
    >>> train, val = validation_split(export.dataset, fraction=0.1)  # doctest: +SKIP
    >>> best, runs = restart(lambda seed: train_one(seed, train, val), seeds=range(6),
    ...                      metrics=lambda r: r.metrics, target=0.01)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from knowlyr.errors import ConfigError

__all__ = ["VALIDATION_METRIC", "restart", "select_best", "validation_split"]

T = TypeVar("T")

VALIDATION_METRIC = "eval_loss"
_SALT = b"knowlyr-validation\x00"


def _in_validation(task_id: str, fraction: float) -> bool:
    # Salted, so the validation tasks are not the suite's held-out tasks (which never reach
    # an SFT export) and the fraction applies to the tasks that are there.
    h = int.from_bytes(hashlib.sha256(_SALT + task_id.encode()).digest()[:8], "big")
    return (h % 1_000_000) < fraction * 1_000_000


def validation_split(dataset: Any, fraction: float = 0.1) -> tuple[Any, Any]:
    """Split an exported dataset by task into ``(train, validation)``.

    Every row of a task lands on the same side, decided by a salted hash of its ``task_id``,
    so the split is the same in every run and process.

    Args:
        dataset: a ``datasets.Dataset`` with a ``task_id`` column (any knowlyr export).
        fraction: share of tasks held back, in ``[0, 1)``.

    Raises:
        ConfigError: ``fraction`` is out of range, the dataset has no ``task_id`` column, or
            the split leaves either side empty.
    """
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"validation fraction must be in [0, 1), got {fraction}")
    if "task_id" not in dataset.column_names:
        raise ConfigError(
            "validation_split needs a `task_id` column; export the dataset with knowlyr.export"
        )
    held = [_in_validation(t, fraction) for t in dataset["task_id"]]
    val_idx = [i for i, h in enumerate(held) if h]
    train_idx = [i for i, h in enumerate(held) if not h]
    if fraction > 0 and (not val_idx or not train_idx):
        raise ConfigError(
            f"a validation fraction of {fraction} leaves {len(train_idx)} training and "
            f"{len(val_idx)} validation rows out of {len(held)}; export more tasks or set "
            "validation_fraction=0 (and restarts=1)"
        )
    return dataset.select(train_idx), dataset.select(val_idx)


def select_best(metrics: Sequence[Mapping[str, Any]], *, key: str = VALIDATION_METRIC) -> int:
    """Index of the candidate with the lowest finite ``key`` (ties: the earliest).

    Raises:
        ConfigError: no candidate has a finite ``key`` (trained without a validation split?).
    """
    scored = [
        (float(m[key]), i)
        for i, m in enumerate(metrics)
        if isinstance(m.get(key), int | float) and math.isfinite(m[key])
    ]
    if not scored:
        raise ConfigError(
            f"no candidate has a finite {key!r}; train with a validation split "
            "(validation_fraction > 0) to select between restarts"
        )
    return min(scored)[1]


def restart(
    run: Callable[[int], T],
    seeds: Sequence[int],
    metrics: Callable[[T], Mapping[str, Any]],
    *,
    target: float | None = None,
    key: str = VALIDATION_METRIC,
) -> tuple[int, list[T]]:
    """Run ``run(seed)`` for each seed in turn and pick the lowest ``key`` among the results.

    Stops early once a result's ``key`` is at or below ``target``. Returns the index of the
    picked result and every result, in seed order.

    Raises:
        ConfigError: no seeds, or no result carries a finite ``key``.
    """
    if not seeds:
        raise ConfigError("restart needs at least one seed")
    results: list[T] = []
    for seed in seeds:
        results.append(run(seed))
        value = metrics(results[-1]).get(key)
        if target is not None and isinstance(value, int | float) and value <= target:
            break
    if len(results) == 1:
        return 0, results
    return select_best([metrics(r) for r in results], key=key), results

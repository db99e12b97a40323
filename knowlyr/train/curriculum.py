"""Where a night's attempts go: most of them to the families the champion half solves
(``IterateParams.curriculum = "frontier"``; the nightly default splits them evenly).

A loop night learns from the champion's own successful attempts. A family it always solves
gives rows it already imitates; a family it never solves gives none. What moves the policy is a
family it solves some of the time, where sampled attempts succeed that greedy decoding misses.
So the collection is split over the task families in proportion to ``4 p (1 - p)``, where ``p``
is the champion's success on the family in its latest held-out evaluation: 1 for a family it
solves half the time, 0.64 at 20% or 80%, with a floor so that no family is dropped (solved
families keep being collected, so their rows stay in the replay).

Measured on three nights of the nightly mix (README, "The nightly loop"): the families it
favoured rose (``cancel_order`` 57% -> 100% greedy on 23 independent tasks) and families it
collected little of fell (``address_change`` 91% -> 74%, ``ownership`` 78% -> 61%), so it is
not the default: a floor of 0.1 starves them of rows and the champion forgets them.

Example:
    >>> frontier_weights({"easy": (23, 23), "half": (11, 23), "never": (0, 23)})
    {'easy': 0.1, 'half': 0.998, 'never': 0.1}
    >>> split_by_weight(10, [1.0, 3.0, 1.0])
    [2, 6, 2]
    >>> split_by_weight(7, [1.0, 1.0, 1.0])  # equal weights: the first sources get the rest
    [3, 2, 2]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from knowlyr.store import Store

__all__ = ["FLOOR", "family_success", "frontier_weights", "split_by_weight"]

#: the least weight of a family (a solved or a never-solved one), against 1 for a half-solved one
FLOOR = 0.1


def frontier_weights(
    rates: Mapping[str, tuple[int, int]], floor: float = FLOOR
) -> dict[str, float]:
    """Each family's weight, ``max(floor, 4 p (1 - p))`` for ``p`` = successes / episodes
    (rounded to 3 digits)."""
    if not 0 < floor <= 1:
        raise ValueError(f"floor must be in (0, 1], got {floor}")
    out = {}
    for family, (ok, n) in rates.items():
        p = ok / n if n else 0.5
        out[family] = round(max(floor, 4 * p * (1 - p)), 3)
    return out


def split_by_weight(n: int, weights: Sequence[float]) -> list[int]:
    """``n`` split in proportion to ``weights`` (largest remainders; ties go to the earlier
    entry, so equal weights give the even split ``n // k + (j < n % k)``)."""
    if any(w <= 0 for w in weights):
        raise ValueError(f"weights must be positive, got {list(weights)}")
    total = sum(weights)
    quotas = [n * w / total for w in weights]
    out = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda j: (-(quotas[j] - out[j]), j))
    for j in order[: n - sum(out)]:
        out[j] += 1
    return out


def family_success(store: Store, checkpoint: str) -> dict[str, tuple[int, int]]:
    """(successes, episodes) by task family of ``checkpoint``'s (a blob digest) latest
    evaluation recorded in the store's ``evaluations`` table; empty when it has none."""
    import polars as pl

    if store.version("evaluations") is None:
        return {}
    rows = store.read(
        "evaluations",
        filter=pl.col("checkpoint") == checkpoint,
        columns=["eval_id", "task_id", "success", "created_at"],
    )
    if rows.height == 0:
        return {}
    latest = rows.sort("created_at").row(-1, named=True)["eval_id"]
    out: dict[str, tuple[int, int]] = {}
    for tid, ok in (
        rows.filter(pl.col("eval_id") == latest).select("task_id", "success").iter_rows()
    ):
        family = tid.split("-")[1] if tid.count("-") >= 2 else tid
        s, n = out.get(family, (0, 0))
        out[family] = (s + bool(ok), n + 1)
    return out

"""The trajectory list: its query (filters, sort, page) and how it runs over the store.

A list page never reads the ``data`` column (the trajectories' JSON). It runs over a *column
index*: the ``trajectories`` columns a list shows (id, task, agent, model, steps, outcome,
created_at) joined with each trajectory's latest reward total, read once per (trajectories
version, rewards version) and cached, since versions never change. A request then filters,
sorts and slices ~20 MB of columns in memory (a few ms for 100,000 rows; a lazy Delta scan
per request takes ~60 ms, see ``bench/view_bench.py``).

Example:
    >>> q = ListQuery.parse({"outcome": "success", "sort": "-reward", "page": "2"})
    >>> q.outcome, q.sort, q.page
    ('success', '-reward', 2)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from knowlyr.errors import ConfigError

if TYPE_CHECKING:
    import polars as pl

__all__ = ["INDEX_COLUMNS", "SORTS", "ListPage", "ListQuery", "index_frame", "run_query"]

#: the ``trajectories`` columns a list page shows (never ``data``)
INDEX_COLUMNS = (
    "id",
    "task_id",
    "domain",
    "agent",
    "model",
    "n_steps",
    "success",
    "score",
    "source_format",
    "created_at",
)
#: sortable columns (``-col`` sorts descending)
SORTS = ("created_at", "reward", "n_steps", "task_id", "agent", "score")
OUTCOMES = ("success", "failure", "unknown")
MAX_PER_PAGE = 200


@dataclass(frozen=True)
class ListQuery:
    """What the list page was asked for. Every field is a query parameter of ``/``.

    Attributes:
        task: task ids containing this text.
        agent: agent names or models containing this text.
        outcome: ``success``, ``failure`` or ``unknown`` (the log does not say).
        reward_min, reward_max: bounds on the latest reward total (inclusive); a bound
            leaves out trajectories without a reward.
        version: the ``trajectories`` version (time travel; default: the latest).
        run: the id (or an id prefix) of a run that added or saw the trajectories.
        sort: one of :data:`SORTS`, ``-`` in front for descending.
        page, per_page: 1-based page and its size (at most 200).
    """

    task: str | None = None
    agent: str | None = None
    outcome: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    version: int | None = None
    run: str | None = None
    sort: str = "-created_at"
    page: int = 1
    per_page: int = 50

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> ListQuery:
        """A query from URL parameters; empty values mean "no filter".

        Raises:
            ConfigError: an unknown parameter or a malformed value (the message names the
                parameter, the value and what it accepts).
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in params if k not in known)
        if unknown:
            raise ConfigError(
                f"unknown list parameter(s) {', '.join(map(repr, unknown))}: the list page "
                f"takes {', '.join(sorted(known))}"
            )
        v = {k: s.strip() for k, s in params.items() if s is not None and s.strip() != ""}
        out: dict[str, Any] = {}
        for name in ("task", "agent", "run"):
            if name in v:
                out[name] = v[name]
        if "outcome" in v:
            if v["outcome"] not in OUTCOMES:
                raise ConfigError(
                    f"outcome={v['outcome']!r}: expected one of {', '.join(OUTCOMES)}"
                )
            out["outcome"] = v["outcome"]
        for name in ("reward_min", "reward_max"):
            if name in v:
                out[name] = _number(name, v[name])
        if "reward_min" in out and "reward_max" in out and out["reward_min"] > out["reward_max"]:
            raise ConfigError(
                f"reward_min={out['reward_min']} is above reward_max={out['reward_max']}: swap them"
            )
        if "version" in v:
            out["version"] = _integer("version", v["version"], low=0)
        if "sort" in v:
            if v["sort"].lstrip("-") not in SORTS:
                raise ConfigError(
                    f"sort={v['sort']!r}: expected one of {', '.join(SORTS)} "
                    "(a leading '-' sorts descending)"
                )
            out["sort"] = v["sort"]
        if "page" in v:
            out["page"] = _integer("page", v["page"], low=1)
        if "per_page" in v:
            out["per_page"] = _integer("per_page", v["per_page"], low=1, high=MAX_PER_PAGE)
        return cls(**out)

    def params(self, **changes: Any) -> dict[str, str]:
        """This query (with ``changes``) as URL parameters, defaults left out."""
        q = replace(self, **changes)
        default = ListQuery()
        return {
            f.name: str(getattr(q, f.name))
            for f in fields(q)
            if getattr(q, f.name) is not None and getattr(q, f.name) != getattr(default, f.name)
        }

    def sorted_by(self, column: str) -> str:
        """The ``sort`` value a click on ``column``'s header asks for (toggles the order)."""
        if self.sort == f"-{column}":
            return column
        return f"-{column}"


def _number(name: str, raw: str) -> float:
    try:
        x = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number: give e.g. {name}=0.5") from None
    if not math.isfinite(x):
        raise ConfigError(f"{name}={raw!r} must be a finite number")
    return x


def _integer(name: str, raw: str, *, low: int, high: int | None = None) -> int:
    try:
        x = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if x < low or (high is not None and x > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{name}={x} is out of range: it must be {bound}")
    return x


@dataclass
class ListPage:
    """One page of the list: its rows (dicts of :data:`INDEX_COLUMNS` + ``reward``)."""

    query: ListQuery
    rows: list[dict[str, Any]]
    total: int
    version: int | None

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.query.per_page))


def index_frame(trajectories: pl.LazyFrame, rewards: pl.LazyFrame | None) -> pl.LazyFrame:
    """The list's column index: :data:`INDEX_COLUMNS` of ``trajectories`` and each one's
    latest reward total (``reward``, null when it has none) and its config hash."""
    import polars as pl

    lf = trajectories.select(INDEX_COLUMNS)
    if rewards is None:
        return lf.with_columns(
            pl.lit(None, pl.Float64).alias("reward"), pl.lit(None, pl.String).alias("config_hash")
        )
    latest = (
        rewards.select("trajectory_id", "total", "config_hash", "created_at")
        .sort("created_at", nulls_last=False)
        .group_by("trajectory_id")
        .last()
        .select("trajectory_id", pl.col("total").alias("reward"), "config_hash")
    )
    return lf.join(latest, left_on="id", right_on="trajectory_id", how="left")


def run_query(
    index: pl.LazyFrame, q: ListQuery, *, run_ids: pl.LazyFrame | None = None
) -> tuple[pl.DataFrame, int]:
    """Filter, sort and slice ``index`` (:func:`index_frame`) as ``q`` asks.

    ``run_ids`` (a frame of ``trajectory_id``) keeps the trajectories of ``q.run``.
    Returns the page's rows and how many rows match in all.
    """
    import polars as pl

    lf = index
    if q.task:
        lf = lf.filter(pl.col("task_id").str.contains(q.task, literal=True))
    if q.agent:
        has = pl.col("agent").str.contains(q.agent, literal=True)
        lf = lf.filter(has | pl.col("model").str.contains(q.agent, literal=True).fill_null(False))
    if q.outcome == "success":
        lf = lf.filter(pl.col("success").fill_null(False))
    elif q.outcome == "failure":
        lf = lf.filter(~pl.col("success").fill_null(True))
    elif q.outcome == "unknown":
        lf = lf.filter(pl.col("success").is_null())
    if q.reward_min is not None:
        lf = lf.filter(pl.col("reward") >= q.reward_min)
    if q.reward_max is not None:
        lf = lf.filter(pl.col("reward") <= q.reward_max)
    if run_ids is not None:
        lf = lf.join(run_ids, left_on="id", right_on="trajectory_id", how="semi")
    col, desc = q.sort.lstrip("-"), q.sort.startswith("-")
    ordered = lf.sort([col, "id"], descending=[desc, False], nulls_last=True)
    start = (q.page - 1) * q.per_page
    count, page = pl.collect_all([lf.select(pl.len()), ordered.slice(start, q.per_page)])
    return page, int(count.item())

"""Preference pairs and leaderboards built from scored trajectories.

Pairs: within each task, every (better, worse) pair of trajectories whose totals differ by at
least ``min_margin`` becomes a :class:`PreferencePair` with a reason a reviewer can read (the
margin, the outcomes, the rubrics that differ most). Leaderboard: per agent (and/or model),
the mean reward with a bootstrap confidence interval and the success rate with a Wilson
interval.

Example:
    >>> pairs = build_preferences(rewards, min_margin=0.05)          # doctest: +SKIP
    >>> rows = leaderboard(rewards, by=("agent",))                   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from knowlyr.errors import ConfigError
from knowlyr.reward.engine import TrajectoryReward

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "LeaderboardRow",
    "PreferencePair",
    "build_preferences",
    "leaderboard",
    "preferences_frame",
]


@dataclass
class PreferencePair:
    """``chosen`` beat ``rejected`` on the same task by ``margin`` under ``config_hash``."""

    pair_id: str
    task_id: str
    chosen_id: str
    rejected_id: str
    chosen_reward: float
    rejected_reward: float
    margin: float
    reason: str
    config_hash: str

    def to_row(self) -> dict[str, Any]:
        return {**asdict(self), "created_at": datetime.now(UTC)}


def _reason(c: TrajectoryReward, r: TrajectoryReward, margin: float) -> str:
    parts = [f"total {c.total:.3f} vs {r.total:.3f} (margin {margin:.3f})"]
    if c.success is not None and r.success is not None and c.success != r.success:
        parts.append(
            f"chosen {'succeeded' if c.success else 'failed'}, rejected {'succeeded' if r.success else 'failed'}"
        )
    gaps = [
        (c.rubric_scores[k] - r.rubric_scores[k], k)
        for k in c.rubric_scores
        if k in r.rubric_scores and abs(c.rubric_scores[k] - r.rubric_scores[k]) > 1e-9
    ]
    gaps.sort(key=lambda g: -abs(g[0]))
    if gaps:
        parts.append("rubric gaps: " + ", ".join(f"{k} {d:+.2f}" for d, k in gaps[:3]))
    nc, nr = len(c.step_rewards), len(r.step_rewards)
    if nc != nr:
        parts.append(f"{nc} vs {nr} steps")
    return "; ".join(parts)


def build_preferences(
    rewards: Sequence[TrajectoryReward],
    *,
    min_margin: float = 0.05,
    max_pairs_per_task: int | None = None,
) -> list[PreferencePair]:
    """Preference pairs within each task with ``total`` margin >= ``min_margin``.

    Pairs come best-margin first per task; ``max_pairs_per_task`` keeps the widest ones.
    Trajectories without a total are skipped; two copies of one trajectory never pair.

    Raises:
        ConfigError: a negative ``min_margin`` or non-positive ``max_pairs_per_task``.
    """
    if min_margin < 0:
        raise ConfigError(f"min_margin must be >= 0, got {min_margin}")
    if max_pairs_per_task is not None and max_pairs_per_task < 1:
        raise ConfigError(f"max_pairs_per_task must be >= 1, got {max_pairs_per_task}")
    by_task: dict[str, dict[str, TrajectoryReward]] = defaultdict(dict)
    for r in rewards:
        if r.total is not None:
            by_task[r.task_id].setdefault(r.trajectory_id, r)
    out: list[PreferencePair] = []
    for task_id in sorted(by_task):
        items = sorted(by_task[task_id].values(), key=lambda r: (-r.total, r.trajectory_id))
        pairs = []
        for i, c in enumerate(items):
            for r in items[i + 1 :]:
                margin = c.total - r.total
                if margin >= min_margin and margin > 0:
                    pairs.append((margin, c, r))
        pairs.sort(key=lambda p: (-p[0], p[1].trajectory_id, p[2].trajectory_id))
        if max_pairs_per_task is not None:
            pairs = pairs[:max_pairs_per_task]
        for margin, c, r in pairs:
            pid = hashlib.sha256(
                f"{c.trajectory_id}>{r.trajectory_id}@{c.config_hash}".encode()
            ).hexdigest()[:24]
            out.append(
                PreferencePair(
                    pid,
                    task_id,
                    c.trajectory_id,
                    r.trajectory_id,
                    c.total,
                    r.total,
                    margin,
                    _reason(c, r, margin),
                    c.config_hash,
                )
            )
    return out


def preferences_frame(pairs: Sequence[PreferencePair]) -> pl.DataFrame:
    """Rows for the store's ``preferences`` table."""
    import polars as pl

    return pl.DataFrame([p.to_row() for p in pairs], infer_schema_length=None)


@dataclass
class LeaderboardRow:
    """One agent's (or model's) standing."""

    key: dict[str, str | None]
    n: int
    mean_reward: float
    reward_low: float
    reward_high: float
    n_outcomes: int
    success_rate: float | None
    success_low: float | None
    success_high: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def leaderboard(
    rewards: Sequence[TrajectoryReward],
    *,
    by: Sequence[str] = ("agent",),
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[LeaderboardRow]:
    """Mean reward (bootstrap CI) and success rate (Wilson CI) per group, best first.

    Args:
        by: grouping fields of :class:`TrajectoryReward`: ``"agent"``, ``"model"`` or both.

    Raises:
        ConfigError: an unknown grouping field or a confidence outside (0, 1).
    """
    import numpy as np
    from scipy import stats

    for f in by:
        if f not in ("agent", "model", "task_id"):
            raise ConfigError(f"leaderboard by={f!r}: use 'agent', 'model' or 'task_id'")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    groups: dict[tuple, list[TrajectoryReward]] = defaultdict(list)
    for r in rewards:
        if r.total is not None:
            groups[tuple(getattr(r, f) for f in by)].append(r)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    rng = np.random.default_rng(seed)
    rows = []
    for key, items in groups.items():
        x = np.array([r.total for r in items], dtype=float)
        if x.size > 1:
            means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
            lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
        else:
            lo = hi = x[0]
        outcomes = [r.success for r in items if r.success is not None]
        if outcomes:
            k = sum(outcomes)
            slo, shi = _wilson(k, len(outcomes), z)
            rate: float | None = k / len(outcomes)
        else:
            rate = slo = shi = None
        rows.append(
            LeaderboardRow(
                dict(zip(by, key, strict=True)),
                int(x.size),
                float(x.mean()),
                float(lo),
                float(hi),
                len(outcomes),
                rate,
                slo,
                shi,
            )
        )
    rows.sort(key=lambda r: -r.mean_reward)
    return rows

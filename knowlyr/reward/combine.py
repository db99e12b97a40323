"""Rubric scores to step rewards, process reward and totals for a whole batch at once.

The formula is :class:`~knowlyr.reward.engine.RewardEngine`'s (see :mod:`knowlyr.reward.engine`);
this module computes it over flat per-step columns with numpy instead of per-step dicts, with
exactly the floating-point operations of the per-step loop, in the same order, so that the
numbers are bit for bit those of a Python loop over each trajectory:

- a step's ``r`` accumulates ``w * s`` and ``w`` rubric by rubric in the rubrics' order,
  skipping those not scored at the step (adding 0.0 leaves a float unchanged);
- sums over a trajectory's steps (the process reward's shortfall, a rubric's mean) run left to
  right like Python's ``sum``: :func:`segment_sums` adds the k-th value of every trajectory at
  once, for k = 0, 1, ... (never a pairwise or SIMD reduction, which rounds differently).

:func:`reward_rows` turns the result into the rows of the store's ``rewards`` table (a polars
frame, no per-trajectory objects); the engine builds its
:class:`~knowlyr.reward.engine.TrajectoryReward` objects from the same arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

__all__ = ["Combined", "RubricBlock", "TrajectoryInfo", "combine", "reward_rows", "segment_sums"]

#: Rubrics whose means :func:`combine` takes at once (each group's temporaries: ~16 bytes a
#: step and rubric).
MEAN_GROUP = 4


class RubricBlock:
    """Every rubric's score at every step of a batch (flat, trajectory after trajectory), as
    two (steps, rubrics) arrays: ``scores`` (float64; meaningless where not scored) and
    ``scored`` (bool: False = not applicable). ``names``: the rubrics, in column order."""

    __slots__ = ("names", "scored", "scores")

    def __init__(self, names: Sequence[str], scores: np.ndarray, scored: np.ndarray):
        self.names, self.scores, self.scored = tuple(names), scores, scored

    @classmethod
    def of(cls, columns: Sequence[tuple[str, np.ndarray, np.ndarray]]) -> RubricBlock:
        """A block of ``(name, scores, scored)`` columns (copied)."""
        import numpy as np

        return cls(
            [name for name, _, _ in columns],
            np.column_stack([scores for _, scores, _ in columns]),
            np.column_stack([scored for _, _, scored in columns]),
        )

    def joined(self, columns: Sequence[tuple[str, np.ndarray, np.ndarray]]) -> RubricBlock:
        """This block with ``columns`` added after its own."""
        return RubricBlock.of([*self.columns(), *columns])

    def rows(self, a: int, b: int) -> RubricBlock:
        """A block of rows ``a:b`` (a copy: it does not keep this block alive)."""
        import numpy as np

        return RubricBlock(
            self.names,
            np.ascontiguousarray(self.scores[a:b]),
            np.ascontiguousarray(self.scored[a:b]),
        )

    def columns(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """``(name, scores, scored)`` per rubric: views of the block's columns."""
        return [(name, self.scores[:, j], self.scored[:, j]) for j, name in enumerate(self.names)]


@dataclass
class TrajectoryInfo:
    """Per-trajectory columns a reward row needs, in batch order."""

    ids: list[str]
    task_ids: list[str]
    agents: list[str]
    models: list[str | None]
    success: list[bool | None]  # outcome.success, else outcome.resolved
    lengths: np.ndarray  # steps per trajectory (int64)


@dataclass
class Combined:
    """The engine's numbers for a batch: per step (flat, trajectory after trajectory) and per
    trajectory. ``None`` values are held as a False in the matching ``has_*`` mask."""

    step_reward: np.ndarray  # r_j (float64; meaningless where not has_step_reward)
    has_step_reward: np.ndarray
    process: np.ndarray
    has_process: np.ndarray
    total_raw: np.ndarray
    total: np.ndarray
    means: np.ndarray  # (n_traj, n_rubrics) mean score of each rubric where it applied
    has_mean: np.ndarray
    rubrics: list[str]  # the columns of ``means``


def segment_sums(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Left-to-right sums of consecutive segments (``values`` 1-D or 2-D, summed along axis 0),
    rounded exactly as Python's ``sum`` over each segment would round them."""
    import numpy as np

    out = np.zeros((len(starts), *values.shape[1:]), dtype=np.float64)
    if not len(starts):
        return out
    order = np.argsort(-lengths, kind="stable")  # longest first: the live ones are a prefix
    s, n = starts[order], lengths[order]
    acc = np.zeros_like(out)
    for k in range(int(n[0]) if len(n) else 0):
        live = int(np.searchsorted(-n, -k, side="left"))  # segments with more than k values
        acc[:live] += values[s[:live] + k]
    out[order] = acc
    return out


def _counts(mask: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """How many True values each segment of ``mask`` holds (along axis 0)."""
    import numpy as np

    cs = np.zeros(
        (len(mask) + 1, *mask.shape[1:]), dtype=np.int32 if len(mask) < 2**31 else np.int64
    )
    np.cumsum(mask, axis=0, out=cs[1:])
    return cs[starts + lengths] - cs[starts]


def combine(
    columns: Sequence[tuple[str, np.ndarray, np.ndarray]],
    lengths: np.ndarray,
    references: np.ndarray | None,
    success: Sequence[bool | None],
    *,
    weights: dict[str, float],
    rubrics: Sequence[str],
    outcome_weight: float,
    calibration: Any = None,
) -> Combined:
    """The engine's formula over a batch.

    Args:
        columns: ``(rubric, scores, scored)`` per rubric, in the order a step's scores are
            accumulated (rules, then judge rubrics); ``scores`` float64 per step (flat, in
            trajectory then step order), ``scored`` a bool mask (False = not applicable).
        lengths: steps per trajectory.
        references: each trajectory's reference length (NaN: none), or None.
        success: per trajectory, the outcome counted in ``total`` (None: unknown).
        weights: the engine's normalised weights.
        rubrics: the rubrics whose means are reported, in report order.
        outcome_weight: weight of the outcome in ``total``.
        calibration: a human :class:`~knowlyr.reward.calibration.CalibrationMap` (step or
            trajectory level) or None; an outcome calibration is applied by the engine.
    """
    import numpy as np

    n_steps = int(lengths.sum())
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    num = np.zeros(n_steps)
    den = np.zeros(n_steps)
    for name, scores, scored in columns:
        w = weights.get(name, 0.0)
        if w > 0:
            num += np.where(scored, w * scores, 0.0)
            den += np.where(scored, w, 0.0)
    has_r = den > 0
    r = np.divide(num, den, out=np.zeros(n_steps), where=has_r)
    level = getattr(calibration, "level", None)
    if level == "step" and has_r.any():
        r[has_r] = calibration.apply(r[has_r])
    # process = max(0, 1 - sum(1 - r) / L) over the scored steps
    shortfall = segment_sums(np.where(has_r, 1.0 - r, 0.0), starts, lengths)
    n_scored = _counts(has_r, starts, lengths)
    length = n_scored.astype(np.float64)
    if references is not None:
        ref = np.nan_to_num(references, nan=0.0)
        length = np.where(ref != 0.0, ref, length)  # `refs.get(ti) or len(scored)`
    has_p = n_scored > 0
    process = 1.0 - np.divide(shortfall, length, out=np.zeros_like(length), where=has_p)
    process = np.where(process > 0.0, process, 0.0)  # max(0.0, x), NaN included
    won = np.array([s is not None for s in success], dtype=bool)
    outcome = np.array([bool(s) for s in success], dtype=np.float64)
    total_raw = process.copy()
    if outcome_weight:
        mix = has_p & won
        total_raw[mix] = (1 - outcome_weight) * process[mix] + outcome_weight * outcome[mix]
    total = total_raw.copy()
    if level == "trajectory" and has_p.any():
        total[has_p] = calibration.apply(total_raw[has_p])
    by_name = {name: (scores, scored) for name, scores, scored in columns}
    means = np.zeros((len(lengths), len(rubrics)))
    has_mean = np.zeros((len(lengths), len(rubrics)), dtype=bool)
    present = [i for i, name in enumerate(rubrics) if name in by_name]
    for g in range(0, len(present) if n_steps else 0, MEAN_GROUP):  # a few rubrics at a time
        group = present[g : g + MEAN_GROUP]
        vals = np.stack([np.where(by_name[rubrics[i]][1], by_name[rubrics[i]][0], 0.0)
                         for i in group], axis=1)  # fmt: skip
        counts = _counts(np.stack([by_name[rubrics[i]][1] for i in group], axis=1), starts, lengths)
        sums = segment_sums(vals, starts, lengths)
        del vals
        ok = counts > 0
        means[:, group] = np.divide(sums, counts, out=np.zeros_like(sums), where=ok)
        has_mean[:, group] = ok
    return Combined(r, has_r, process, has_p, total_raw, total, means, has_mean, list(rubrics))


def rubric_scores(c: Combined, i: int) -> dict[str, float]:
    """Trajectory ``i``'s mean score per rubric (those that applied somewhere)."""
    return {
        name: float(m)
        for name, m, ok in zip(c.rubrics, c.means[i].tolist(), c.has_mean[i].tolist(), strict=True)
        if ok
    }


def reward_rows(
    c: Combined,
    info: TrajectoryInfo,
    step_rubrics: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    config_hash: str,
    judge: str | None = None,
    rationales: Sequence[list[str | None]] | None = None,
    judge_errors: Sequence[list[str | None]] | None = None,
) -> pl.DataFrame:
    """The rows of the store's ``rewards`` table for a batch, as a polars frame: the columns
    of :meth:`~knowlyr.reward.engine.TrajectoryReward.to_row` (``per_step`` NaN where no
    rubric applied; JSON text columns hold the same values)."""
    import numpy as np
    import polars as pl

    n = len(info.ids)
    lengths = info.lengths
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    per_step = pl.Series(np.where(c.has_step_reward, c.step_reward, np.nan))
    steps = pl.DataFrame(
        {
            name: pl.Series(name, scores).set(pl.Series(~scored), None)
            for name, scores, scored in step_rubrics
        }
    )
    dicts = steps.select(pl.struct(pl.all()).struct.json_encode()).to_series() if steps.width \
        else pl.Series([None] * int(offsets[-1]), dtype=pl.String)  # fmt: skip
    row_of = pl.Series(np.repeat(np.arange(n), lengths))
    step_json = (
        pl.DataFrame({"t": row_of, "d": dicts})
        .group_by("t", maintain_order=True)
        .agg(pl.col("d").str.join(","))
    )
    joined = np.full(n, "", dtype=object)
    joined[step_json["t"].to_numpy()] = step_json["d"].to_list()
    nulls = [None] * n
    rows = {
        "trajectory_id": info.ids,
        "config_hash": [config_hash] * n,
        "total": _opt(c.total, c.has_process),
        "per_step": _lists(per_step, offsets),
        "per_rubric": [orjson.dumps(rubric_scores(c, i)).decode() for i in range(n)],
        "rationale": _json_lists(rationales, lengths),
        "judge": [judge] * n,
        "judge_errors": _json_lists(judge_errors, lengths),
        "created_at": [datetime.now(UTC)] * n,
        "task_id": info.task_ids,
        "agent": info.agents,
        "model": info.models,
        "total_raw": _opt(c.total_raw, c.has_process),
        "success": info.success,
        "step_rubrics": [f"[{s}]" for s in joined.tolist()],
        "missing_layers": [
            '["judge"]' if judge_errors is not None and any(e is not None for e in errs) else "[]"
            for errs in (judge_errors if judge_errors is not None else nulls)
        ],
        "process": _opt(c.process, c.has_process),
    }
    return pl.DataFrame(rows, schema=_schema())


def _schema() -> dict[str, Any]:
    import polars as pl

    s, f = pl.String, pl.Float64
    return {
        "trajectory_id": s, "config_hash": s, "total": f, "per_step": pl.List(f),
        "per_rubric": s, "rationale": s, "judge": s, "judge_errors": s,
        "created_at": pl.Datetime("us", "UTC"), "task_id": s, "agent": s, "model": s,
        "total_raw": f, "success": pl.Boolean, "step_rubrics": s, "missing_layers": s,
        "process": f,
    }  # fmt: skip


def _opt(values: np.ndarray, ok: np.ndarray) -> pl.Series:
    import polars as pl

    return pl.Series(values).set(pl.Series(~ok), None)


def _lists(flat: pl.Series, offsets: np.ndarray) -> pl.Series:
    import polars as pl
    import pyarrow as pa

    from knowlyr._arrow import number_array

    # not pa.array(offsets): its pandas check imports pandas (~40 MB, ~0.2 s) into every
    # process that scores documents, the workers of score_files included
    arr = pa.ListArray.from_arrays(number_array(offsets, pa.int32()), flat.to_arrow())
    return pl.Series(arr)


def _json_lists(values: Sequence[list[Any]] | None, lengths: np.ndarray) -> list[str]:
    """JSON of each trajectory's list (a list of ``null`` per step when ``values`` is None)."""
    if values is not None:
        return [orjson.dumps(v).decode() for v in values]
    cache: dict[int, str] = {}
    out = []
    for n in lengths.tolist():
        s = cache.get(n)
        if s is None:
            s = cache[n] = orjson.dumps([None] * n).decode()
        out.append(s)
    return out
